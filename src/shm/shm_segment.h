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
  // Ask for transparent huge pages (MADV_HUGEPAGE) before any page is
  // touched: for a tmpfs mounted huge=advise (see huge_pages.h).
  bool advise_huge_pages = false;
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

  // Server side, on a takeover: maps the segment whose descriptor the
  // predecessor passed (SCM_RIGHTS). It owns the name (its destructor
  // unlinks it) only once ClaimName() says the adoption succeeded. The descriptor shares the predecessor's open file
  // description, so its flock (the proof of a live owner) stays held without
  // a gap. Fails unless the descriptor is a segment of `expected_size` bytes.
  static Result<std::unique_ptr<ShmSegment>> Adopt(const std::string& name, UniqueFd fd,
                                                   std::uint64_t expected_size);

  // Server side, after a crash (--recover-pool): maps the segment a dead
  // server left under `name` and takes its flock, without owning the name
  // until ClaimName(). kNotFound when there is none; kAlreadyExists when a
  // live server holds it; kLayoutMismatch when its size is not `expected_size`.
  static Result<std::unique_ptr<ShmSegment>> Reopen(const std::string& name,
                                                    std::uint64_t expected_size);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool owner() const { return owner_; }
  std::span<std::byte> bytes() const { return {base_, static_cast<std::size_t>(size_)}; }

  // Makes every page of the segment resident from `threads` threads (0 = all
  // cores): PrefaultRange over the whole segment. Server side, before any
  // page is handed out.
  PrefaultReport Prefault(unsigned threads) const;
  // Allocates the pages of [offset, offset + length) in the filesystem, so a
  // later write into them can never fail for lack of space (no SIGBUS).
  // kShmTooSmall, with the fix, when /dev/shm has no room for them.
  Status Reserve(std::uint64_t offset, std::uint64_t length, const std::string& shm_dir) const;
  // Makes [offset, offset + length) resident, on `threads` threads (0 = one
  // per core): MADV_POPULATE_WRITE allocates the pages, then a write of each
  // page's first byte with its own value. The write is what counts: on
  // hypervisors that back guest memory lazily (and on some with shadow page
  // tables) populated pages still cost a slow fault at their first real
  // write, about a fifth of memory speed (docs/performance.md). Contents are
  // preserved, but the write-back is safe only while no other process writes
  // the range: call it only on ranges not yet handed out.
  void PrefaultRange(std::uint64_t offset, std::uint64_t length, unsigned threads) const;

  // Client side: the end of the written prefix that starts at `from` (the
  // first hole of the file at or after it; a page reserved but never written
  // is a hole). The server writes pages in address order before it hands
  // them out, so this is how far it got.
  std::uint64_t WrittenEnd(std::uint64_t from) const;
  // Client side: maps [offset, offset + length) into this process's page
  // tables with one read of each page, so the first copy into a page pays no
  // fault. A read never changes a byte, so it is safe while other processes
  // write the range; it allocates nothing as long as the range is written
  // (WrittenEnd), so it cannot SIGBUS on a full /dev/shm.
  void ReadTouch(std::uint64_t offset, std::uint64_t length) const;

  // Removes the name (owner only; idempotent). The mapping stays valid.
  Status Unlink();
  // Gives the name up without removing it: a successor has adopted the
  // segment (Adopt), and this destructor only unmaps and closes.
  void Disown() { owner_ = false; }
  // An adopted segment's name is this object's to remove from now on.
  void ClaimName() { owner_ = true; }
  // The descriptor, to pass to a successor; owned by this object.
  int fd() const { return fd_.get(); }

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
