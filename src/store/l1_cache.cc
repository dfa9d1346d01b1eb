#include "store/l1_cache.h"

#include <spdlog/spdlog.h>

#include "common/system_info.h"
#include "shm/shm_name.h"

#include "stats/ratio.h"

namespace lmcache::store {
namespace {

// Huge pages where /dev/shm gives them (shm/huge_pages.h); the pool must be
// made of whole pages of the kind it gets.
Result<shm::HugePagePlan> PlanPoolPages(const L1Config& config) {
  shm::HugePagePlan plan;
  if (auto facts = shm::ReadHugePageFacts(config.shm_dir); facts.ok()) {
    LMC_ASSIGN_OR_RETURN(plan, shm::PlanHugePages(config.huge_pages, config.shm_dir, *facts));
  } else if (config.huge_pages == shm::HugePageMode::kOn) {
    return Status(ErrorCode::kInvalidConfig,
                  "--l1-hugepages on, but " + facts.status().message());
  } else {
    plan.how = "4 KiB pages (" + facts.status().message() + ")";
  }
  if (config.size_bytes % plan.page_bytes != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  "the L1 pool (" + std::to_string(config.size_bytes) + " bytes) is not a whole "
                  "number of the " + std::to_string(plan.page_bytes >> 10) + " KiB pages of " +
                  config.shm_dir + ": give --l1-size-gb in whole GiB");
  }
  spdlog::info("L1 pool pages: {}", plan.how);
  return plan;
}

// The journal, told of the slabs the allocator has (an adopted pool's) and
// of the pages already usable, before anything is lent.
Status AttachJournalTo(std::unique_ptr<SlotJournal>* journal, alloc::SlabAllocator& allocator,
                       const shm::ShmSegment& segment, const L1Config& config,
                       std::uint64_t ready_bytes) {
  if (!config.journal) return Status::Ok();
  LMC_ASSIGN_OR_RETURN(*journal, config.journal(config.shm_name, GeometryOf(config), segment));
  (*journal)->ReadyBytes(ready_bytes);
  allocator.SetSlabObserver(journal->get());
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<L1Cache>> L1Cache::Create(const L1Config& config, const Clock* clock,
                                                 std::unique_ptr<EvictionPolicy> policy) {
  LMC_RETURN_IF_ERROR(ValidateEvictorConfig(config.evictor));
  std::unique_ptr<L1Cache> cache(new L1Cache());
  if (policy) {
    cache->policy_ = std::move(policy);
  } else {
    LMC_ASSIGN_OR_RETURN(cache->policy_, MakeEvictionPolicy(config.eviction_policy, config.table.quota_mode != QuotaMode::kOff));
  }

  for (const std::string& name : shm::RemoveOrphanedPoolSegments(config.shm_dir)) {
    spdlog::warn("removed stale segment {}/{} left by a server that no longer runs", config.shm_dir,
                 name);
  }
  LMC_ASSIGN_OR_RETURN(const shm::HugePagePlan huge, PlanPoolPages(config));
  shm::CreateOptions options{config.shm_name, config.size_bytes, config.shm_dir,
                             /*reserve_all=*/!config.background_prefault, huge.advise};
  LMC_ASSIGN_OR_RETURN(cache->segment_, shm::ShmSegment::Create(options));
  LMC_RETURN_IF_ERROR(Assemble(cache.get(), config, clock, 0));
  if (cache->journal_) LMC_RETURN_IF_ERROR(cache->journal_->Publish());
  return cache;
}

PoolGeometry GeometryOf(const L1Config& config) {
  return {config.size_bytes, config.allocator.align_bytes, config.allocator.page_bytes,
          config.allocator.slab_target_bytes};
}

Result<std::unique_ptr<L1Cache>> L1Cache::Adopt(const L1Config& config, const Clock* clock,
                                                std::unique_ptr<shm::ShmSegment> segment,
                                                const PoolImage& image, AdoptionReport* report) {
  LMC_RETURN_IF_ERROR(ValidateEvictorConfig(config.evictor));
  std::unique_ptr<L1Cache> cache(new L1Cache());
  LMC_ASSIGN_OR_RETURN(cache->policy_, MakeEvictionPolicy(config.eviction_policy, config.table.quota_mode != QuotaMode::kOff));
  cache->segment_ = std::move(segment);
  // Until the adoption succeeds the name stays the predecessor's (ClaimName).
  if (image.ready_bytes > config.size_bytes) {
    return InvalidArgument("the handed-over pool claims more ready bytes than it has");
  }
  L1Config adopted = config;
  adopted.background_eviction = false;  // started once the objects are in
  LMC_RETURN_IF_ERROR(Assemble(cache.get(), adopted, clock, image.ready_bytes));
  std::vector<alloc::Offset> offsets;
  offsets.reserve(image.table.resident.size() + image.table.held.size());
  for (const AdoptedObject& object : image.table.resident) offsets.push_back(object.offset);
  for (const HeldSlot& slot : image.table.held) offsets.push_back(slot.offset);
  LMC_RETURN_IF_ERROR(cache->allocator_->Adopt(image.slabs, offsets));
  LMC_ASSIGN_OR_RETURN(*report, cache->table_->Adopt(image.table));
  // Only now, with every adopted object and held slot recorded, does the new
  // journal replace the predecessor's (a crash before leaves that one whole).
  if (cache->journal_) LMC_RETURN_IF_ERROR(cache->journal_->Publish());
  cache->segment_->ClaimName();
  if (config.background_eviction) cache->evictor_->Start();
  return cache;
}

Status L1Cache::Assemble(L1Cache* cache, const L1Config& config, const Clock* clock,
                         std::uint64_t ready_bytes) {
  const bool background = config.background_prefault || ready_bytes > 0;
  LMC_ASSIGN_OR_RETURN(
      cache->allocator_,
      alloc::SlabAllocator::Create(cache->segment_->bytes(), config.allocator,
                                   background ? ready_bytes : config.size_bytes));
  cache->prefaulted_bytes_ = ready_bytes;
  LMC_RETURN_IF_ERROR(AttachJournalTo(&cache->journal_, *cache->allocator_, *cache->segment_,
                                      config, background ? ready_bytes : config.size_bytes));
  cache->prefault_started_ = std::chrono::steady_clock::now();
  if (background) {
    const std::uint64_t step = std::max(config.prefault_step_bytes, config.allocator.page_bytes);
    cache->prefaulter_ =
        std::thread([raw = cache, from = ready_bytes, threads = config.prefault_threads, step,
                     dir = config.shm_dir, gate = config.before_prefault_step] {
          raw->PrefaultInBackground(from, threads, step, dir, gate);
        });
  } else {
    const shm::PrefaultReport report = cache->segment_->Prefault(config.prefault_threads);
    cache->prefaulted_bytes_ = config.size_bytes;
    cache->ReportPrefaultDone(report.seconds, "");
  }
  cache->table_ = std::make_unique<ObjectTable>(cache->allocator_.get(), cache->policy_.get(),
                                                clock, config.table);
  cache->table_->AddListener(&cache->flow_);
  if (cache->journal_) cache->table_->SetJournal(cache->journal_.get());
  for (const auto& [salt, bytes] : config.quotas) {
    LMC_RETURN_IF_ERROR(cache->table_->SetQuota(salt, bytes));
  }
  cache->evictor_ = std::make_unique<Evictor>(cache->table_.get(), config.evictor);
  cache->table_->AddListener(cache->evictor_.get());
  if (config.background_eviction) cache->evictor_->Start();
  return Status::Ok();
}

void L1Cache::StopBackgroundWork() {
  stop_prefault_.store(true);
  if (prefaulter_.joinable()) prefaulter_.join();
  if (evictor_) evictor_->Stop();
}

PoolImage L1Cache::StopAndExport() {
  StopBackgroundWork();
  PoolImage image;
  image.ready_bytes = allocator_->ready_bytes();
  image.slabs = allocator_->Slabs();
  image.table = table_->Export();
  return image;
}

void L1Cache::PrefaultInBackground(std::uint64_t from, unsigned threads, std::uint64_t step,
                                   const std::string& shm_dir,
                                   const std::function<void(std::uint64_t)>& before_step) {
  const std::uint64_t total = segment_->size();
  for (std::uint64_t offset = from; offset < total && !stop_prefault_.load(); offset += step) {
    if (before_step) before_step(offset);
    if (stop_prefault_.load()) break;
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
    // The journal first: a slab recovery finds beyond its ready mark is dropped.
    if (journal_) journal_->ReadyBytes(ready);
    allocator_->MakeReady(ready);
    prefaulted_bytes_.store(ready, std::memory_order_release);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - prefault_started_).count();
  if (stop_prefault_.load() || prefault_failed_.load()) {
    prefault_seconds_.store(seconds);
    return;
  }
  ReportPrefaultDone(seconds, " in the background");
}

void L1Cache::ReportPrefaultDone(double seconds, const char* how) {
  const std::uint64_t total = segment_->size();
  huge_page_bytes_.store(shm::HugeMappedBytes(segment_->base()));
  prefault_seconds_.store(seconds);
  prefault_done_.store(true, std::memory_order_release);
  const auto gib = [](std::uint64_t bytes) {
    return static_cast<double>(bytes) / static_cast<double>(kGiB);
  };
  spdlog::info("pre-faulted {:.2f} GiB of the L1 pool {}{} in {:.3f} s ({:.2f} GiB/s); "
               "{:.2f} GiB of it in huge pages",
               gib(total), segment_->name(), how, seconds, seconds > 0 ? gib(total) / seconds : 0,
               gib(huge_page_bytes_.load()));
}

L1Cache::PrefaultProgress L1Cache::prefault() const {
  PrefaultProgress p;
  p.ready_bytes = prefaulted_bytes_.load(std::memory_order_acquire);
  p.total_bytes = segment_->size();
  p.done = prefault_done_.load(std::memory_order_acquire);
  p.failed = prefault_failed_.load(std::memory_order_acquire);
  p.huge_page_bytes = huge_page_bytes_.load();
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
  StopBackgroundWork();
  // Members go in reverse order: table, policy, allocator, then the segment,
  // whose destructor unmaps and unlinks it.
}

LMC_STATS_ROWS(PrefaultStatRows, PrefaultProgress, LMC_PREFAULT_STATS)

double PrefaultProgress::ReadyRatio() const {
  return stats::UsedRatio(ready_bytes, total_bytes).value_or(0);
}

}  // namespace lmcache::store
