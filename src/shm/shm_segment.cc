#include "shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/file_lock.h"
#include "common/parallel.h"
#include "common/system_info.h"

namespace lmcache::shm {
namespace {

// The smallest page the kernel maps; huge pages are multiples of it.
constexpr std::size_t kPageBytes = 4096;

std::string SysError(const char* call, const std::string& name, int err) {
  std::ostringstream out;
  out << call << "(" << name << ") failed: " << std::strerror(err);
  return out.str();
}

std::string Gib(std::uint64_t bytes) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed << static_cast<double>(bytes) / static_cast<double>(kGiB);
  return out.str();
}

// Each helper wraps one syscall and names it and the segment in its error.
Status UnlinkIfPresent(const std::string& name) {
  if (shm_unlink(("/" + name).c_str()) == 0 || errno == ENOENT) return Status::Ok();
  return Status(ErrorCode::kIoError, SysError("shm_unlink", name, errno));
}

Status InUse(const std::string& name, int fd) {
  const std::optional<pid_t> holder = FlockHolder(fd);
  return Status(ErrorCode::kAlreadyExists,
                "shared-memory segment " + name + " is in use by a running lmcache-server (pid " +
                    (holder ? std::to_string(*holder) : std::string("unknown")) +
                    "); stop it first or choose another --shm-name");
}

// A segment of our name is either a live server's (it holds the segment's
// lock: refuse) or a leftover of a dead one (nobody holds it: remove it).
Status RemoveIfStale(const std::string& name) {
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::Ok();
    return Status(ErrorCode::kIoError, SysError("shm_open", name, errno));
  }
  LMC_ASSIGN_OR_RETURN(const bool ours, TryLockExclusive(fd.get()));
  if (!ours) return InUse(name, fd.get());
  return UnlinkIfPresent(name);
}

Result<UniqueFd> OpenExclusive(const std::string& name) {
  UniqueFd fd(shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid() && errno == EEXIST) {
    return Status(ErrorCode::kAlreadyExists,
                  "shared-memory segment " + name + " was created by another process meanwhile");
  }
  if (!fd.valid()) return Status(ErrorCode::kIoError, SysError("shm_open", name, errno));
  // Held for the server's whole life: proof to later starts that it is alive.
  LMC_ASSIGN_OR_RETURN(const bool locked, TryLockExclusive(fd.get()));
  if (!locked) return InUse(name, fd.get());
  // The umask cannot widen 0600, but an inherited default ACL could: set it explicitly.
  if (fchmod(fd.get(), 0600) != 0)
    return Status(ErrorCode::kIoError, SysError("fchmod", name, errno));
  return fd;
}

Status Truncate(int fd, const std::string& name, std::uint64_t size) {
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) return Status::Ok();
  return Status(ErrorCode::kIoError, SysError("ftruncate", name, errno));
}

Status Fallocate(int fd, const std::string& name, std::uint64_t offset, std::uint64_t size,
                 const std::string& shm_dir) {
  const int err = posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(size));
  if (err == 0) return Status::Ok();
  if (err == ENOSPC) {
    auto space = QueryFilesystemSpace(shm_dir);
    return Status(ErrorCode::kShmTooSmall,
                  ShmTooSmallMessage(size, space.ok() ? space->free_bytes : 0, shm_dir));
  }
  return Status(ErrorCode::kIoError, SysError("posix_fallocate", name, err));
}

Result<std::byte*> MapShared(int fd, const std::string& name, std::uint64_t size) {
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return Status(ErrorCode::kIoError, SysError("mmap", name, errno));
  return static_cast<std::byte*>(addr);
}

Status CheckCapacity(const CreateOptions& options) {
  auto space = QueryFilesystemSpace(options.shm_dir);
  if (!space.ok()) {
    return Status(ErrorCode::kShmTooSmall, "cannot tell whether " + options.shm_dir +
                                               " can hold the L1 pool (" +
                                               space.status().message() + "); mount a tmpfs there");
  }
  if (space->free_bytes < options.size_bytes) {
    return Status(ErrorCode::kShmTooSmall,
                  ShmTooSmallMessage(options.size_bytes, space->free_bytes, options.shm_dir));
  }
  return Status::Ok();
}

}  // namespace

