// RespCommand and RespRequest: Redis commands, and their encoding as one
// pipelined RESP request that references large values instead of copying them.
//
// A KV object is written as SET key <header + payload>: the payload is
// megabytes already sitting in L1. hiredis's formatter copies every argument
// into its output buffer (after the adapter had copied header and payload
// into one value), so a SET of 8 MiB cost two copies before the first byte
// left. RespRequest writes the small parts (array and bulk headers, short
// arguments) into one buffer of its own and points at the large arguments,
// so a writev() sends them from where they are (issue 18).
//
// Thread-safety: plain values; a RespRequest belongs to one thread, and the
// bytes its commands point at must stay unchanged until it is written.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lmcache::tier {

// One command: up to six arguments (SET key value EX ttl is the longest).
// `continuation`, when not empty, is more bytes of argument `continued`: the
// argument sent is args[continued] followed by them (a header and the
// payload it describes, as one value, without joining them first).
struct RespCommand {
  std::array<std::string_view, 6> args{};
  int argc = 0;
  int continued = -1;
  std::string_view continuation;
};

class RespRequest {
 public:
  // Arguments from this size on are sent from where they are, not copied.
  static constexpr std::size_t kReferenceBytes = 4096;

  void Add(const RespCommand& command);
  // The request, in order, as pieces for writev(); valid until the next Add.
  const std::vector<iovec>& Pieces();
  std::size_t bytes() const { return bytes_; }

 private:
  struct Piece {
    const char* referenced;  // nullptr: `length` bytes of owned_ from `offset`
    std::size_t offset;
    std::size_t length;
  };
  void Own(std::string_view bytes);
  void Reference(std::string_view bytes);
  void Argument(std::string_view bytes);
  void Header(char type, std::size_t count);

  std::string owned_;
  std::vector<Piece> pieces_;
  std::vector<iovec> iovecs_;
  std::size_t bytes_ = 0;
};

}  // namespace lmcache::tier
