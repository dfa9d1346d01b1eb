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
  shm::CreateOptions options{config.shm_name, config.size_bytes, config.shm_dir,
                             /*reserve_all=*/!config.background_prefault};
  LMC_ASSIGN_OR_RETURN(cache->segment_, shm::ShmSegment::Create(options));
  const bool background = config.background_prefault;
  LMC_ASSIGN_OR_RETURN(cache->allocator_,
                       alloc::SlabAllocator::Create(cache->segment_->bytes(), config.allocator,
                                                    background ? 0 : config.size_bytes));
  cache->prefault_started_ = std::chrono::steady_clock::now();
  if (background) {
    const std::uint64_t step = std::max(config.prefault_step_bytes, config.allocator.page_bytes);
    cache->prefaulter_ = std::thread(
        [raw = cache.get(), threads = config.prefault_threads, step, dir = config.shm_dir] {
          raw->PrefaultInBackground(threads, step, dir);
        });
  } else {
    const shm::PrefaultReport report = cache->segment_->Prefault(config.prefault_threads);
    cache->prefaulted_bytes_ = config.size_bytes;
    cache->prefault_seconds_ = report.seconds;
    cache->prefault_done_ = true;
    spdlog::info("pre-faulted {:.2f} GiB of {}/{} in {:.3f} s ({:.2f} GiB/s, {} threads)",
                 static_cast<double>(config.size_bytes) / static_cast<double>(kGiB),
                 config.shm_dir, config.shm_name, report.seconds, report.gib_per_second,
                 report.threads);
  }

  cache->table_ = std::make_unique<ObjectTable>(cache->allocator_.get(), cache->policy_.get(),
                                                clock, config.table);
  cache->table_->AddListener(&cache->flow_);
  cache->evictor_ = std::make_unique<Evictor>(cache->table_.get(), config.evictor);
  cache->table_->AddListener(cache->evictor_.get());
  if (config.background_eviction) cache->evictor_->Start();
  return cache;
}

void L1Cache::PrefaultInBackground(unsigned threads, std::uint64_t step,
                                   const std::string& shm_dir) {
  const std::uint64_t total = segment_->size();
  for (std::uint64_t offset = 0; offset < total && !stop_prefault_.load(); offset += step) {
    // Reserved first (no write can SIGBUS), then faulted in, then handed out.
    if (Status reserved = segment_->Reserve(offset, step, shm_dir); !reserved.ok()) {
      spdlog::error("the L1 pool stays at {:.2f} of {:.2f} GiB: {}",
                    static_cast<double>(offset) / static_cast<double>(kGiB),
                    static_cast<double>(total) / static_cast<double>(kGiB), reserved.message());
      prefault_failed_.store(true);
      allocator_->StopGrowing();  // stores waiting for pages stop waiting
      break;
    }
    segment_->PrefaultRange(offset, step, threads);
    const std::uint64_t ready = std::min(total, offset + step);
    allocator_->MakeReady(ready);
    prefaulted_bytes_.store(ready, std::memory_order_release);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - prefault_started_).count();
  prefault_seconds_.store(seconds);
  if (stop_prefault_.load() || prefault_failed_.load()) return;
  prefault_done_.store(true, std::memory_order_release);
  spdlog::info("pre-faulted {:.2f} GiB of the L1 pool {} in the background in {:.3f} s "
               "({:.2f} GiB/s)",
               static_cast<double>(total) / static_cast<double>(kGiB), segment_->name(), seconds,
               seconds > 0 ? static_cast<double>(total) / static_cast<double>(kGiB) / seconds : 0);
}

L1Cache::PrefaultProgress L1Cache::prefault() const {
  PrefaultProgress p;
  p.ready_bytes = prefaulted_bytes_.load(std::memory_order_acquire);
  p.total_bytes = segment_->size();
  p.done = prefault_done_.load(std::memory_order_acquire);
  p.failed = prefault_failed_.load(std::memory_order_acquire);
  p.seconds = p.done ? prefault_seconds_.load()
                     : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                     prefault_started_)
                           .count();
  return p;
}

bool L1Cache::WaitPrefaulted(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!prefault_done_.load(std::memory_order_acquire) && !prefault_failed_.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    allocator_->WaitReadyBeyond(allocator_->ready_bytes(), std::chrono::milliseconds(50));
  }
  return prefault_done_.load(std::memory_order_acquire);
}

L1Cache::~L1Cache() {
  stop_prefault_.store(true);
  if (prefaulter_.joinable()) prefaulter_.join();
  if (evictor_) evictor_->Stop();
  // Members go in reverse order: table, policy, allocator, then the segment,
  // whose destructor unmaps and unlinks it.
}

}  // namespace lmcache::store
