// ByteWriter and ByteReader: the one encoding of our own binary formats (the
// takeover handover, the pool journal's key namespaces, the UCX descriptor
// peers exchange). Fixed-width integers are little-endian whatever the host
// (the descriptor crosses hosts); a string is a u32 length then its bytes; a
// list of ints is a u64 count then the values.
//
// The reader takes untrusted bytes: every read is bounds-checked, a count is
// refused when its items could not fit in the bytes left (so no count makes
// the reader reserve memory the input does not back), and each failure is a
// kMalformedRequest that names the message and the field.
// Thread-safety: none; each writer or reader is used by one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lmcache/status.h"

namespace lmcache {

class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_integral_v<T>);
    auto wide = static_cast<std::make_unsigned_t<T>>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      out_.push_back(static_cast<char>(wide & 0xff));
      if constexpr (sizeof(T) > 1) wide >>= 8;
    }
  }
  void PutString(std::string_view s) {
    Put(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void PutInts(const std::vector<std::int64_t>& values) {
    Put(static_cast<std::uint64_t>(values.size()));
    for (const std::int64_t v : values) Put(v);
  }
  void PutRaw(std::string_view bytes) { out_.append(bytes); }
  void Reserve(std::size_t bytes) { out_.reserve(bytes); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  // `what` names the message in errors ("takeover hello"); it must outlive the reader.
  ByteReader(std::string_view bytes, std::string_view what) : bytes_(bytes), what_(what) {}

  template <typename T>
  Status Get(T* value, std::string_view field) {
    static_assert(std::is_integral_v<T>);
    if (left() < sizeof(T)) return Truncated(field);
    std::make_unsigned_t<T> wide = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      wide |= static_cast<std::make_unsigned_t<T>>(
                  static_cast<unsigned char>(bytes_[pos_ + i]))
              << (8 * i);
    }
    pos_ += sizeof(T);
    *value = static_cast<T>(wide);
    return Status::Ok();
  }
  Status GetBool(bool* value, std::string_view field) {
    std::uint8_t byte = 0;
    LMC_RETURN_IF_ERROR(Get(&byte, field));
    if (byte > 1) return Bad(field, "is neither 0 nor 1");
    *value = byte == 1;
    return Status::Ok();
  }
  // A length-prefixed string of at most `max_bytes`.
  Status GetString(std::string* value, std::string_view field,
                   std::uint32_t max_bytes = UINT32_MAX) {
    std::uint32_t size = 0;
    LMC_RETURN_IF_ERROR(Get(&size, field));
    if (size > max_bytes) {
      return Bad(field, "is " + std::to_string(size) + " bytes, over " +
                            std::to_string(max_bytes));
    }
    std::string_view raw;
    LMC_RETURN_IF_ERROR(GetRaw(size, &raw, field));
    value->assign(raw);
    return Status::Ok();
  }
  // A list's count, refused when even `min_item_bytes` per item would not fit
  // in what is left.
  Status GetCount(std::uint64_t* count, std::size_t min_item_bytes, std::string_view field) {
    LMC_RETURN_IF_ERROR(Get(count, field));
    if (*count > left() / std::max<std::size_t>(min_item_bytes, 1)) {
      return Bad(field, "counts " + std::to_string(*count) + " items, more than the bytes left");
    }
    return Status::Ok();
  }
  Status GetInts(std::vector<std::int64_t>* values, std::string_view field) {
    std::uint64_t count = 0;
    LMC_RETURN_IF_ERROR(GetCount(&count, sizeof(std::int64_t), field));
    values->resize(count);
    for (std::int64_t& v : *values) LMC_RETURN_IF_ERROR(Get(&v, field));
    return Status::Ok();
  }
  // The next `n` bytes as they are, viewing the reader's input.
  Status GetRaw(std::size_t n, std::string_view* out, std::string_view field) {
    if (left() < n) return Truncated(field);
    *out = bytes_.substr(pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  bool AtEnd() const { return pos_ == bytes_.size(); }
  // Succeeds only when every byte was read.
  Status Finish() const {
    if (pos_ != bytes_.size()) {
      return Bad("end", std::to_string(left()) + " bytes follow the message");
    }
    return Status::Ok();
  }
  Status Bad(std::string_view field, const std::string& why) const {
    return Status(ErrorCode::kMalformedRequest,
                  std::string(what_) + ": " + std::string(field) + " " + why);
  }

 private:
  std::size_t left() const { return bytes_.size() - pos_; }
  Status Truncated(std::string_view field) const {
    return Bad(field, "is cut short at byte " + std::to_string(pos_));
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
  std::string_view what_;
};

}  // namespace lmcache
