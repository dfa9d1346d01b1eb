#include "tier/s3/s3_object_receiver.h"

#include <algorithm>
#include <cstring>

namespace lmcache::tier {

bool S3ObjectReceiver::Accept(std::uint64_t offset, std::int64_t length,
                              std::span<const std::byte> piece) {
  if (offset == 0) Reset();  // a retried attempt starts over
  declared_length_ = length;
  while (!piece.empty()) {
    if (!header_) {
      if (!TakeHeader(length, &piece)) return false;
      continue;
    }
    const std::uint64_t at = offset_in_payload_;
    if (at + piece.size() > header_->payload_bytes) return Refuse(L2LoadOutcome::kCorrupt);
    std::memcpy(read_.out.data() + at, piece.data(), piece.size());
    sum_->Add(piece);
    offset_in_payload_ += piece.size();
    piece = {};
  }
  return true;
}

L2LoadOutcome S3ObjectReceiver::Finish(const S3Response& response) const {
  if (response.error.code() == ErrorCode::kCorrupt) return refused_;  // Accept refused it
  if (!response.error.ok()) return L2LoadOutcome::kFailed;
  if (response.http_status == 404) return L2LoadOutcome::kMissing;
  if (!response.ok()) return L2LoadOutcome::kFailed;
  if (!header_) return MayBeOurs() ? L2LoadOutcome::kCorrupt : L2LoadOutcome::kMissing;
  if (sum_->bytes() != header_->payload_bytes) {
    // Cut short: with a declared length that is the object's, not ours
    // (TakeHeader checked it), and with none the transfer, not the object.
    return declared_length_ < 0 ? L2LoadOutcome::kFailed : L2LoadOutcome::kCorrupt;
  }
  if (!VerifyObjectSummed(*header_, *read_.key, sum_->bytes(), sum_->Digest()).ok()) {
    return L2LoadOutcome::kCorrupt;
  }
  return DecodePayload(header_->encoding, header_->payload_bytes, read_.out).ok()
             ? L2LoadOutcome::kLoaded
             : L2LoadOutcome::kCorrupt;
}

bool S3ObjectReceiver::TakeHeader(std::int64_t length, std::span<const std::byte>* piece) {
  constexpr std::size_t kDeclaredAt = 16;  // magic, version, header_bytes
  std::size_t wanted = kDeclaredAt;
  if (head_.size() >= kDeclaredAt) {
    const std::uint32_t declared = DeclaredHeaderBytes(std::as_bytes(std::span(head_)));
    if (declared < kHeaderFixedBytesV1 || declared > kMaxHeaderBytes) {
      return Refuse(L2LoadOutcome::kCorrupt);
    }
    wanted = declared;
  }
  const std::size_t take = std::min(wanted - head_.size(), piece->size());
  head_.append(reinterpret_cast<const char*>(piece->data()), take);
  *piece = piece->subspan(take);
  if (!MayBeOurs()) return Refuse(L2LoadOutcome::kMissing);  // someone else's: never deleted
  if (head_.size() < wanted || wanted == kDeclaredAt) return true;
  auto parsed = ParseObjectHeader(std::as_bytes(std::span(head_)));
  if (!parsed.ok()) {
    // A newer server's encoding: kept, not served.
    return Refuse(parsed.status().code() == ErrorCode::kNotSupported ? L2LoadOutcome::kMissing
                                                                     : L2LoadOutcome::kCorrupt);
  }
  if (length >= 0 &&
      parsed->header_bytes + parsed->payload_bytes != static_cast<std::uint64_t>(length)) {
    return Refuse(L2LoadOutcome::kCorrupt);  // truncated or padded: not what a PUT of ours wrote
  }
  // Another server registered this model with another geometry: intact,
  // not ours to load (or delete).
  if (parsed->object_bytes() != read_.out.size()) return Refuse(L2LoadOutcome::kMissing);
  if (parsed->payload_bytes > read_.out.size()) return Refuse(L2LoadOutcome::kCorrupt);
  header_ = std::move(parsed).value();
  sum_ = std::make_unique<PayloadChecksummer>();
  return true;
}

bool S3ObjectReceiver::MayBeOurs() const {
  return MayBeginObject(std::as_bytes(std::span(head_)));  // an empty object is not ours
}

bool S3ObjectReceiver::Refuse(L2LoadOutcome why) {
  refused_ = why;
  return false;
}

void S3ObjectReceiver::Reset() {
  head_.clear();
  header_.reset();
  sum_.reset();
  offset_in_payload_ = 0;
  declared_length_ = -1;
  refused_ = L2LoadOutcome::kCorrupt;
}

}  // namespace lmcache::tier
