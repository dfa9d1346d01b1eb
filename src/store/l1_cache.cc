#include "store/l1_cache.h"

#include <spdlog/spdlog.h>

#include "common/system_info.h"
#include "shm/shm_name.h"

namespace lmcache::store {

Result<std::unique_ptr<L1Cache>> L1Cache::Create(const L1Config& config, const Clock* clock,
                                                 std::unique_ptr<EvictionPolicy> policy) {
  LMC_RETURN_IF_ERROR(ValidateEvictorConfig(config.evictor));
  std::unique_ptr<L1Cache> cache(new L1Cache());
  if (policy) {
    cache->policy_ = std::move(policy);
  } else {
    LMC_ASSIGN_OR_RETURN(cache->policy_, MakeEvictionPolicy(config.eviction_policy));
  }

  for (const std::string& name : shm::RemoveOrphanedPoolSegments(config.shm_dir)) {
    spdlog::warn("removed stale segment {}/{} left by a server that no longer runs", config.shm_dir,
                 name);
  }
  shm::CreateOptions options{config.shm_name, config.size_bytes, config.shm_dir};
  LMC_ASSIGN_OR_RETURN(cache->segment_, shm::ShmSegment::Create(options));
  LMC_ASSIGN_OR_RETURN(cache->allocator_,
                       alloc::SlabAllocator::Create(cache->segment_->bytes(), config.allocator));

  cache->prefault_ = cache->segment_->Prefault(config.prefault_threads);
  spdlog::info("pre-faulted {:.2f} GiB of {}/{} in {:.3f} s ({:.2f} GiB/s, {} threads)",
               static_cast<double>(config.size_bytes) / static_cast<double>(kGiB), config.shm_dir,
               config.shm_name, cache->prefault_.seconds, cache->prefault_.gib_per_second,
               cache->prefault_.threads);

  cache->table_ = std::make_unique<ObjectTable>(cache->allocator_.get(), cache->policy_.get(),
                                                clock, config.table);
  cache->table_->AddListener(&cache->flow_);
  cache->evictor_ = std::make_unique<Evictor>(cache->table_.get(), config.evictor);
  cache->table_->AddListener(cache->evictor_.get());
  if (config.background_eviction) cache->evictor_->Start();
  return cache;
}

L1Cache::~L1Cache() {
  if (evictor_) evictor_->Stop();
  // Members go in reverse order: table, policy, allocator, then the segment,
  // whose destructor unmaps and unlinks it.
}

}  // namespace lmcache::store
