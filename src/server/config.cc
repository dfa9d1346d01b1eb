#include "server/config.h"

#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "common/system_info.h"
#include "shm/shm_name.h"

namespace lmcache::server {

void AddFlags(CLI::App& app, ServerConfig* c) {
  app.add_option("--l1-size-gb", c->l1_size_gb,
                 "Size of the L1 shared-memory pool in GiB (2^30 bytes; fractions allowed). "
                 "Default: a quarter of physical memory in whole GiB, at least 1 (" +
                     std::to_string(static_cast<int>(DefaultL1SizeGb())) + " on this machine)");
  app.add_option("--shm-name", c->shm_name,
                 "Name of the pool segment under /dev/shm; a leading '/' is dropped and the prefix "
                 "'lmcache_l1_pool_' added when missing. Default: lmcache_l1_pool_<server pid>");
  app.add_option("--l1-align-bytes", c->l1_align_bytes,
                 "Alignment and size granule of every L1 object, in bytes (power of two >= 64)")
      ->capture_default_str();
  app.add_option("--l1-write-ttl-seconds", c->l1_write_ttl_seconds,
                 "Write lease in seconds: a staged object not committed within it is freed")
      ->capture_default_str();
  app.add_option("--l1-read-ttl-seconds", c->l1_read_ttl_seconds,
                 "Read lease in seconds: after it a read-locked object becomes evictable again")
      ->capture_default_str();
  app.add_option("--eviction-policy", c->eviction_policy, "L1 eviction policy: LRU or noop")
      ->capture_default_str();
  app.add_option("--eviction-trigger-watermark", c->eviction_trigger_watermark,
                 "Fraction of the pool in use, in (0, 1], at which background eviction starts")
      ->capture_default_str();
  app.add_option("--eviction-ratio", c->eviction_ratio,
                 "Fraction of the pool, in (0, 1], that one eviction pass frees: it evicts until "
                 "usage <= trigger watermark - ratio")
      ->capture_default_str();
  app.add_option("--eviction-interval-ms", c->eviction_interval_ms,
                 "Milliseconds between background eviction passes")
      ->capture_default_str();
  app.add_flag("--on-demand-eviction,!--no-on-demand-eviction", c->on_demand_eviction,
               "When a store cannot allocate, evict unlocked LRU objects at once to make room "
               "(default: on)");
  app.add_option("--prefault-threads", c->prefault_threads,
                 "Threads that pre-fault the pool at startup; 0 = one per core")
      ->capture_default_str();
  app.add_option("--log-level", c->log_level,
                 "Log level: trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
}

double DefaultL1SizeGb() {
  const std::uint64_t quarter_gib = PhysicalMemoryBytes() / 4 / kGiB;
  return static_cast<double>(std::max<std::uint64_t>(quarter_gib, 1));
}

Status Finalize(ServerConfig* c, pid_t pid) {
  if (c->l1_size_gb == 0) c->l1_size_gb = DefaultL1SizeGb();
  if (!(c->l1_size_gb > 0) || !std::isfinite(c->l1_size_gb)) {
    return InvalidConfig("--l1-size-gb must be a positive number of GiB");
  }
  if (c->l1_size_gb > 1e9) return InvalidConfig("--l1-size-gb is beyond any machine");
  if (c->l1_write_ttl_seconds <= 0) {
    return InvalidConfig("--l1-write-ttl-seconds must be > 0 (a 0 lease would expire every write)");
  }
  if (c->l1_read_ttl_seconds <= 0) {
    return InvalidConfig("--l1-read-ttl-seconds must be > 0 (a 0 lease would expire every read)");
  }
  if (!IsValidLogLevel(c->log_level)) {
    return InvalidConfig("--log-level: unknown level '" + c->log_level + "'");
  }
  LMC_ASSIGN_OR_RETURN(c->l1.shm_name, shm::NormalizePoolName(c->shm_name, pid));

  store::L1Config& l1 = c->l1;
  l1.size_bytes = static_cast<std::uint64_t>(c->l1_size_gb * static_cast<double>(kGiB));
  l1.size_bytes = l1.size_bytes / 4096 * 4096;
  if (l1.size_bytes == 0) return InvalidConfig("--l1-size-gb is smaller than one page");
  l1.shm_dir = c->shm_dir;
  l1.prefault_threads = c->prefault_threads;
  l1.eviction_policy = c->eviction_policy;
  l1.allocator.align_bytes = c->l1_align_bytes;
  l1.allocator.page_bytes = std::max<std::uint64_t>(l1.allocator.page_bytes, c->l1_align_bytes);
  l1.table.write_ttl_ms = c->l1_write_ttl_seconds * 1000;
  l1.table.read_ttl_ms = c->l1_read_ttl_seconds * 1000;
  l1.table.on_demand_eviction = c->on_demand_eviction;
  l1.evictor.trigger_watermark = c->eviction_trigger_watermark;
  l1.evictor.eviction_ratio = c->eviction_ratio;
  l1.evictor.interval_ms = c->eviction_interval_ms;
  LMC_RETURN_IF_ERROR(store::ValidateEvictorConfig(l1.evictor));
  LMC_RETURN_IF_ERROR(store::MakeEvictionPolicy(c->eviction_policy).status());
  if (c->l1_align_bytes < 64 || (c->l1_align_bytes & (c->l1_align_bytes - 1)) != 0) {
    return InvalidConfig("--l1-align-bytes must be a power of two >= 64, got " +
                         std::to_string(c->l1_align_bytes));
  }
  return Status::Ok();
}

}  // namespace lmcache::server
