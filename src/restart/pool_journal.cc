#include "restart/pool_journal.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "common/byte_codec.h"

namespace lmcache::restart {
namespace jf = journal_format;
namespace {

constexpr const char* kShmDir = "/dev/shm/";  // where glibc's shm_open puts names

Status SysFailure(const std::string& what, const std::string& name, int err) {
  return Status(ErrorCode::kIoError, what + " " + name + ": " + std::strerror(err));
}

// "<journal>.new-<pid>" files of processes that died making a journal.
void RemoveAbandonedStagingFiles(const std::string& journal_name) {
  const std::string prefix = journal_name + ".new-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kShmDir, ec)) {
    const std::string file = entry.path().filename().string();
    if (!file.starts_with(prefix)) continue;
    const std::string pid = file.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno == EPERM) continue;
    (void)shm_unlink(("/" + file).c_str());
  }
}

std::atomic_ref<std::uint64_t> Word(std::uint64_t& word) {
  return std::atomic_ref<std::uint64_t>(word);
}

std::uint64_t StateWord(std::uint64_t sequence, jf::RecordState state) {
  return sequence << jf::kStateBits | state;
}

}  // namespace

std::string EncodeKeyNamespace(const ObjectKey& key) {
  ByteWriter out;
  out.Put(key.kv_rank);
  out.Put(key.object_group_id);
  out.Put(key.layout_namespace);
  out.PutString(key.model_name);
  out.PutString(key.cache_salt);
  out.PutString(key.tags);
  return out.Take();
}

Result<ObjectKey> DecodeKeyNamespace(std::span<const std::byte> body) {
  ObjectKey key;
  ByteReader in(std::string_view(reinterpret_cast<const char*>(body.data()), body.size()),
                "a key namespace entry of the journal");
  Status read = in.Get(&key.kv_rank, "kv_rank");
  if (read.ok()) read = in.Get(&key.object_group_id, "object_group_id");
  if (read.ok()) read = in.Get(&key.layout_namespace, "layout_namespace");
  if (read.ok()) read = in.GetString(&key.model_name, "model_name");
  if (read.ok()) read = in.GetString(&key.cache_salt, "cache_salt");
  if (read.ok()) read = in.GetString(&key.tags, "tags");
  if (read.ok()) read = in.Finish();
  if (!read.ok()) return Status(ErrorCode::kInvalidArgument, read.message());
  LMC_RETURN_IF_ERROR(store::ValidateObjectKey(key));
  return key;
}

std::string JournalName(const std::string& pool_name) { return pool_name + ".journal"; }

void RemoveJournal(const std::string& pool_name) {
  std::string path = "/";  // piecewise: GCC 12 misreads literal + string (-Wrestrict)
  path += JournalName(pool_name);
  (void)shm_unlink(path.c_str());
}

Result<JournalGeometry> JournalGeometryOf(int segment_fd, const store::PoolGeometry& pool) {
  struct stat info {};
  if (fstat(segment_fd, &info) != 0) return SysFailure("fstat", "the pool segment", errno);
  return JournalGeometry{pool, static_cast<std::uint64_t>(info.st_dev),
                         static_cast<std::uint64_t>(info.st_ino)};
}

Result<std::unique_ptr<store::SlotJournal>> MakePoolJournal(const std::string& pool_name,
                                                            const store::PoolGeometry& geometry,
                                                            const shm::ShmSegment& segment) {
  LMC_ASSIGN_OR_RETURN(const JournalGeometry journal_geometry, JournalGeometryOf(segment.fd(), geometry));
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<PoolJournal> journal,
                       PoolJournal::Create(pool_name, journal_geometry, segment.bytes()));
  return std::unique_ptr<store::SlotJournal>(std::move(journal));
}

