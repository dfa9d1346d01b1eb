// FuzzInput: the format the request fuzzer and its seed generator share.
//
//   byte 0      operation: index into the service's op table (modulo its size)
//   byte 1      bits 0-1: which of four client connections sends it;
//               bit 2: sent over tcp from a remote address (else over ipc)
//   then        payload frames, each a 2-byte little-endian length and its bytes
//
// Thread-safety: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmcache::fuzz {

struct FuzzRequest {
  std::size_t op_index = 0;
  unsigned connection = 0;
  bool remote_tcp = false;
  std::vector<std::string_view> payloads;
};

inline constexpr std::size_t kMaxFrames = 8;

inline bool ParseFuzzInput(const std::uint8_t* data, std::size_t size, FuzzRequest* out) {
  if (size < 2) return false;
  out->op_index = data[0];
  out->connection = data[1] & 3u;
  out->remote_tcp = (data[1] & 4u) != 0;
  std::size_t pos = 2;
  while (pos + 2 <= size && out->payloads.size() < kMaxFrames) {
    const std::size_t length = data[pos] | (std::size_t{data[pos + 1]} << 8);
    pos += 2;
    const std::size_t take = std::min(length, size - pos);
    out->payloads.emplace_back(reinterpret_cast<const char*>(data + pos), take);
    pos += take;
  }
  return true;
}

inline std::string MakeFuzzInput(std::uint8_t op_index, std::uint8_t flags,
                                 const std::vector<std::string>& payloads) {
  std::string out;
  out.push_back(static_cast<char>(op_index));
  out.push_back(static_cast<char>(flags));
  for (const std::string& p : payloads) {
    const std::size_t length = std::min<std::size_t>(p.size(), 0xffff);
    out.push_back(static_cast<char>(length & 0xff));
    out.push_back(static_cast<char>(length >> 8));
    out.append(p.data(), length);
  }
  return out;
}

}  // namespace lmcache::fuzz
