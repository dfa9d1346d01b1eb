// What the wire decoders share (internal to protocol/): a bounded text
// field, the required-field bookkeeping of a map decoder, an int array.
//
// Thread-safety: stateless functions; a RequiredFields is one decode's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "lmcache/status.h"

namespace lmcache::protocol {

using msgpk::Malformed;
using msgpk::MsgpackCursor;

inline Result<std::string> Text(MsgpackCursor& in, std::string_view what, std::size_t max_bytes) {
  LMC_ASSIGN_OR_RETURN(const std::string_view text, in.ReadStr(what));
  if (text.size() > max_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + " is " + std::to_string(text.size()) +
                                            " bytes long; the limit is " +
                                            std::to_string(max_bytes));
  }
  return std::string(text);
}

// Bit flags of the required fields a map decoder has seen.
class RequiredFields {
 public:
  void Saw(unsigned bit) { seen_ |= 1u << bit; }
  // The first of `names` (indexed by bit) that was not seen, as an error.
  Status Check(std::string_view what, std::initializer_list<const char*> names) const {
    unsigned bit = 0;
    for (const char* name : names) {
      if ((seen_ & (1u << bit)) == 0) {
        return Malformed(what, "missing required field '" + std::string(name) + "'");
      }
      ++bit;
    }
    return Status::Ok();
  }

 private:
  unsigned seen_ = 0;
};

inline Result<std::vector<std::int64_t>> IntArray(MsgpackCursor& in, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader(what));
  std::vector<std::int64_t> values;
  values.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    LMC_ASSIGN_OR_RETURN(const std::int64_t value, in.ReadInt(what));
    values.push_back(value);
  }
  return values;
}

}  // namespace lmcache::protocol
