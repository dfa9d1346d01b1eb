// ShmSegment: one RAII POSIX shared-memory mapping (the L1 pool).
//
// Create() is the server side: it refuses a segment of the same name that a
// live server holds (kAlreadyExists, naming its pid) and removes one a dead
// server left, checks that /dev/shm can hold the size, creates the segment
// with mode 0600 and O_CLOEXEC, takes an flock on it for its whole life (the
// proof of a live owner), reserves its pages with posix_fallocate (so a short
// /dev/shm fails here, not with SIGBUS later) and maps it MAP_SHARED. The
// creator owns the name: its destructor (or Unlink()) removes it. Attach() is the client
// side: it maps an existing segment by name, checks the expected size and never
// unlinks. The mapping is unmapped and the fd closed on destruction.
//
// Thread-safety: a ShmSegment object is not synchronised, but its accessors are
// const and may be read from many threads once constructed. The mapped bytes
// themselves are shared with other processes; callers coordinate access to
// them through the object table's leases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/unique_fd.h"
#include "lmcache/status.h"

namespace lmcache::shm {

struct CreateOptions {
  std::string name;                  // already normalised (see shm_name.h)
  std::uint64_t size_bytes = 0;      // > 0
  std::string shm_dir = "/dev/shm";  // where the name appears; for the capacity check
  // Reserve every page at once (posix_fallocate of the whole size). Off:
  // the caller reserves ranges with Reserve() before it uses them (the
  // background prefaulter), so a large pool starts at once; the capacity is
  // still checked up front.
  bool reserve_all = true;
};

struct PrefaultReport {
  double seconds = 0;
  double gib_per_second = 0;
  unsigned threads = 0;
};

class ShmSegment {
 public:
  static Result<std::unique_ptr<ShmSegment>> Create(const CreateOptions& options);
  // `expected_size` == 0 skips the size check.
  static Result<std::unique_ptr<ShmSegment>> Attach(const std::string& name,
                                                    std::uint64_t expected_size);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool owner() const { return owner_; }
  std::span<std::byte> bytes() const { return {base_, static_cast<std::size_t>(size_)}; }

  // Maps every page of the segment into this process's page tables from
  // `threads` threads (0 = all cores), so later copies do not pay page faults.
  // Contents are preserved (MADV_POPULATE_WRITE; on kernels without it, a
  // read then a write-back of one byte per page, which is safe only while no
  // other process writes the segment: at server startup, or before a client
  // starts copying).
  PrefaultReport Prefault(unsigned threads) const;
  // Allocates the pages of [offset, offset + length) in the filesystem, so a
  // later write into them can never fail for lack of space (no SIGBUS).
  // kShmTooSmall, with the fix, when /dev/shm has no room for them.
  Status Reserve(std::uint64_t offset, std::uint64_t length, const std::string& shm_dir) const;
  // Faults [offset, offset + length) in, on `threads` threads (0 = one per core).
  void PrefaultRange(std::uint64_t offset, std::uint64_t length, unsigned threads) const;

  // Removes the name (owner only; idempotent). The mapping stays valid.
  Status Unlink();

 private:
  ShmSegment(std::string name, UniqueFd fd, std::byte* base, std::uint64_t size, bool owner);

  std::string name_;
  UniqueFd fd_;
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
};

// The operator-facing message for a /dev/shm that cannot hold `needed` bytes.
std::string ShmTooSmallMessage(std::uint64_t needed, std::uint64_t free_bytes,
                               const std::string& shm_dir);

}  // namespace lmcache::shm
