#include "alloc/slab_allocator.h"

#include <algorithm>
#include <bit>
#include <string>

#include "stats/ratio.h"

namespace lmcache::alloc {
namespace {

std::uint64_t RoundUp(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

Status ValidateConfig(std::span<std::byte> span, const SlabAllocatorConfig& c) {
  if (c.align_bytes < 64 || !std::has_single_bit(c.align_bytes)) {
    return InvalidConfig("--l1-align-bytes must be a power of two >= 64, got " +
                         std::to_string(c.align_bytes));
  }
  if (c.page_bytes == 0 || c.page_bytes % c.align_bytes != 0) {
    return InvalidConfig("slab page size (" + std::to_string(c.page_bytes) +
                         " bytes) must be a non-zero multiple of --l1-align-bytes (" +
                         std::to_string(c.align_bytes) + ")");
  }
  if (c.slab_target_bytes == 0) return InvalidConfig("slab target size must be > 0");
  if (c.max_classes == 0) return InvalidConfig("max size classes must be > 0");
  if (reinterpret_cast<std::uintptr_t>(span.data()) % c.align_bytes != 0) {
    return InvalidArgument("allocator span is not aligned to " + std::to_string(c.align_bytes));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SlabAllocator>> SlabAllocator::Create(std::span<std::byte> span,
                                                             const SlabAllocatorConfig& config,
                                                             std::uint64_t ready_bytes) {
  LMC_RETURN_IF_ERROR(ValidateConfig(span, config));
  return std::unique_ptr<SlabAllocator>(
      new SlabAllocator(span, config, ready_bytes / config.page_bytes));
}

SlabAllocator::SlabAllocator(std::span<std::byte> span, const SlabAllocatorConfig& config,
                             std::uint64_t ready_pages)
    : span_(span),
      config_(config),
      num_pages_(span.size() / config.page_bytes),
      pool_(num_pages_, ready_pages),
      ready_pages_(std::min(ready_pages, num_pages_)),
      page_to_slab_(num_pages_, 0) {}

void SlabAllocator::MakeReady(std::uint64_t bytes) {
  const std::uint64_t pages = std::min(bytes / config_.page_bytes, num_pages_);
  std::vector<std::function<void()>> waiters;
  {
    MutexLock lock(&mu_);
    if (pages <= ready_pages_) return;
    pool_.Give(ready_pages_, pages - ready_pages_);
    ready_pages_ = pages;
    waiters.swap(ready_waiters_);
  }
  ready_grew_.NotifyAll();
  for (auto& wake : waiters) wake();
}

bool SlabAllocator::growing() const {
  MutexLock lock(&mu_);
  return growing_ && ready_pages_ < num_pages_;
}

void SlabAllocator::NotifyWhenReadyBeyond(std::uint64_t seen, std::function<void()> wake) {
  {
    MutexLock lock(&mu_);
    if (ready_pages_ * config_.page_bytes <= seen && ready_pages_ < num_pages_ && growing_) {
      ready_waiters_.push_back(std::move(wake));
      return;
    }
  }
  wake();
}

bool SlabAllocator::WaitReadyBeyond(std::uint64_t seen, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (ready_pages_ * config_.page_bytes <= seen && ready_pages_ < num_pages_ && growing_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    ready_grew_.WaitFor(&lock, deadline - now);
  }
  return ready_pages_ * config_.page_bytes > seen;
}

void SlabAllocator::StopGrowing() {
  std::vector<std::function<void()>> waiters;
  {
    MutexLock lock(&mu_);
    growing_ = false;
    waiters.swap(ready_waiters_);
  }
  ready_grew_.NotifyAll();
  for (auto& wake : waiters) wake();
}

std::uint64_t SlabAllocator::ready_bytes() const {
  MutexLock lock(&mu_);
  return ready_pages_ * config_.page_bytes;
}

std::uint64_t SlabAllocator::AlignedSize(std::uint64_t size) const {
  return RoundUp(std::max<std::uint64_t>(size, 1), config_.align_bytes);
}

Result<std::uint32_t> SlabAllocator::ClassForLocked(std::uint64_t object_bytes) {
  if (auto it = class_by_size_.find(object_bytes); it != class_by_size_.end()) return it->second;
  if (class_by_size_.size() >= config_.max_classes) {
    return Status(ErrorCode::kResourceExhausted,
                  "too many distinct object sizes in use (" + std::to_string(config_.max_classes) +
                      "); cannot add a class for " + std::to_string(object_bytes) + " bytes");
  }
  SizeClass cls;
  cls.object_bytes = object_bytes;
  const std::uint64_t wanted = std::max<std::uint64_t>(1, config_.slab_target_bytes / object_bytes);
  cls.pages_per_slab = RoundUp(wanted * object_bytes, config_.page_bytes) / config_.page_bytes;
  // The page rounding may leave room for more objects than asked for: use it.
  cls.objects_per_slab = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(cls.pages_per_slab * config_.page_bytes / object_bytes, UINT32_MAX));
  cls.live = true;
  std::uint32_t id = 0;
  while (id < classes_.size() && classes_[id].live) ++id;
  if (id == classes_.size()) {
    classes_.push_back(std::move(cls));
  } else {
    classes_[id] = std::move(cls);
  }
  class_by_size_.emplace(object_bytes, id);
  return id;
}

void SlabAllocator::MaybeRetireClassLocked(std::uint32_t class_id) {
  SizeClass& cls = classes_[class_id];
  if (cls.slabs != 0) return;
  class_by_size_.erase(cls.object_bytes);
  cls = SizeClass{};
}

std::optional<std::uint32_t> SlabAllocator::AddSlabLocked(std::uint32_t class_id) {
  SizeClass& cls = classes_[class_id];
  // A full-size slab first; when the pool has no run that long (a small or
  // fragmented pool), halve the slab down to a single object before giving up.
  std::uint64_t objects = cls.objects_per_slab;
  std::uint64_t pages = cls.pages_per_slab;
  std::optional<std::uint64_t> first = pool_.Take(pages);
  while (!first && objects > 1) {
    objects /= 2;
    pages = RoundUp(objects * cls.object_bytes, config_.page_bytes) / config_.page_bytes;
    first = pool_.Take(pages);
  }
  if (!first) return std::nullopt;
  return InstallSlabLocked(class_id, *first, pages);
}

std::uint32_t SlabAllocator::InstallSlabLocked(std::uint32_t class_id, std::uint64_t first,
                                               std::uint64_t pages) {
  SizeClass& cls = classes_[class_id];
  const auto capacity = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(pages * config_.page_bytes / cls.object_bytes, UINT32_MAX));
  std::uint32_t id;
  if (!unused_slab_ids_.empty()) {
    id = unused_slab_ids_.back();
    unused_slab_ids_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(slabs_.size());
    slabs_.emplace_back();
  }
  Slab& slab = slabs_[id];
  slab.class_id = class_id;
  slab.first_page = first;
  slab.num_pages = pages;
  slab.capacity = capacity;
  slab.in_use.assign(slab.capacity, false);
  slab.free_slots.resize(slab.capacity);
  for (std::uint32_t i = 0; i < slab.capacity; ++i) slab.free_slots[i] = slab.capacity - 1 - i;
  slab.live = true;
  std::fill_n(page_to_slab_.begin() + static_cast<std::ptrdiff_t>(slab.first_page), slab.num_pages,
              id + 1);
  cls.slabs += 1;
  cls.free_slots += slab.capacity;
  cls.partial.emplace(slab.first_page, id);
  if (observer_ != nullptr) observer_->SlabAdded({slab.first_page, slab.num_pages, cls.object_bytes});
  return id;
}

void SlabAllocator::ReleaseSlabLocked(std::uint32_t slab_id) {
  Slab& slab = slabs_[slab_id];
  SizeClass& cls = classes_[slab.class_id];
  if (observer_ != nullptr) {
    observer_->SlabReleased({slab.first_page, slab.num_pages, cls.object_bytes});
  }
  cls.partial.erase(slab.first_page);
  cls.slabs -= 1;
  cls.free_slots -= slab.capacity;
  std::fill_n(page_to_slab_.begin() + static_cast<std::ptrdiff_t>(slab.first_page), slab.num_pages,
              0);
  pool_.Give(slab.first_page, slab.num_pages);
  const std::uint32_t class_id = slab.class_id;
  slab = Slab{};
  unused_slab_ids_.push_back(slab_id);
  MaybeRetireClassLocked(class_id);
}

Offset SlabAllocator::TakeSlotLocked(std::uint32_t class_id) {
  SizeClass& cls = classes_[class_id];
  // Lowest-address partial slab first: live objects gather at the bottom, so
  // slabs higher up empty and return to the pool.
  const std::uint32_t slab_id = cls.partial.begin()->second;
  Slab& slab = slabs_[slab_id];
  const std::uint32_t slot = slab.free_slots.back();
  slab.free_slots.pop_back();
  slab.in_use[slot] = true;
  if (slab.free_slots.empty()) cls.partial.erase(slab.first_page);
  cls.free_slots -= 1;
  cls.used += 1;
  used_bytes_ += cls.object_bytes;
  return slab.first_page * config_.page_bytes + std::uint64_t{slot} * cls.object_bytes;
}

Result<std::vector<Offset>> SlabAllocator::AllocateLocked(std::uint64_t size, std::size_t count) {
  if (size == 0) return InvalidArgument("cannot allocate an object of 0 bytes");
  const std::uint64_t object_bytes = AlignedSize(size);
  if (object_bytes > capacity_bytes()) {
    failed_allocations_ += 1;
    return Status(ErrorCode::kOutOfMemory, "object of " + std::to_string(object_bytes) +
                                               " bytes exceeds the pool capacity of " +
                                               std::to_string(capacity_bytes()) + " bytes");
  }
  if (count == 0) return std::vector<Offset>{};
  LMC_ASSIGN_OR_RETURN(const std::uint32_t class_id, ClassForLocked(object_bytes));
  // Grow the class until it has `count` free slots; undo the growth on failure.
  std::vector<std::uint32_t> added_slabs;
  while (classes_[class_id].free_slots < count) {
    const auto slab_id = AddSlabLocked(class_id);
    if (!slab_id) {
      for (const std::uint32_t added : added_slabs) ReleaseSlabLocked(added);
      MaybeRetireClassLocked(class_id);
      failed_allocations_ += 1;
      return Status(ErrorCode::kOutOfMemory, "no room for " + std::to_string(count) +
                                                 " object(s) of " + std::to_string(object_bytes) +
                                                 " bytes");
    }
    added_slabs.push_back(*slab_id);
  }
  std::vector<Offset> offsets;
  offsets.reserve(count);
  for (std::size_t i = 0; i < count; ++i) offsets.push_back(TakeSlotLocked(class_id));
  allocations_ += count;
  return offsets;
}

Result<Offset> SlabAllocator::Allocate(std::uint64_t size) {
  MutexLock lock(&mu_);
  LMC_ASSIGN_OR_RETURN(std::vector<Offset> offsets, AllocateLocked(size, 1));
  return offsets.front();
}

Result<std::vector<Offset>> SlabAllocator::AllocateBatch(std::uint64_t size, std::size_t count) {
  MutexLock lock(&mu_);
  return AllocateLocked(size, count);
}

Result<std::uint32_t> SlabAllocator::SlabOfLocked(Offset offset, std::uint32_t* slot,
                                                  bool in_use) const {
  const std::uint64_t page = offset / config_.page_bytes;
  if (page >= num_pages_ || page_to_slab_[page] == 0) {
    return InvalidArgument("offset " + std::to_string(offset) + " is not inside a live slab");
  }
  const std::uint32_t slab_id = page_to_slab_[page] - 1;
  const Slab& slab = slabs_[slab_id];
  const std::uint64_t object_bytes = classes_[slab.class_id].object_bytes;
  const std::uint64_t within = offset - slab.first_page * config_.page_bytes;
  if (within % object_bytes != 0 || within / object_bytes >= slab.capacity ||
      slab.in_use[within / object_bytes] != in_use) {
    return InvalidArgument("offset " + std::to_string(offset) + " is not " +
                           (in_use ? "a live object" : "a free slot"));
  }
  *slot = static_cast<std::uint32_t>(within / object_bytes);
  return slab_id;
}

Status SlabAllocator::FreeLocked(Offset offset) {
  std::uint32_t slot = 0;
  LMC_ASSIGN_OR_RETURN(const std::uint32_t slab_id, SlabOfLocked(offset, &slot));
  Slab& slab = slabs_[slab_id];
  SizeClass& cls = classes_[slab.class_id];
  slab.in_use[slot] = false;
  if (slab.free_slots.empty()) cls.partial.emplace(slab.first_page, slab_id);
  slab.free_slots.push_back(slot);
  cls.free_slots += 1;
  cls.used -= 1;
  used_bytes_ -= cls.object_bytes;
  frees_ += 1;
  if (slab.free_slots.size() == slab.capacity) ReleaseSlabLocked(slab_id);
  return Status::Ok();
}

Status SlabAllocator::Free(Offset offset) {
  MutexLock lock(&mu_);
  return FreeLocked(offset);
}

Status SlabAllocator::FreeBatch(std::span<const Offset> offsets) {
  MutexLock lock(&mu_);
  Status first_error;
  for (const Offset offset : offsets) {
    Status status = FreeLocked(offset);
    if (!status.ok() && first_error.ok()) first_error = std::move(status);
  }
  return first_error;
}

Result<std::uint64_t> SlabAllocator::ObjectSize(Offset offset) const {
  MutexLock lock(&mu_);
  std::uint32_t slot = 0;
  LMC_ASSIGN_OR_RETURN(const std::uint32_t slab_id, SlabOfLocked(offset, &slot));
  return classes_[slabs_[slab_id].class_id].object_bytes;
}

std::uint64_t SlabAllocator::UsedBytes() const {
  MutexLock lock(&mu_);
  return used_bytes_;
}

AllocatorStats SlabAllocator::Stats() const {
  MutexLock lock(&mu_);
  AllocatorStats stats;
  stats.capacity_bytes = capacity_bytes();
  stats.used_bytes = used_bytes_;
  stats.free_bytes = stats.capacity_bytes - used_bytes_;
  stats.pool_free_bytes = pool_.free_pages() * config_.page_bytes;
  stats.unready_bytes = (num_pages_ - ready_pages_) * config_.page_bytes;
  stats.slab_slack_bytes = stats.free_bytes - stats.pool_free_bytes - stats.unready_bytes;
  stats.largest_free_run_bytes = pool_.largest_run() * config_.page_bytes;
  stats.largest_allocatable_bytes = stats.largest_free_run_bytes;
  stats.fragmentation = stats.pool_free_bytes == 0
                            ? 0
                            : 1.0 - static_cast<double>(stats.largest_free_run_bytes) /
                                        static_cast<double>(stats.pool_free_bytes);
  stats.allocations = allocations_;
  stats.frees = frees_;
  stats.failed_allocations = failed_allocations_;
  for (const auto& [object_bytes, class_id] : class_by_size_) {
    const SizeClass& cls = classes_[class_id];
    stats.classes.push_back(
        {cls.object_bytes, cls.objects_per_slab, cls.slabs, cls.used, cls.free_slots});
    if (cls.free_slots > 0) {
      stats.largest_allocatable_bytes = std::max(stats.largest_allocatable_bytes, object_bytes);
    }
  }
  return stats;
}

std::vector<SlabRecord> SlabAllocator::Slabs() const {
  MutexLock lock(&mu_);
  std::vector<SlabRecord> out;
  for (const Slab& slab : slabs_) {
    if (!slab.live) continue;
    out.push_back({slab.first_page, slab.num_pages, classes_[slab.class_id].object_bytes});
  }
  std::sort(out.begin(), out.end(),
            [](const SlabRecord& a, const SlabRecord& b) { return a.first_page < b.first_page; });
  return out;
}

void SlabAllocator::SetSlabObserver(SlabObserver* observer) {
  MutexLock lock(&mu_);
  observer_ = observer;
  if (observer_ == nullptr) return;
  for (const Slab& slab : slabs_) {
    if (slab.live) {
      observer_->SlabAdded({slab.first_page, slab.num_pages, classes_[slab.class_id].object_bytes});
    }
  }
}

Status SlabAllocator::AdoptSlabLocked(const SlabRecord& record) {
  const std::string which = "slab at page " + std::to_string(record.first_page);
  if (record.object_bytes == 0 || record.object_bytes % config_.align_bytes != 0 ||
      record.object_bytes > capacity_bytes()) {
    return InvalidArgument(which + ": object size " + std::to_string(record.object_bytes) +
                           " is not a multiple of the alignment within the pool");
  }
  if (record.num_pages == 0 || record.num_pages > ready_pages_ ||
      record.first_page > ready_pages_ - record.num_pages ||
      record.num_pages * config_.page_bytes < record.object_bytes) {
    return InvalidArgument(which + " (" + std::to_string(record.num_pages) +
                           " pages) does not lie in the ready pages or holds no object");
  }
  LMC_ASSIGN_OR_RETURN(const std::uint32_t class_id, ClassForLocked(record.object_bytes));
  if (!pool_.TakeAt(record.first_page, record.num_pages)) {
    MaybeRetireClassLocked(class_id);
    return InvalidArgument(which + " overlaps another slab");
  }
  (void)InstallSlabLocked(class_id, record.first_page, record.num_pages);
  return Status::Ok();
}

Status SlabAllocator::AdoptObjectLocked(Offset offset) {
  std::uint32_t slot = 0;
  LMC_ASSIGN_OR_RETURN(const std::uint32_t slab_id, SlabOfLocked(offset, &slot, /*in_use=*/false));
  Slab& slab = slabs_[slab_id];
  SizeClass& cls = classes_[slab.class_id];
  // The free-slot stacks are rebuilt once all objects are in (Adopt): an
  // erase here would cost a slab's length per object.
  slab.in_use[slot] = true;
  cls.used += 1;
  used_bytes_ += cls.object_bytes;
  allocations_ += 1;
  return Status::Ok();
}

Status SlabAllocator::Adopt(std::span<const SlabRecord> slabs, std::span<const Offset> offsets) {
  MutexLock lock(&mu_);
  if (used_bytes_ != 0 || !classes_.empty()) {
    return Status(ErrorCode::kWrongState, "only a fresh allocator adopts a predecessor's slabs");
  }
  for (const SlabRecord& record : slabs) LMC_RETURN_IF_ERROR(AdoptSlabLocked(record));
  for (const Offset offset : offsets) LMC_RETURN_IF_ERROR(AdoptObjectLocked(offset));
  for (std::uint32_t id = 0; id < slabs_.size(); ++id) {
    Slab& slab = slabs_[id];
    if (!slab.live) continue;
    SizeClass& cls = classes_[slab.class_id];
    slab.free_slots.clear();
    for (std::uint32_t i = slab.capacity; i-- > 0;) {
      if (!slab.in_use[i]) slab.free_slots.push_back(i);  // lowest index on top
    }
    cls.free_slots -= slab.capacity - slab.free_slots.size();
    if (slab.free_slots.empty()) cls.partial.erase(slab.first_page);
    if (slab.free_slots.size() == slab.capacity) ReleaseSlabLocked(id);
  }
  return Status::Ok();
}

Result<std::byte*> SlabAllocator::Resolve(Offset offset, std::uint64_t length) const {
  if (offset > span_.size() || length > span_.size() - offset) {
    return InvalidArgument("range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                           ") lies outside the " + std::to_string(span_.size()) + "-byte pool");
  }
  return span_.data() + offset;
}

LMC_STATS_ROWS(SizeClassStatRows, ClassStats, LMC_SIZE_CLASS_STATS)

LMC_STATS_ROWS(AllocatorStatRows, AllocatorStats, LMC_ALLOCATOR_STATS)

double AllocatorStats::UsageRatio() const {
  return stats::UsedRatio(used_bytes, capacity_bytes).value_or(0);
}

}  // namespace lmcache::alloc
