#include "tier/fs/fs_adapter.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "common/logging.h"
#include "common/unique_fd.h"
#include "tier/fs/fs_key_codec.h"
#include "tier/indexed_adapter.h"
#include "tier/object_format.h"

namespace lmcache::tier {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kDirectIoAlign = 4096;
constexpr std::size_t kPlainHeaderAlign = 8;
constexpr const char* kTmpDirName = ".tmp";
// Rings, and reads in one ring's kernel queue at once: a prefetch batch of
// 64 chunks at TP 2 fits one ring whole, and four prefetch threads (or
// more, sharing) submit and copy side by side (docs/performance.md).
constexpr unsigned kUringRings = 4;
constexpr unsigned kUringDepth = 128;

std::size_t RoundUp(std::size_t bytes, std::size_t align) {
  return (bytes + align - 1) / align * align;
}

bool Aligned(const void* p, std::size_t size) {
  return reinterpret_cast<std::uintptr_t>(p) % kDirectIoAlign == 0 && size % kDirectIoAlign == 0;
}

// Writes all of `bytes` at `offset`; errno is left set on failure.
bool WriteAll(int fd, const std::byte* bytes, std::size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, bytes, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

// Reads exactly `size` bytes at `offset`: 1, 0 at a short file, -1 with errno on error.
int ReadAll(int fd, std::byte* out, std::size_t size, off_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    out += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return 1;
}

}  // namespace

void FsAdapter::FreeBytes::operator()(std::byte* p) const { std::free(p); }

FsAdapter::AlignedBytes FsAdapter::AllocateAligned(std::size_t bytes) {
  return AlignedBytes(static_cast<std::byte*>(
      std::aligned_alloc(kDirectIoAlign, RoundUp(bytes, kDirectIoAlign))));
}

FsAdapter::FsAdapter(const FsAdapterConfig& config)
    : config_(config),
      tmp_dir_(config.base_path / kTmpDirName),
      index_(config.max_size_bytes),
      condition_("L2 fs " + config.base_path.string()) {}

Result<std::unique_ptr<FsAdapter>> FsAdapter::Create(const FsAdapterConfig& config) {
  if (config.base_path.empty()) return InvalidConfig("fs adapter: base_path is required");
  std::unique_ptr<FsAdapter> adapter(new FsAdapter(config));
  LMC_RETURN_IF_ERROR(adapter->Rebuild());
  LMC_RETURN_IF_ERROR(adapter->SetUpIo());
  return adapter;
}

Status FsAdapter::SetUpIo() {
  if (config_.io_engine == FsIoEngine::kSync) return Status::Ok();
  auto ring = UringReads::Create(kUringRings, kUringDepth);
  if (ring.ok()) {
    uring_ = std::move(ring).value();
    spdlog::info("L2 fs {}: loads read through io_uring ({} rings of queue depth {})",
                 config_.base_path.string(), kUringRings, kUringDepth);
    return Status::Ok();
  }
  if (config_.io_engine == FsIoEngine::kUring) {
    return Status(ErrorCode::kInvalidConfig,
                  "fs adapter: \"io_engine\": \"io_uring\" but " + ring.status().message() +
                      "; use \"auto\" to fall back to blocking reads");
  }
  spdlog::info("L2 fs {}: loads use blocking reads: {}", config_.base_path.string(),
               ring.status().message());
  return Status::Ok();
}

fs::path FsAdapter::PathOf(const store::ObjectKey& key) const {
  return config_.base_path / ObjectFileName(key);
}

namespace {

// Opens `name` under `at` as a directory this process may own: not a
// symbolic link, owned by our user, not writable by others (who could plant
// or swap files in it).
Result<UniqueFd> OpenOwnDirectory(int at, const std::string& name, const std::string& shown) {
  UniqueFd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    if (error == ELOOP || error == ENOTDIR) {
      return InvalidConfig("fs adapter: " + shown + " is a symbolic link or not a directory: "
                           "give base_path as the real directory");
    }
    return InvalidConfig("fs adapter: cannot open " + shown + ": " + std::strerror(error) +
                         " (check base_path and its permissions)");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return InvalidConfig("fs adapter: cannot stat " + shown + ": " + std::strerror(errno));
  }
  if (st.st_uid != ::geteuid()) {
    return InvalidConfig("fs adapter: " + shown + " is owned by uid " + std::to_string(st.st_uid) +
                         ", not by this server's user (uid " + std::to_string(::geteuid()) +
                         "): give base_path a directory of the server's own");
  }
  if (st.st_mode & S_IWOTH) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidConfig("fs adapter: " + shown + " is writable by others (mode " + mode +
                         "): chmod o-w it, or give another directory");
  }
  return fd;
}

