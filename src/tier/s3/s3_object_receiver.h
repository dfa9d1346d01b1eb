// S3ObjectReceiver: one GET's reply body, checked as it arrives in pieces:
// the header is parsed from the first bytes (its declared length bounded
// before anything is kept), then the payload goes straight into the
// object's L1 buffer (its start, for an encoded payload) and into the
// checksum. Finish says what the whole reply was: loaded (verified, and
// decoded where it was encoded), missing (404; an object that is not ours
// (no magic: the reference's, under the name it would give it), another
// geometry's or a newer encoding's: all left alone), corrupt (ours but
// damaged, truncated or padded: to be deleted) or failed (no good answer
// from the gateway, or a reply cut short whose length was never declared).
// Nothing reaches the buffer beyond its end, whatever the bytes say.
//
// Thread-safety: one reply at a time (S3Client calls it from its thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tier/l2_adapter.h"
#include "tier/object_format.h"
#include "tier/s3/s3_client.h"

namespace lmcache::tier {

class S3ObjectReceiver {
 public:
  explicit S3ObjectReceiver(const L2Read& read) : read_(read) {}

  // S3BodySink: false refuses the reply (Finish then says why).
  bool Accept(std::uint64_t offset, std::int64_t length, std::span<const std::byte> piece);
  L2LoadOutcome Finish(const S3Response& response) const;

 private:
  // Collects the header's bytes from `piece` (advancing it); false refuses.
  bool TakeHeader(std::int64_t length, std::span<const std::byte>* piece);
  bool Refuse(L2LoadOutcome why);
  // Whether what arrived so far could be the start of an object of ours.
  bool MayBeOurs() const;
  void Reset();

  const L2Read read_;
  std::string head_;
  std::optional<ObjectHeader> header_;
  std::unique_ptr<PayloadChecksummer> sum_;
  std::uint64_t offset_in_payload_ = 0;
  std::int64_t declared_length_ = -1;  // the reply's Content-Length (-1: none)
  L2LoadOutcome refused_ = L2LoadOutcome::kCorrupt;
};

}  // namespace lmcache::tier