std::string ShmTooSmallMessage(std::uint64_t needed, std::uint64_t free_bytes,
                               const std::string& shm_dir) {
  const auto needed_gib = static_cast<std::uint64_t>(
      std::ceil(static_cast<double>(needed) / static_cast<double>(kGiB)));
  std::ostringstream out;
  out << shm_dir << " cannot hold the L1 pool: it needs " << Gib(needed) << " GiB, " << shm_dir
      << " has " << Gib(free_bytes) << " GiB free. Fix: give the container a larger /dev/shm "
      << "(docker run --shm-size=" << needed_gib + 1 << "g ...; Kubernetes: mount an emptyDir "
      << "with medium: Memory and sizeLimit >= " << needed_gib + 1 << "Gi at /dev/shm), "
      << "free space in " << shm_dir << ", or lower --l1-size-gb.";
  return out.str();
}

ShmSegment::ShmSegment(std::string name, UniqueFd fd, std::byte* base, std::uint64_t size,
                       bool owner)
    : name_(std::move(name)), fd_(std::move(fd)), base_(base), size_(size), owner_(owner) {}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, size_);
  if (owner_) (void)Unlink();
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::Create(const CreateOptions& options) {
  if (options.size_bytes == 0) return InvalidArgument("shared-memory segment size must be > 0");
  // A segment of our own name is refused while a live server holds it, and
  // removed when it is the leftover of a crashed run (pid reuse or an
  // explicit --shm-name).
  LMC_RETURN_IF_ERROR(RemoveIfStale(options.name));
  LMC_RETURN_IF_ERROR(CheckCapacity(options));
  LMC_ASSIGN_OR_RETURN(UniqueFd fd, OpenExclusive(options.name));
  // From here on the name is ours: remove it again if any later step fails.
  std::unique_ptr<ShmSegment> segment(new ShmSegment(options.name, UniqueFd(), nullptr, 0, true));
  LMC_RETURN_IF_ERROR(Truncate(fd.get(), options.name, options.size_bytes));
  if (options.reserve_all) {
    LMC_RETURN_IF_ERROR(Fallocate(fd.get(), options.name, 0, options.size_bytes, options.shm_dir));
  }
  LMC_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), options.name, options.size_bytes));
  segment->fd_ = std::move(fd);
  segment->base_ = base;
  segment->size_ = options.size_bytes;
  if (options.advise_huge_pages && madvise(base, options.size_bytes, MADV_HUGEPAGE) != 0) {
    return Status(ErrorCode::kIoError, SysError("madvise(MADV_HUGEPAGE)", options.name, errno));
  }
  return segment;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::Attach(const std::string& name,
                                                       std::uint64_t expected_size) {
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    const ErrorCode code = errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError;
    return Status(code, SysError("shm_open", name, errno));
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0)
    return Status(ErrorCode::kIoError, SysError("fstat", name, errno));
  const auto actual = static_cast<std::uint64_t>(info.st_size);
  if (actual == 0 || (expected_size != 0 && actual != expected_size)) {
    return Status(ErrorCode::kLayoutMismatch, "shared-memory segment " + name + " has " +
                                                  std::to_string(actual) + " bytes, expected " +
                                                  std::to_string(expected_size));
  }
  LMC_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), name, actual));
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(fd), base, actual, false));
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::Adopt(const std::string& name, UniqueFd fd,
                                                      std::uint64_t expected_size) {
  struct stat info {};
  if (!fd.valid() || fstat(fd.get(), &info) != 0) {
    return Status(ErrorCode::kIoError, SysError("fstat", name, errno));
  }
  const auto actual = static_cast<std::uint64_t>(info.st_size);
  if (!S_ISREG(info.st_mode) || actual != expected_size) {
    return Status(ErrorCode::kLayoutMismatch,
                  "the segment handed over for " + name + " has " + std::to_string(actual) +
                      " bytes, this server's pool " + std::to_string(expected_size));
  }
  LMC_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), name, actual));
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(fd), base, actual, false));
}

