// RespReplyStream: reads RESP replies from a socket and puts the bytes of
// large bulk strings where their caller wants them, without a copy.
//
// Loading an 8 MiB object through hiredis cost three copies of it (hiredis
// reads 16 KiB at a time into its buffer, growing it; it copies the bulk into
// a reply object; the adapter copied that into L1) and 512 reads. Here the
// first bytes of a bulk string (up to kHeadBytes: the object header and the
// start of its payload) are shown to a sink, which names the memory the rest
// belongs in (an L1 slot); what is already buffered is copied there and the
// rest is read straight into it with large reads (issue 18).
//
// Replies understood: simple strings, errors, integers, bulk strings and nil.
// An array, or anything malformed, is a protocol error: the caller must drop
// the connection. The socket's receive timeout (SO_RCVTIMEO, set by hiredis)
// bounds every read; a timeout is kTimeout.
//
// Thread-safety: one reader per connection, used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tier {

struct StreamedReply {
  enum class Kind { kStatus, kError, kInteger, kBulk, kNil };
  Kind kind = Kind::kNil;
  std::string text;             // a status or error line; a bulk string's head when not placed
  std::int64_t integer = 0;     // kInteger
  std::uint64_t length = 0;     // kBulk: the whole string's length
  bool placed = false;          // kBulk: its bytes from `skip` on went where the sink said
};

// Where bytes [skip, length) of a bulk string go. An empty `to` (or one that
// does not hold exactly length - skip bytes) means: read and discard them.
// `arrived`, when set, sees each piece of `to` as it lands, in order and
// exactly once: a checksum computed there overlaps with the peer's sending
// and reads bytes still in the cache.
struct BulkPlacement {
  std::span<std::byte> to;
  std::uint64_t skip = 0;
  std::function<void(std::span<const std::byte>)> arrived;
};
// Called for reply `index` of a pipeline once the first min(length,
// kHeadBytes) bytes of its bulk string have arrived.
using BulkSink = std::function<BulkPlacement(std::size_t index, std::uint64_t length,
                                             std::span<const std::byte> head)>;

class RespReplyStream {
 public:
  static constexpr std::size_t kHeadBytes = 16 << 10;
  // A bulk string longer than this is a protocol error (Redis caps strings at 512 MiB).
  static constexpr std::uint64_t kMaxBulkBytes = 1ull << 30;

  explicit RespReplyStream(int fd);

  // The next reply; `index` is passed to `sink` for a bulk string.
  Result<StreamedReply> Next(std::size_t index, const BulkSink& sink);
  // True when no byte beyond the replies read so far has arrived.
  bool drained() const { return begin_ == end_; }

 private:
  Status Fill(std::size_t bytes);  // until `bytes` are buffered (at most the buffer's size)
  Result<std::string_view> Line();
  Status ReadBulk(std::size_t index, std::uint64_t length, const BulkSink& sink,
                  StreamedReply* reply);
  // Buffered bytes first, then straight from the socket; `arrived` sees each piece.
  Status ReadInto(std::span<std::byte> to,
                  const std::function<void(std::span<const std::byte>)>& arrived);
  Status Discard(std::uint64_t bytes);
  Status ReadFailure(long result);

  const int fd_;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;  // unread bytes are [begin_, end_)
  std::size_t end_ = 0;
};

}  // namespace lmcache::tier