Result<std::unique_ptr<PoolJournal>> PoolJournal::Create(const std::string& pool_name,
                                                         const JournalGeometry& geometry,
                                                         std::span<const std::byte> pool) {
  const store::PoolGeometry& pool_geometry = geometry.pool;
  if (pool_geometry.align_bytes == 0 || pool_geometry.page_bytes == 0) {
    return InvalidArgument("journal: the pool's geometry is not set");
  }
  const std::uint64_t num_pages = pool_geometry.pool_bytes / pool_geometry.page_bytes;
  const std::uint64_t capacity = pool_geometry.pool_bytes / pool_geometry.align_bytes;  // slots at most
  if (capacity > UINT32_MAX) {
    return Status(ErrorCode::kInvalidConfig,
                  "--recover-pool: the pool has " + std::to_string(capacity) + " slots of " +
                      std::to_string(pool_geometry.align_bytes) +
                      " bytes, more than the journal indexes (2^32); raise --l1-align-bytes");
  }
  const jf::Parts parts = jf::PartsFor(num_pages, capacity);
  const std::string name = JournalName(pool_name);
  RemoveAbandonedStagingFiles(name);
  const std::string staging = name + ".new-" + std::to_string(getpid());
  (void)shm_unlink(("/" + staging).c_str());
  UniqueFd fd(shm_open(("/" + staging).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return SysFailure("shm_open", staging, errno);
  auto discard = [&staging] { (void)shm_unlink(("/" + staging).c_str()); };
  // Sparse: tmpfs gives pages only to the parts written (freed records are
  // reused last in, first out, so the written ones stay few).
  if (fchmod(fd.get(), 0600) != 0 ||
      ftruncate(fd.get(), static_cast<off_t>(parts.file_bytes)) != 0) {
    const int err = errno;
    discard();
    return SysFailure("sizing", staging, err);
  }
  void* base = mmap(nullptr, parts.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    discard();
    return SysFailure("mmap", staging, err);
  }
  std::unique_ptr<PoolJournal> journal(
      new PoolJournal(name, std::move(fd), static_cast<std::byte*>(base), parts.file_bytes,
                      num_pages, capacity, pool));
  journal->staging_name_ = staging;
  jf::Header& h = journal->header();
  h.pool_bytes = pool_geometry.pool_bytes;
  h.align_bytes = pool_geometry.align_bytes;
  h.page_bytes = pool_geometry.page_bytes;
  h.slab_target_bytes = pool_geometry.slab_target_bytes;
  h.segment_device = geometry.segment_device;
  h.segment_inode = geometry.segment_inode;
  h.record_capacity = capacity;
  h.version = jf::kVersion;
  std::atomic_ref<std::uint64_t>(h.magic).store(jf::kMagic, std::memory_order_release);
  journal->sealer_ = std::thread([raw = journal.get()] { raw->SealLoop(); });
  return journal;
}

Status PoolJournal::Publish() {
  if (published_) return Status::Ok();
  const std::string from = std::string(kShmDir) + staging_name_;
  const std::string to = std::string(kShmDir) + name_;
  if (rename(from.c_str(), to.c_str()) != 0) return SysFailure("rename to", to, errno);
  published_ = true;
  return Status::Ok();
}

PoolJournal::PoolJournal(std::string name, UniqueFd fd, std::byte* base, std::uint64_t file_bytes,
                         std::uint64_t num_pages, std::uint64_t capacity,
                         std::span<const std::byte> pool)
    : name_(std::move(name)),
      fd_(std::move(fd)),
      base_(base),
      file_bytes_(file_bytes),
      num_pages_(num_pages),
      capacity_(capacity),
      parts_(jf::PartsFor(num_pages, capacity)),
      pool_(pool) {}

PoolJournal::~PoolJournal() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_.NotifyAll();
  if (sealer_.joinable()) sealer_.join();
  munmap(base_, file_bytes_);
  // Unpublished, it was never anyone's journal; published, it goes with the
  // pool unless a successor took both over.
  if (!published_) {
    (void)shm_unlink(("/" + staging_name_).c_str());
  } else if (owner_) {
    (void)shm_unlink(("/" + name_).c_str());
  }
}

jf::Header& PoolJournal::header() const { return *reinterpret_cast<jf::Header*>(base_); }

jf::Record& PoolJournal::record(std::uint32_t index) const {
  return reinterpret_cast<jf::Record*>(base_ + parts_.records)[index];
}

std::uint32_t PoolJournal::NewRecordLocked(Offset offset, std::uint64_t size,
                                           jf::RecordState state, TimeMs held_until_ms) {
  std::uint32_t index;
  if (auto it = record_of_.find(offset); it != record_of_.end()) {
    index = it->second;  // a slot lent again without a free (defensive): a new life
  } else if (!free_records_.empty()) {
    index = free_records_.back();
    free_records_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(records_used_++);
    Word(header().records_used).store(records_used_, std::memory_order_release);
  }
  record_of_[offset] = index;
  jf::Record& r = record(index);
  r.offset = offset;
  r.size = size;
  r.held_until_ms = held_until_ms;
  SetStateLocked(r, StateWord(next_sequence_++, state));
  return index;
}

void PoolJournal::SetStateLocked(jf::Record& r, std::uint64_t word) {
  // An exchange: the sealer may have sealed the record meanwhile (without the lock).
  const std::uint64_t old = Word(r.state).exchange(word, std::memory_order_acq_rel);
  if ((old & 3) == jf::kSealed) counts_.sealed.fetch_sub(1, std::memory_order_relaxed);
  if ((word & 3) == jf::kSealed) counts_.sealed.fetch_add(1, std::memory_order_relaxed);
}

void PoolJournal::Lent(std::span<const Offset> offsets, std::uint64_t size) {
  MutexLock lock(&mu_);
  // Last first: recovery takes a lower sequence as older, and the eviction
  // policy takes a batch's first key (a prompt's first chunk) as its most
  // recent.
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    if (record_of_.size() >= capacity_ && !record_of_.contains(*it)) break;  // cannot happen
    (void)NewRecordLocked(*it, size, jf::kLent);
  }
}