Status ShmSegment::Reserve(std::uint64_t offset, std::uint64_t length,
                           const std::string& shm_dir) const {
  if (offset >= size_) return Status::Ok();
  return Fallocate(fd_.get(), name_, offset, std::min(length, size_ - offset), shm_dir);
}

void ShmSegment::PrefaultRange(std::uint64_t offset, std::uint64_t length,
                               unsigned threads) const {
  if (offset >= size_) return;
  length = std::min(length, size_ - offset);
  const std::size_t grain = 64 * kMiB;  // per-thread step; a multiple of any page size
  std::byte* const first = base_ + offset;
  ParallelFor(static_cast<std::size_t>(length), grain, threads == 0 ? HardwareThreads() : threads,
              [first](std::size_t begin, std::size_t end) {
                // Populating first is measurably faster than faulting page by
                // page (kernels before 5.14 lack it: the writes then fault).
                (void)madvise(first + begin, end - begin, MADV_POPULATE_WRITE);
                auto* bytes = reinterpret_cast<volatile std::byte*>(first);
                for (std::size_t off = begin; off < end; off += kPageBytes) bytes[off] = bytes[off];
              });
}

std::uint64_t ShmSegment::WrittenEnd(std::uint64_t from) const {
  if (from >= size_) return size_;
  const off_t hole = lseek(fd_.get(), static_cast<off_t>(from), SEEK_HOLE);
  // hugetlbfs has no holes to report (the end of the file comes back): its
  // pages are reserved when the server maps the segment, so reading one never
  // fails. An error means: touch nothing (the copies will fault instead).
  if (hole < 0) return from;
  return std::min<std::uint64_t>(static_cast<std::uint64_t>(hole), size_);
}

// The loads race, by design, with this process's own copies into the same
// pages (and, invisibly to TSan, with other processes'): their values are
// discarded and only the mapping they leave behind matters. So TSan does not
// instrument them; every other access to the pool stays checked.
__attribute__((no_sanitize("thread")))
void ShmSegment::ReadTouch(std::uint64_t offset, std::uint64_t length) const {
  if (offset >= size_) return;
  const std::uint64_t end = offset + std::min(length, size_ - offset);
  const auto* bytes = reinterpret_cast<const volatile std::byte*>(base_);
  // Volatile loads are never elided; nothing is written.
  for (std::uint64_t off = offset; off < end; off += kPageBytes) {
    [[maybe_unused]] const std::byte value = bytes[off];
  }
}

PrefaultReport ShmSegment::Prefault(unsigned threads) const {
  PrefaultReport report;
  report.threads = threads == 0 ? HardwareThreads() : threads;
  const auto start = std::chrono::steady_clock::now();
  PrefaultRange(0, size_, report.threads);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.gib_per_second =
      report.seconds > 0 ? static_cast<double>(size_) / static_cast<double>(kGiB) / report.seconds
                         : 0;
  return report;
}

Status ShmSegment::Unlink() {
  if (!owner_) return Status(ErrorCode::kWrongState, "only the creator unlinks " + name_);
  if (unlinked_) return Status::Ok();
  unlinked_ = true;
  return UnlinkIfPresent(name_);
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::Reopen(const std::string& name,
                                                       std::uint64_t expected_size) {
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    const ErrorCode code = errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError;
    return Status(code, SysError("shm_open", name, errno));
  }
  LMC_ASSIGN_OR_RETURN(const bool ours, TryLockExclusive(fd.get()));
  if (!ours) return InUse(name, fd.get());
  struct stat info {};
  if (fstat(fd.get(), &info) != 0)
    return Status(ErrorCode::kIoError, SysError("fstat", name, errno));
  const auto actual = static_cast<std::uint64_t>(info.st_size);
  if (!S_ISREG(info.st_mode) || actual != expected_size) {
    return Status(ErrorCode::kLayoutMismatch,
                  "the segment " + name + " a dead server left has " + std::to_string(actual) +
                      " bytes, this server's pool " + std::to_string(expected_size));
  }
  LMC_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), name, actual));
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, std::move(fd), base, actual, false));
}

}  // namespace lmcache::shm
