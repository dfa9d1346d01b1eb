#include "store/pool_journal.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <spdlog/spdlog.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <tuple>

namespace lmcache::store {
namespace jf = journal_format;
namespace {

constexpr const char* kShmDir = "/dev/shm/";  // where glibc's shm_open puts names

Status SysFailure(const std::string& what, const std::string& name, int err) {
  return Status(ErrorCode::kIoError, what + " " + name + ": " + std::strerror(err));
}

void PutU32(std::string* out, std::uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }
void PutString(std::string* out, const std::string& s) {
  PutU32(out, static_cast<std::uint32_t>(s.size()));
  out->append(s);
}

// A cursor over untrusted namespace bytes: every read is bounds-checked.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* out) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* out) {
    std::uint32_t n = 0;
    if (!Get(&n) || bytes_.size() - pos_ < n) return false;
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

std::atomic_ref<std::uint64_t> Word(std::uint64_t& word) {
  return std::atomic_ref<std::uint64_t>(word);
}

std::uint64_t StateWord(std::uint64_t sequence, jf::RecordState state) {
  return sequence << jf::kStateBits | state;
}

}  // namespace

std::string EncodeKeyNamespace(const ObjectKey& key) {
  std::string out;
  out.append(reinterpret_cast<const char*>(&key.kv_rank), sizeof(key.kv_rank));
  out.append(reinterpret_cast<const char*>(&key.object_group_id), sizeof(key.object_group_id));
  PutU32(&out, key.layout_namespace);
  PutString(&out, key.model_name);
  PutString(&out, key.cache_salt);
  PutString(&out, key.tags);
  return out;
}

Result<ObjectKey> DecodeKeyNamespace(std::span<const std::byte> body) {
  ObjectKey key;
  Reader in(body);
  if (!in.Get(&key.kv_rank) || !in.Get(&key.object_group_id) || !in.Get(&key.layout_namespace) ||
      !in.GetString(&key.model_name) || !in.GetString(&key.cache_salt) ||
      !in.GetString(&key.tags) || !in.done()) {
    return Status(ErrorCode::kInvalidArgument, "a key namespace entry of the journal is malformed");
  }
  LMC_RETURN_IF_ERROR(ValidateObjectKey(key));
  return key;
}

std::string JournalName(const std::string& pool_name) { return pool_name + ".journal"; }

Result<JournalGeometry> GeometryOf(int segment_fd, std::uint64_t pool_bytes,
                                   const alloc::SlabAllocatorConfig& allocator) {
  struct stat info {};
  if (fstat(segment_fd, &info) != 0) return SysFailure("fstat", "the pool segment", errno);
  return JournalGeometry{pool_bytes,
                         allocator.align_bytes,
                         allocator.page_bytes,
                         allocator.slab_target_bytes,
                         static_cast<std::uint64_t>(info.st_dev),
                         static_cast<std::uint64_t>(info.st_ino)};
}

Result<std::unique_ptr<PoolJournal>> PoolJournal::Create(const std::string& pool_name,
                                                         const JournalGeometry& geometry,
                                                         std::span<const std::byte> pool) {
  if (geometry.align_bytes == 0 || geometry.page_bytes == 0) {
    return InvalidArgument("journal: the pool's geometry is not set");
  }
  const std::uint64_t num_pages = geometry.pool_bytes / geometry.page_bytes;
  const std::uint64_t capacity = geometry.pool_bytes / geometry.align_bytes;  // slots at most
  if (capacity > UINT32_MAX) return InvalidArgument("journal: the pool has too many slots");
  const jf::Parts parts = jf::PartsFor(num_pages, capacity);
  const std::string name = JournalName(pool_name);
  const std::string staging = name + ".new-" + std::to_string(getpid());
  (void)shm_unlink(("/" + staging).c_str());
  UniqueFd fd(shm_open(("/" + staging).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return SysFailure("shm_open", staging, errno);
  auto discard = [&staging] { (void)shm_unlink(("/" + staging).c_str()); };
  // Sparse: tmpfs gives pages only to the parts written (records are reused
  // lowest first, so they stay dense).
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
  jf::Header& h = journal->header();
  h.pool_bytes = geometry.pool_bytes;
  h.align_bytes = geometry.align_bytes;
  h.page_bytes = geometry.page_bytes;
  h.slab_target_bytes = geometry.slab_target_bytes;
  h.segment_device = geometry.segment_device;
  h.segment_inode = geometry.segment_inode;
  h.record_capacity = capacity;
  h.version = jf::kVersion;
  std::atomic_ref<std::uint64_t>(h.magic).store(jf::kMagic, std::memory_order_release);
  const std::string from = std::string(kShmDir) + staging;
  const std::string to = std::string(kShmDir) + name;
  if (rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    discard();
    journal->owner_ = false;
    return SysFailure("rename to", to, err);
  }
  journal->sealer_ = std::thread([raw = journal.get()] { raw->SealLoop(); });
  return journal;
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
  if (owner_) (void)shm_unlink(("/" + name_).c_str());
}

jf::Header& PoolJournal::header() const { return *reinterpret_cast<jf::Header*>(base_); }

jf::Record& PoolJournal::record(std::uint32_t index) const {
  return reinterpret_cast<jf::Record*>(base_ + parts_.records)[index];
}

std::uint32_t PoolJournal::NewRecordLocked(Offset offset, std::uint64_t size,
                                           jf::RecordState state) {
  std::uint32_t index;
  if (auto it = record_of_.find(offset); it != record_of_.end()) {
    index = it->second;  // a slot staged again without a free (defensive): a new life
    if ((Word(record(index).state).load(std::memory_order_relaxed) & 3) == jf::kSealed)
      stats_.sealed -= 1;
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
  Word(r.state).store(StateWord(next_sequence_++, state), std::memory_order_release);
  return index;
}

void PoolJournal::Staged(std::span<const Offset> offsets, std::uint64_t size) {
  MutexLock lock(&mu_);
  // Last first: recovery takes a lower sequence as older, and the eviction
  // policy takes a batch's first key (a prompt's first chunk) as its most
  // recent.
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    if (record_of_.size() >= capacity_ && !record_of_.contains(*it)) break;  // cannot happen
    (void)NewRecordLocked(*it, size, jf::kStaged);
  }
}

std::optional<std::uint32_t> PoolJournal::NamespaceLocked(const ObjectKey& key) {
  std::string body = EncodeKeyNamespace(key);
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
  stats_.namespaces += 1;
  return id;
}

void PoolJournal::Committed(const ObjectKey& key, Offset offset, std::uint64_t size) {
  bool wake = false;
  {
    MutexLock lock(&mu_);
    const std::optional<std::uint32_t> ns = NamespaceLocked(key);
    auto it = record_of_.find(offset);
    if (!ns) {
      // Not recoverable, but its slot stays recorded as lent (never reused by
      // a successor while its record says a writer may hold it).
      stats_.unrecorded += 1;
      if (it == record_of_.end()) (void)NewRecordLocked(offset, size, jf::kStaged);
      return;
    }
    const std::uint32_t index =
        it != record_of_.end() ? it->second : NewRecordLocked(offset, size, jf::kStaged);
    jf::Record& r = record(index);
    const std::uint64_t sequence = Word(r.state).load(std::memory_order_relaxed) >> jf::kStateBits;
    r.size = size;
    r.key_namespace = *ns;
    std::memcpy(r.chunk_hash, key.chunk_hash.data(), sizeof(r.chunk_hash));
    const std::uint64_t word = StateWord(sequence, jf::kCommitted);
    Word(r.state).store(word, std::memory_order_release);
    to_seal_.emplace_back(index, word);
    stats_.awaiting_seal += 1;
    wake = to_seal_.size() == 1;
  }
  if (wake) work_.NotifyOne();
}

void PoolJournal::Freed(Offset offset) {
  MutexLock lock(&mu_);
  auto it = record_of_.find(offset);
  if (it == record_of_.end()) return;
  jf::Record& r = record(it->second);
  const std::uint64_t word = Word(r.state).load(std::memory_order_relaxed);
  if ((word & 3) == jf::kSealed) stats_.sealed -= 1;
  Word(r.state).store(StateWord(word >> jf::kStateBits, jf::kFree), std::memory_order_release);
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

void PoolJournal::SealLoop() {
  // Below every other thread (SCHED_IDLE): the sealer reads every byte stored,
  // and on a busy node that read must not come out of the store path's time.
  // Sealing then lags while the cores are saturated (journal_awaiting_seal),
  // and a crash in such a burst loses more of its newest objects.
  sched_param idle{};
  if (const int err = pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle); err != 0) {
    spdlog::debug("journal sealer: SCHED_IDLE refused ({}); it runs at normal priority",
                  std::strerror(err));
  }
  for (;;) {
    std::uint32_t index = 0;
    std::uint64_t word = 0;
    Offset offset = 0;
    std::uint64_t size = 0;
    {
      MutexLock lock(&mu_);
      while (!stop_ && to_seal_.empty()) {
        sealing_ = false;
        sealed_.NotifyAll();
        work_.Wait(&lock);
      }
      if (stop_) return;
      sealing_ = true;
      std::tie(index, word) = to_seal_.front();
      to_seal_.pop_front();
      stats_.awaiting_seal -= 1;
      jf::Record& r = record(index);
      if (Word(r.state).load(std::memory_order_relaxed) != word)
        continue;  // freed or reused meanwhile
      offset = r.offset;
      size = r.size;
      if (offset > pool_.size() || size > pool_.size() - offset) continue;
    }
    // Hashed without the lock. A slot freed and lent again meanwhile changes
    // the state word, which is checked again before the seal.
    const std::uint64_t checksum = XXH3_64bits(pool_.data() + offset, size);
    MutexLock lock(&mu_);
    jf::Record& r = record(index);
    if (Word(r.state).load(std::memory_order_relaxed) != word) continue;
    r.checksum = checksum;
    // The commit point: the checksum (and the key, written at commit) first.
    Word(r.state).store(StateWord(word >> jf::kStateBits, jf::kSealed), std::memory_order_release);
    stats_.sealed += 1;
    stats_.sealed_total += 1;
    stats_.sealed_bytes_total += size;
  }
}

bool PoolJournal::WaitSealed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (!to_seal_.empty() || sealing_) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    sealed_.WaitFor(&lock, left);
  }
  return true;
}

JournalStats PoolJournal::Stats() const {
  MutexLock lock(&mu_);
  JournalStats out = stats_;
  out.records = record_of_.size();
  return out;
}

}  // namespace lmcache::store