void PoolJournal::Held(Offset offset, std::uint64_t size, TimeMs until_ms) {
  MutexLock lock(&mu_);
  if (record_of_.size() >= capacity_ && !record_of_.contains(offset)) return;  // cannot happen
  (void)NewRecordLocked(offset, size, jf::kLent, std::max<TimeMs>(until_ms, 1));
}

std::optional<std::uint32_t> PoolJournal::NamespaceLocked(std::string body) {
  if (auto it = namespace_of_.find(body); it != namespace_of_.end()) return it->second;
  const std::uint64_t entry = jf::RoundUp(sizeof(std::uint32_t) + body.size(), 8);
  if (body.size() > jf::kMaxNamespaceBody || namespace_bytes_ + entry > jf::kNamespaceBytes) {
    return std::nullopt;
  }
  std::byte* at = base_ + parts_.namespaces + namespace_bytes_;
  const auto length = static_cast<std::uint32_t>(body.size());
  std::memcpy(at, &length, sizeof(length));
  std::memcpy(at + sizeof(length), body.data(), body.size());
  const auto id = static_cast<std::uint32_t>(namespace_bytes_);
  namespace_bytes_ += entry;
  // The entry's bytes before the mark that makes it readable.
  Word(header().namespace_bytes).store(namespace_bytes_, std::memory_order_release);
  namespace_of_.emplace(std::move(body), id);
  return id;
}