struct CloseDir {
  void operator()(DIR* dir) const { ::closedir(dir); }
};
using DirPtr = std::unique_ptr<DIR, CloseDir>;

// A listing of directory `fd` from its start, on a descriptor of its own
// (fdopendir takes the descriptor it is given; `fd` stays open).
DirPtr ReadDirectory(int fd) {
  const int copy = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return nullptr;
  DIR* dir = ::fdopendir(copy);
  if (dir == nullptr) ::close(copy);
  return DirPtr(dir);
}

// Marks directory `fd` as an fs tier's own; false with errno set.
bool WriteMarker(int fd) {
  UniqueFd written(
      ::openat(fd, kFsMarkerName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  static constexpr char kMarkerText[] =
      "This directory is an lmcache-server fs L2 tier: it writes and deletes its object files "
      "(*.data) and temporary files (.tmp/<pid>-<n>.tmp) here, and nothing else.\n";
  return written.valid() && ::write(written.get(), kMarkerText, sizeof(kMarkerText) - 1) >= 0;
}

// The names in directory `fd` (a snapshot, so entries may be removed while walking it).
std::vector<std::string> NamesIn(int fd) {
  std::vector<std::string> names;
  const DirPtr dir = ReadDirectory(fd);
  if (!dir) return names;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  return names;
}

}  // namespace

// Whether directory `fd` (an fs tier's, or one about to be) holds anything
// this adapter did not write: only the marker, object files (our names, our
// header's magic) and .tmp with temporary files (our names) are ours. A
// directory an earlier version left unmarked holds nothing else.
static bool HoldsForeignFiles(int fd) {
  std::vector<std::byte> magic(16);
  for (const std::string& name : NamesIn(fd)) {
    if (name == kFsMarkerName) continue;
    if (name == kTmpDirName) {
      UniqueFd tmp(::openat(fd, kTmpDirName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!tmp.valid()) return true;
      for (const std::string& temporary : NamesIn(tmp.get())) {
        struct stat st {};
        if (!IsTemporaryFileName(temporary) ||
            ::fstatat(tmp.get(), temporary.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode)) {
          return true;
        }
      }
      continue;
    }
    if (!IsObjectFileName(name)) return true;
    UniqueFd file(::openat(fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!file.valid() || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) return true;
    const ssize_t n = ::pread(file.get(), magic.data(), magic.size(), 0);
    if (!HasObjectMagic(std::span(magic.data(), n > 0 ? static_cast<std::size_t>(n) : 0))) {
      return true;
    }
  }
  return false;
}

Result<UniqueFd> FsAdapter::OpenBase() {
  const fs::path& base = config_.base_path;
  std::error_code error;
  const bool existed = fs::exists(fs::symlink_status(base, error));
  if (!existed) {
    fs::create_directories(base, error);
    if (error) {
      return InvalidConfig("fs adapter: cannot create " + base.string() + ": " + error.message() +
                           " (check base_path and its permissions)");
    }
    ::chmod(base.c_str(), 0700);
  }
  LMC_ASSIGN_OR_RETURN(UniqueFd base_fd, OpenOwnDirectory(AT_FDCWD, base.string(), base.string()));
  struct stat marker {};
  const bool marked = ::fstatat(base_fd.get(), kFsMarkerName, &marker, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISREG(marker.st_mode);
  if (!marked) {
    if (existed && !config_.adopt && HoldsForeignFiles(base_fd.get())) {
      return InvalidConfig(
          "fs adapter: " + base.string() + " holds files an fs tier did not write and is not "
          "marked as an fs tier's directory (no " + std::string(kFsMarkerName) + "): give "
          "base_path a new or empty directory, or add \"adopt\": true to take this one over "
          "(its object files are then indexed; nothing else in it is touched)");
    }
    if (!WriteMarker(base_fd.get())) {
      return InvalidConfig("fs adapter: cannot write " + (base / kFsMarkerName).string() + ": " +
                           std::strerror(errno));
    }
  }
  if (::mkdirat(base_fd.get(), kTmpDirName, 0700) != 0 && errno != EEXIST) {
    return InvalidConfig("fs adapter: cannot create " + tmp_dir_.string() + ": " +
                         std::strerror(errno) + " (check base_path and its permissions)");
  }
  LMC_RETURN_IF_ERROR(OpenOwnDirectory(base_fd.get(), kTmpDirName, tmp_dir_.string()).status());
  LMC_RETURN_IF_ERROR(CleanTemporaries(base_fd.get()));
  return base_fd;
}

// Writes a crash cut short: only regular files of our temporary names.
Status FsAdapter::CleanTemporaries(int base_fd) {
  LMC_ASSIGN_OR_RETURN(UniqueFd tmp, OpenOwnDirectory(base_fd, kTmpDirName, tmp_dir_.string()));
  for (const std::string& name : NamesIn(tmp.get())) {
    struct stat st {};
    if (!IsTemporaryFileName(name) || ::fstatat(tmp.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      rebuild_.foreign += 1;
      continue;
    }
    if (::unlinkat(tmp.get(), name.c_str(), 0) == 0) rebuild_.removed += 1;
  }
  return Status::Ok();
}

Status FsAdapter::Rebuild() {
  const auto start = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(UniqueFd base, OpenBase());
  struct Found {
    timespec mtime;
    store::ObjectKey key;
    std::uint64_t bytes;
  };
  std::vector<Found> found;
  std::vector<std::byte> head(kMaxHeaderBytes);
  for (const std::string& name : NamesIn(base.get())) {
    if (!IsObjectFileName(name)) {
      if (name != kFsMarkerName && name != kTmpDirName) rebuild_.foreign += 1;
      continue;
    }
    UniqueFd fd(::openat(base.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      rebuild_.foreign += 1;  // a link, a directory, a device under our name: not ours
      continue;
    }
    const std::size_t want = std::min<std::size_t>(head.size(), static_cast<std::size_t>(st.st_size));
    const ssize_t n = ::pread(fd.get(), head.data(), want, 0);
    const std::span<const std::byte> read(head.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
    if (!HasObjectMagic(read)) {
      rebuild_.foreign += 1;  // named like ours, but not our content: left alone
      continue;
    }
    auto header = ParseObjectHeader(read);
    if (!header.ok() && header.status().code() == ErrorCode::kNotSupported) {
      rebuild_.foreign += 1;  // a newer server's encoding: left alone, not served
      continue;
    }
    // Complete, and under the name of the key it holds.
    const bool good = header.ok() &&
                      static_cast<std::uint64_t>(st.st_size) ==
                          header->header_bytes + header->payload_bytes &&
                      ObjectFileName(header->key) == name;
    if (!good) {
      if (::unlinkat(base.get(), name.c_str(), 0) == 0) rebuild_.removed += 1;
      continue;
    }
    found.push_back({st.st_mtim, std::move(header->key), static_cast<std::uint64_t>(st.st_size)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec) < std::tie(b.mtime.tv_sec, b.mtime.tv_nsec);
  });
  for (const Found& f : found) {
    index_.AddExisting(f.key, f.bytes);
    rebuild_.bytes += f.bytes;
  }
  rebuild_.objects = found.size();
  index_.TrimToCapacity(
      [this](const store::ObjectKey& key, std::uint64_t bytes) { DropEvicted(key, bytes); });
  rebuild_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("L2 fs {}: index rebuilt in {:.3f} s: {} objects, {:.2f} GiB; {} partial or corrupt "
               "files of ours removed; {} other files left alone",
               config_.base_path.string(), rebuild_.seconds, rebuild_.objects,
               static_cast<double>(rebuild_.bytes) / (1ull << 30), rebuild_.removed,
               rebuild_.foreign);
  return Status::Ok();
}

void FsAdapter::DropEvicted(const store::ObjectKey& key, std::uint64_t bytes) {
  std::error_code ignored;
  fs::remove(PathOf(key), ignored);
  counters_.evicted_objects.fetch_add(1, std::memory_order_relaxed);
  counters_.evicted_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (removal_observer_) removal_observer_(std::span(&key, 1));
}

void FsAdapter::NoteFailure(int error, const std::string& what) {
  switch (error) {
    case ENOSPC: condition_.Fail("disk full", what); break;
    case EDQUOT: condition_.Fail("disk quota exceeded", what); break;
    case EROFS:
    case EACCES:
    case EPERM: condition_.Fail("directory not writable", what); break;
    case ENOENT: condition_.Fail("directory missing", what); break;
    default: condition_.Fail("I/O error", what); break;
  }
}

// A batch is written in two passes: every object to its temporary file, then
// each file synced and renamed. The syncs of a batch then find most of its
// writes already on their way to the disk, instead of one write waiting for
// the previous one's sync.
std::vector<Status> FsAdapter::StoreNow(std::span<const L2Write> objects) {
  std::vector<Status> results(objects.size());
  std::vector<PendingFile> pending(objects.size());
  for (std::size_t i = 0; i < objects.size(); ++i) results[i] = WriteTemporary(objects[i], &pending[i]);
  for (std::size_t i = 0; i < objects.size(); ++i) {
    if (results[i].ok() && pending[i].fd.valid()) results[i] = Publish(objects[i], &pending[i]);
    // A tenant at its quota is not a failure of the tier (counted apart).
    if (!results[i].ok() && !pending[i].over_quota) {
      counters_.store_failures.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return results;
}

void FsAdapter::EnforceQuotas(const store::TenantLedger* ledger) {
  EnforceIndexedQuotas(index_, ledger);
}

Result<std::vector<ListedL2Object>> FsAdapter::List(const store::ObjectKey* after,
                                                    std::size_t limit,
                                                    const KeyFilter& keep) const {
  return ListIndexed(index_, after, limit, keep);
}

Result<std::vector<L2Deletion>> FsAdapter::Delete(std::span<const store::ObjectKey> keys,
                                                  bool force) {
  // Under the index's lock (DeleteIndexed), so a store of the same key cannot
  // slip between the file's removal and the index's. A load with the file
  // open reads on.
  return DeleteIndexed(index_, keys, force, [this](const store::ObjectKey& gone, std::uint64_t) {
    std::error_code ignored;
    fs::remove(PathOf(gone), ignored);
    if (removal_observer_) removal_observer_(std::span(&gone, 1));
  });
}

Status FsAdapter::Fail(int error, std::string what, PendingFile* file) {
  what += std::string(": ") + std::strerror(error);
  NoteFailure(error, what);
  file->fd.Reset();
  if (!file->tmp.empty()) ::unlink(file->tmp.c_str());
  index_.Unreserve(file->salt, file->file_bytes);
  file->file_bytes = 0;
  return Status(ErrorCode::kIoError, "L2 fs: " + what);
}

Status FsAdapter::WriteTemporary(const L2Write& object, PendingFile* file) {
  const store::ObjectKey& key = *object.key;
  if (index_.Contains(key)) return Status::Ok();  // held already: nothing to write
  const std::string header = EncodeObjectHeader(
      key, object.bytes, config_.use_odirect ? kDirectIoAlign : kPlainHeaderAlign, object.encoding);
  const std::uint64_t file_bytes = header.size() + object.bytes.size();
  const L2Index::Reservation room =
      index_.Reserve(key.cache_salt, file_bytes,
                     [this](const store::ObjectKey& victim, std::uint64_t bytes) {
                       DropEvicted(victim, bytes);
                     });
  if (room == L2Index::Reservation::kOverQuota) {
    counters_.over_quota_stores.fetch_add(1, std::memory_order_relaxed);
    file->over_quota = true;
    return Status(ErrorCode::kResourceExhausted,
                  "L2 fs: tenant '" + key.cache_salt + "' is at its quota and what it holds here "
                  "is locked by loads in flight");
  }
  if (room == L2Index::Reservation::kNoRoom) {
    return Status(ErrorCode::kResourceExhausted,
                  "L2 fs: max_size_gb cannot hold " + std::to_string(file_bytes) +
                      " more bytes (what it holds is locked by loads in flight)");
  }
  file->file_bytes = file_bytes;
  file->salt = key.cache_salt;
  file->tmp = tmp_dir_ / TemporaryFileName(::getpid(), next_tmp_.fetch_add(1));
  int error = WriteFile(object, header, file);
  if (error == ENOENT) {
    // The directory went away under us: recreate it (marked) once and try again.
    std::error_code ignored;
    if (fs::create_directories(tmp_dir_, ignored)) {
      UniqueFd base(::open(config_.base_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (base.valid()) (void)WriteMarker(base.get());
    }
    error = WriteFile(object, header, file);
  }
  if (error != 0) return Fail(error, "write " + file->tmp.string(), file);
  return Status::Ok();
}

Status FsAdapter::Publish(const L2Write& object, PendingFile* file) {
  if (config_.fsync && ::fdatasync(file->fd.get()) != 0) {
    const int error = errno;
    return Fail(error, "sync " + file->tmp.string(), file);
  }
  file->fd.Reset();
  if (::rename(file->tmp.c_str(), PathOf(*object.key).c_str()) != 0) {
    const int error = errno;
    return Fail(error, "rename into " + config_.base_path.string(), file);
  }
  index_.Commit(*object.key, file->file_bytes);
  counters_.stored_objects.fetch_add(1, std::memory_order_relaxed);
  counters_.stored_bytes.fetch_add(object.bytes.size(), std::memory_order_relaxed);
  condition_.Ok();
  return Status::Ok();
}

int FsAdapter::WriteFile(const L2Write& object, const std::string& header, PendingFile* file) {
  const bool direct = config_.use_odirect && header.size() % kDirectIoAlign == 0 &&
                      Aligned(object.bytes.data(), object.bytes.size());
  file->fd = UniqueFd(::open(file->tmp.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0),
                             0600));
  if (!file->fd.valid()) return errno;
  bool ok = false;
  if (direct) {
    const AlignedBytes aligned_header = AllocateAligned(header.size());
    std::memcpy(aligned_header.get(), header.data(), header.size());
    ok = WriteAll(file->fd.get(), aligned_header.get(), header.size(), 0);
  } else {
    ok = WriteAll(file->fd.get(), reinterpret_cast<const std::byte*>(header.data()),
                  header.size(), 0);
  }
  ok = ok && WriteAll(file->fd.get(), object.bytes.data(), object.bytes.size(),
                      static_cast<off_t>(header.size()));
  return ok ? 0 : errno;
}

std::vector<bool> FsAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  return index_.LookupAndLock(keys);
}

void FsAdapter::Unlock(std::span<const store::ObjectKey> keys) { index_.Unlock(keys); }

std::vector<L2LoadOutcome> FsAdapter::LoadNow(std::span<const L2Read> reads) {
  std::vector<L2LoadOutcome> outcomes;
  outcomes.reserve(reads.size());
  for (const L2Read& read : reads) {
    auto opened = Open(read);
    L2LoadOutcome outcome;
    if (auto* object = std::get_if<OpenedObject>(&opened)) {
      int got = ReadAll(object->fd.get(), object->header.get(), object->header_bytes, 0);
      if (got == 1) {
        got = ReadAll(object->fd.get(), object->payload.data(), object->payload.size(),
                      static_cast<off_t>(object->header_bytes));
      }
      outcome = Finish(read, *object, got < 0 ? -errno : got);
    } else {
      outcome = std::get<L2LoadOutcome>(opened);
    }
    counters_.CountLoad(outcome, read.out.size());
    outcomes.push_back(outcome);
  }
  return outcomes;
}

// One SubmitLoad's reads in the ring: what was opened, and the outcomes so far.
struct FsAdapter::AsyncLoad {
  std::vector<L2Read> reads;
  std::vector<OpenedObject> objects;
  std::vector<std::size_t> read_of;  // per object, its read's index
  std::vector<L2LoadOutcome> outcomes;
  LoadDone done;
};

void FsAdapter::SubmitLoad(std::span<const L2Read> reads, LoadDone done) {
  if (!uring_) return done(LoadNow(reads));
  auto load = std::make_shared<AsyncLoad>();
  load->reads.assign(reads.begin(), reads.end());
  load->outcomes.assign(reads.size(), L2LoadOutcome::kMissing);
  load->done = std::move(done);
  load->objects.reserve(reads.size());
  std::vector<UringReads::Read> ring_reads;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    auto opened = Open(reads[i]);
    if (auto* outcome = std::get_if<L2LoadOutcome>(&opened)) {
      load->outcomes[i] = *outcome;
      counters_.CountLoad(*outcome, reads[i].out.size());
      continue;
    }
    OpenedObject& object = load->objects.emplace_back(std::get<OpenedObject>(std::move(opened)));
    load->read_of.push_back(i);
    ring_reads.push_back(
        {object.fd.get(), {std::span(object.header.get(), object.header_bytes), object.payload}});
  }
  // Each object is verified as its read ends, while the others still read.
  uring_->Submit(
      std::move(ring_reads),
      [this, load](std::size_t j, int result) {
        const L2Read& read = load->reads[load->read_of[j]];
        const L2LoadOutcome outcome = Finish(read, load->objects[j], result);
        counters_.CountLoad(outcome, read.out.size());
        load->outcomes[load->read_of[j]] = outcome;
      },
      [load] { load->done(std::move(load->outcomes)); });
}

void FsAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  done(StoreNow(objects));
}

void FsAdapter::Remove(const store::ObjectKey& key) {
  std::error_code ignored;
  fs::remove(PathOf(key), ignored);
  index_.Erase(key);
  if (removal_observer_) removal_observer_(std::span(&key, 1));
}

std::variant<FsAdapter::OpenedObject, L2LoadOutcome> FsAdapter::Open(const L2Read& read) {
  const store::ObjectKey& key = *read.key;
  const std::optional<std::uint64_t> file_bytes = index_.SizeOf(key);
  if (!file_bytes) return L2LoadOutcome::kMissing;
  OpenedObject object;
  if (*file_bytes > read.out.size()) {
    // A raw object: its header, then the object as L1 holds it.
    object.header_bytes = *file_bytes - read.out.size();
    object.payload = read.out;
  } else {
    // Only an encoded object is no larger than the object (the serde wrapper
    // encodes only where that saves more than the header; EncodingSaves),
    // and its header's size follows from its key.
    object.header_bytes = EncodedObjectHeaderBytes(key);
    // Held under another layout (a different object size): not this object.
    if (*file_bytes <= object.header_bytes) return L2LoadOutcome::kMissing;
    object.payload = read.out.first(*file_bytes - object.header_bytes);
  }
  const bool direct = config_.use_odirect && object.header_bytes % kDirectIoAlign == 0 &&
                      Aligned(object.payload.data(), object.payload.size());
  object.fd = UniqueFd(::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0)));
  if (!object.fd.valid()) {
    if (errno == ENOENT) {  // deleted behind our back
      index_.Erase(key);
      return L2LoadOutcome::kMissing;
    }
    NoteFailure(errno, "open " + PathOf(key).string() + ": " + std::strerror(errno));
    return L2LoadOutcome::kFailed;
  }
  object.header = AllocateAligned(object.header_bytes);
  return object;
}

L2LoadOutcome FsAdapter::Finish(const L2Read& read, const OpenedObject& object, int read_result) {
  const store::ObjectKey& key = *read.key;
  if (read_result < 0) {
    NoteFailure(-read_result, "read " + PathOf(key).string() + ": " + std::strerror(-read_result));
    return L2LoadOutcome::kFailed;
  }
  Status verified = read_result == 0 ? Status(ErrorCode::kCorrupt, "truncated") : Status::Ok();
  const std::span<const std::byte> head(object.header.get(), object.header_bytes);
  if (verified.ok() && DeclaredHeaderBytes(head) != 0 &&
      DeclaredHeaderBytes(head) != object.header_bytes) {
    // Its header is longer or shorter than this read's size implied: an
    // object of another layout (the file's size matched by chance), not a
    // damaged one of ours. Left alone.
    return L2LoadOutcome::kMissing;
  }
  if (verified.ok()) {
    auto header = ParseObjectHeader(head);
    if (!header.ok() && header.status().code() == ErrorCode::kNotSupported) {
      return L2LoadOutcome::kMissing;  // a newer server's encoding: not ours to delete
    } else if (!header.ok()) {
      verified = header.status();
    } else if (header->object_bytes() != read.out.size()) {
      // An object of another layout whose file happened to have the size
      // this read expected (the header said otherwise): not this object.
      return L2LoadOutcome::kMissing;
    } else if (header->payload_bytes != object.payload.size()) {
      verified = Status(ErrorCode::kCorrupt, "payload length differs from the file's");
    } else {
      verified = VerifyAndDecode(*header, key, read.out);
    }
  }
  if (!verified.ok()) {
    corrupt_log_.Warn("L2 fs: {} failed its check and is deleted: {}", PathOf(key).string(),
                      verified.message());
    Remove(key);
    return L2LoadOutcome::kCorrupt;
  }
  condition_.Ok();
  return L2LoadOutcome::kLoaded;
}

L2AdapterStats FsAdapter::Stats() const {
  L2AdapterStats s;
  counters_.CopyTo(&s);
  s.type = "fs";
  s.description = "fs:" + config_.base_path.string();
  s.io_engine = io_engine();
  s.objects = index_.objects();
  s.usage_bytes = index_.usage_bytes();
  s.capacity_bytes = index_.capacity_bytes();
  s.condition = condition_.current();
  s.rebuild_seconds = rebuild_.seconds;
  s.rebuilt_objects = rebuild_.objects;
  return s;
}

}  // namespace lmcache::tier
