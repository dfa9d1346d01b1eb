#include "gpu/host_kv_copy.h"

#include <cstring>

namespace lmcache::gpu {

void HostGather(const kv::ChunkCopy& c, std::span<std::byte* const> layer_bases, std::byte* object) {
  const std::int64_t units = kv::UnitCount(c);
  const auto run = static_cast<std::size_t>(kv::RunBytes(c.paged));
  for (std::int64_t u = 0; u < units; ++u) {
    const kv::UnitAddress a = kv::Locate(c, u);
    if (!kv::Copied(c, a, true)) continue;
    std::memcpy(object + a.object, layer_bases[static_cast<std::size_t>(a.layer)] + a.paged, run);
  }
}

void HostScatter(const kv::ChunkCopy& c, std::span<std::byte* const> layer_bases,
                 const std::byte* object) {
  const std::int64_t units = kv::UnitCount(c);
  const auto run = static_cast<std::size_t>(kv::RunBytes(c.paged));
  for (std::int64_t u = 0; u < units; ++u) {
    const kv::UnitAddress a = kv::Locate(c, u);
    if (!kv::Copied(c, a, false)) continue;
    std::memcpy(layer_bases[static_cast<std::size_t>(a.layer)] + a.paged, object + a.object, run);
  }
}

}  // namespace lmcache::gpu