void PoolJournal::Committed(const ObjectKey& key, Offset offset, std::uint64_t size,
                            std::optional<std::uint64_t> checksum) {
  std::string body = EncodeKeyNamespace(key);  // before the lock: it allocates
  bool wake = false;
  {
    MutexLock lock(&mu_);
    const std::optional<std::uint32_t> ns = NamespaceLocked(std::move(body));
    auto it = record_of_.find(offset);
    if (!ns) {
      // Not recoverable, but its slot stays recorded as lent (never reused by
      // a successor while its record says a writer may hold it).
      counts_.unrecorded.fetch_add(1, std::memory_order_relaxed);
      if (it == record_of_.end()) (void)NewRecordLocked(offset, size, jf::kLent);
      return;
    }
    const std::uint32_t index =
        it != record_of_.end() ? it->second : NewRecordLocked(offset, size, jf::kLent);
    jf::Record& r = record(index);
    const std::uint64_t sequence = Word(r.state).load(std::memory_order_relaxed) >> jf::kStateBits;
    r.size = size;
    r.key_namespace = *ns;
    std::memcpy(r.chunk_hash, key.chunk_hash.data(), sizeof(r.chunk_hash));
    if (checksum) {
      // Verified already (a recovery): sealed at once, nothing to hash again.
      r.checksum = *checksum;
      SetStateLocked(r, StateWord(sequence, jf::kSealed));
      return;
    }
    const std::uint64_t word = StateWord(sequence, jf::kCommitted);
    SetStateLocked(r, word);
    const auto now = std::chrono::steady_clock::now();
    to_seal_.push_back({index, word, offset, size, now});
    if (!boosted_ && now - to_seal_.front().queued > kBoostAfter) {
      boosted_ = true;  // starved under a saturated CPU: a sliver of a core
      SetSealerPolicy(SCHED_OTHER);
    }
    counts_.awaiting_seal.fetch_add(1, std::memory_order_relaxed);
    wake = to_seal_.size() == 1;
    // Entries of records freed since are skipped by the sealer; a starved
    // sealer must not let them pile up beyond the records that exist.
    if (to_seal_.size() > 2 * record_of_.size() + 1024) DropStaleLocked();
  }
  if (wake) work_.NotifyOne();
}

void PoolJournal::DropStaleLocked() {
  const std::size_t before = to_seal_.size();
  std::erase_if(to_seal_, [this](const SealJob& job) {
    return Word(record(job.index).state).load(std::memory_order_relaxed) != job.word;
  });
  counts_.awaiting_seal.fetch_sub(before - to_seal_.size(), std::memory_order_relaxed);
}

void PoolJournal::Withdrawn(Offset offset) {
  MutexLock lock(&mu_);
  auto it = record_of_.find(offset);
  if (it == record_of_.end()) return;
  jf::Record& r = record(it->second);
  const std::uint64_t word = Word(r.state).load(std::memory_order_relaxed);
  if ((word & 3) == jf::kLent) return;
  // Never served again, but the slot stays held: a lease may still read it.
  SetStateLocked(r, StateWord(next_sequence_++, jf::kLent));
}

void PoolJournal::Freed(Offset offset) {
  MutexLock lock(&mu_);
  auto it = record_of_.find(offset);
  if (it == record_of_.end()) return;
  jf::Record& r = record(it->second);
  const std::uint64_t word = Word(r.state).load(std::memory_order_relaxed);
  SetStateLocked(r, StateWord(word >> jf::kStateBits, jf::kFree));
  free_records_.push_back(it->second);
  record_of_.erase(it);
}

void PoolJournal::ReadyBytes(std::uint64_t bytes) {
  Word(header().ready_bytes).store(bytes, std::memory_order_release);
}

void PoolJournal::SlabAdded(const alloc::SlabRecord& slab) {
  if (slab.first_page >= num_pages_) return;
  auto* entries = reinterpret_cast<jf::SlabEntry*>(base_ + parts_.slabs);
  entries[slab.first_page].num_pages = slab.num_pages;
  Word(entries[slab.first_page].object_bytes).store(slab.object_bytes, std::memory_order_release);
}

void PoolJournal::SlabReleased(const alloc::SlabRecord& slab) {
  if (slab.first_page >= num_pages_) return;
  auto* entries = reinterpret_cast<jf::SlabEntry*>(base_ + parts_.slabs);
  Word(entries[slab.first_page].object_bytes).store(0, std::memory_order_release);
}

void PoolJournal::SetSealerPolicy(int policy) {
  const pid_t tid = sealer_tid_.load(std::memory_order_acquire);
  if (tid <= 0) return;
  sched_param param{};
  if (sched_setscheduler(tid, policy, &param) != 0) {
    spdlog::debug("journal sealer: scheduling policy {} refused ({})", policy,
                  std::strerror(errno));
  }
}

void PoolJournal::SealLoop() {
  // SCHED_IDLE: the sealer reads every byte stored, and that read must not
  // come out of the store path's time, so it runs when a core is idle. At nice
  // 19 in the normal class instead, it cost the store path 5-28 % on 2 cores
  // (docs/performance.md, "Crash recovery"). A saturated CPU would starve it
  // for as long as the saturation lasts, so a commit that finds the oldest
  // job waiting over kBoostAfter raises it to nice 19 (about 1.5 % of a
  // contended core, some 100 MB/s of hashing) until the queue is empty.
  sealer_tid_.store(gettid(), std::memory_order_release);
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  SetSealerPolicy(SCHED_IDLE);
  std::vector<SealJob> batch;
  for (;;) {
    {
      MutexLock lock(&mu_);
      sealing_ = false;
      if (to_seal_.empty() && boosted_) {
        boosted_ = false;
        SetSealerPolicy(SCHED_IDLE);
      }
      while (!stop_ && to_seal_.empty()) {
        sealed_cv_.NotifyAll();
        work_.Wait(&lock);
      }
      if (stop_) return;
      sealing_ = true;
      const std::size_t n = std::min<std::size_t>(to_seal_.size(), kSealBatch);
      batch.assign(to_seal_.begin(), to_seal_.begin() + static_cast<std::ptrdiff_t>(n));
      to_seal_.erase(to_seal_.begin(), to_seal_.begin() + static_cast<std::ptrdiff_t>(n));
    }
    for (const SealJob& job : batch) {
      SealOne(job);
      counts_.awaiting_seal.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

void PoolJournal::SealOne(const SealJob& job) {
  jf::Record& r = record(job.index);
  // Freed, or freed and lent again, since its commit: nothing to seal.
  if (Word(r.state).load(std::memory_order_acquire) != job.word) return;
  if (job.offset > pool_.size() || job.size > pool_.size() - job.offset) return;
  const std::uint64_t checksum = XXH3_64bits(pool_.data() + job.offset, job.size);
  // Only this thread writes a checksum, and recovery reads it only under a
  // Sealed state word: a checksum left in a record whose life changed is
  // overwritten before that life is sealed.
  Word(r.checksum).store(checksum, std::memory_order_relaxed);
  std::uint64_t expected = job.word;
  // The commit point: the Sealed state, released after the key (written at
  // commit) and the checksum. It fails if the slot was freed meanwhile.
  if (Word(r.state).compare_exchange_strong(expected,
                                            StateWord(job.word >> jf::kStateBits, jf::kSealed),
                                            std::memory_order_release, std::memory_order_relaxed)) {
    counts_.sealed.fetch_add(1, std::memory_order_relaxed);
    counts_.sealed_bytes_total.fetch_add(job.size, std::memory_order_relaxed);
  }
}

bool PoolJournal::WaitSealed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (!to_seal_.empty() || sealing_) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    work_.NotifyOne();
    sealed_cv_.WaitFor(
        &lock, std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(50)));
  }
  return true;
}

store::JournalStats PoolJournal::Stats() const {
  MutexLock lock(&mu_);
  store::JournalStats out;
  counts_.CopyTo(&out);
  out.records = record_of_.size();
  return out;
}

}  // namespace lmcache::restart
