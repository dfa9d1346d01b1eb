// PoolJournal: the crash-recovery journal of the L1 pool (--recover-pool).
//
// A server-only shared-memory file beside the pool segment, named
// "<pool name>.journal" (mode 0600; workers never map it), that tells a server
// started after a kill -9 which bytes of the surviving segment hold which
// object. Like the segment, it outlives the process that wrote it; unlike the
// segment, no worker can write it. Recovery (pool_recovery.h) verifies every
// object against the checksum recorded here before it serves it.
//
// Each slot lent to a writer or resident has a record: Lent (a worker may be
// copying into it) -> Committed (admitted, its key written) -> Sealed (the
// sealer thread has checksummed its bytes) -> Lent again once it leaves the
// index (withdrawn: a lease may still read it) -> Free (the slot went back
// to the allocator, before the allocator can lend it again). Every transition
// writes the record's fields first and its state word last, with release
// ordering. THE COMMIT POINT of an object, for recovery, is the store of its
// Sealed state: an object is recovered only if that store happened, and the
// key and checksum it covers were stored before it. A kill -9 loses no store
// that executed (the journal is shared memory: nothing to flush), so a torn
// record is one whose state word still says what it said before the tear.
// Checksums are computed after the commit, off the store path, by one thread:
// objects committed but not yet sealed at a crash are not recovered.
//
// Slabs are recorded at their first page (the allocator tells the journal as
// SlabObserver), and pre-faulting's progress before any new page is lent.
//
// Thread-safety: internally synchronised by one mutex, a leaf in the lock
// order (held for a few stores; it calls nothing); every method may be called
// from any thread. The sealer takes it only to take a batch of jobs, and
// seals by compare-and-swap on the state word. SlabAdded/SlabReleased run
// under the allocator's mutex and take no lock: each slab entry is written
// only there.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "lmcache/status.h"
#include "restart/pool_journal_format.h"
#include "shm/shm_segment.h"
#include "store/object_key.h"
#include "store/pool_image.h"
#include "store/slot_journal.h"

namespace lmcache::restart {

using alloc::Offset;
using store::ObjectKey;

// What a journal must agree with to describe a pool: its configuration and
// the segment file itself (device and inode: a journal left beside another
// segment of the same name describes other bytes).
struct JournalGeometry {
  store::PoolGeometry pool;
  std::uint64_t segment_device = 0;
  std::uint64_t segment_inode = 0;
  bool operator==(const JournalGeometry&) const = default;
};
// The geometry of the segment open on `segment_fd`, laid out as `pool`.
Result<JournalGeometry> JournalGeometryOf(int segment_fd, const store::PoolGeometry& pool);

// The key of a record: everything but the chunk hash lives in a namespace
// entry (a node serves few models, salts and tag sets).
std::string EncodeKeyNamespace(const ObjectKey& key);
// Fails on bytes EncodeKeyNamespace cannot have made, or a key that
// ValidateObjectKey refuses; sets every field but chunk_hash.
Result<ObjectKey> DecodeKeyNamespace(std::span<const std::byte> body);

// "<pool name>.journal", under /dev/shm.
std::string JournalName(const std::string& pool_name);
// Removes the journal an earlier run left for `pool_name`, if any: a server
// without --recover-pool records nothing, and a journal must never outlive
// the bytes it describes.
void RemoveJournal(const std::string& pool_name);

class PoolJournal : public store::SlotJournal {
 public:
  // A new, empty journal for the pool `pool` (its bytes, for the sealer),
  // written under a private name until Publish() renames it over
  // JournalName(): a predecessor's journal stays whole until this one is
  // complete (a recovery publishes only once everything adopted is recorded).
  static Result<std::unique_ptr<PoolJournal>> Create(const std::string& pool_name,
                                                     const JournalGeometry& geometry,
                                                     std::span<const std::byte> pool);
  // Stops the sealer; removes the file (the private one if never published)
  // unless Disown() was called.
  ~PoolJournal() override;
  PoolJournal(const PoolJournal&) = delete;
  PoolJournal& operator=(const PoolJournal&) = delete;

  // Renames the journal over JournalName(); idempotent.
  Status Publish() override;

  // Slots lent to a writer, before the writer learns of them.
  void Lent(std::span<const Offset> offsets, std::uint64_t size) override LMC_EXCLUDES(mu_);
  // A slot a successor keeps from reuse until `until_ms` (the table's clock),
  // never served: a recovery's or a takeover's held slot. Recorded lent
  // with its deadline, so that a recovery after another crash keeps it no
  // longer than this one would have.
  void Held(Offset offset, std::uint64_t size, TimeMs until_ms) override LMC_EXCLUDES(mu_);
  // An object admitted at `offset` (lent before, or adopted from a
  // predecessor): its key is recorded and its checksum queued, or, given
  // (a recovery verified it), recorded with it as sealed.
  void Committed(const ObjectKey& key, Offset offset, std::uint64_t size,
                 std::optional<std::uint64_t> checksum) override LMC_EXCLUDES(mu_);
  // The object at `offset` left the index (evicted, deleted, retired while a
  // lease still reads it): never recovered again, its slot held until Freed.
  void Withdrawn(Offset offset) override LMC_EXCLUDES(mu_);
  // The slot at `offset` is about to go back to the allocator.
  void Freed(Offset offset) override LMC_EXCLUDES(mu_);
  // Pages below `bytes` may be lent from now on (called before they are).
  void ReadyBytes(std::uint64_t bytes) override;
  void SlabAdded(const alloc::SlabRecord& slab) override;
  void SlabReleased(const alloc::SlabRecord& slab) override;

  // A successor took the pool over and replaced the file: leave it.
  void Disown() override { owner_ = false; }
  // Waits until every committed object is sealed (or `timeout`); true when so.
  bool WaitSealed(std::chrono::milliseconds timeout) LMC_EXCLUDES(mu_);
  store::JournalStats Stats() const override LMC_EXCLUDES(mu_);

 private:
  struct SealJob {
    std::uint32_t index = 0;
    std::uint64_t word = 0;  // the record's state word at its commit
    Offset offset = 0;
    std::uint64_t size = 0;
    std::chrono::steady_clock::time_point queued;
  };
  static constexpr std::size_t kSealBatch = 256;
  static constexpr std::chrono::milliseconds kBoostAfter{250};

  PoolJournal(std::string name, UniqueFd fd, std::byte* base, std::uint64_t file_bytes,
              std::uint64_t num_pages, std::uint64_t capacity, std::span<const std::byte> pool);
  journal_format::Header& header() const;
  journal_format::Record& record(std::uint32_t index) const;
  // The record for a new life at `offset` (its state set to `state`, last).
  std::uint32_t NewRecordLocked(Offset offset, std::uint64_t size,
                                journal_format::RecordState state, TimeMs held_until_ms = 0)
      LMC_REQUIRES(mu_);
  // Stores `word` as the record's state, keeping the count of sealed ones.
  void SetStateLocked(journal_format::Record& r, std::uint64_t word) LMC_REQUIRES(mu_);
  // The namespace entry of an encoded key, appended if new; nullopt when the area is full.
  std::optional<std::uint32_t> NamespaceLocked(std::string body) LMC_REQUIRES(mu_);
  // Forgets queued jobs of records whose life changed since.
  void DropStaleLocked() LMC_REQUIRES(mu_);
  void SealLoop();
  // The sealer thread's scheduling policy: SCHED_IDLE, or SCHED_OTHER at its
  // nice 19 while boosted (a syscall on the sealer's tid, from any thread).
  void SetSealerPolicy(int policy);
  // Hashes a job's bytes and seals its record if its state word is unchanged
  // (a compare-and-swap: no lock).
  void SealOne(const SealJob& job);

  const std::string name_;
  std::string staging_name_;
  bool published_ = false;
  UniqueFd fd_;
  std::byte* const base_;
  const std::uint64_t file_bytes_;
  const std::uint64_t num_pages_;
  const std::uint64_t capacity_;
  const journal_format::Parts parts_;
  const std::span<const std::byte> pool_;
  bool owner_ = true;

  mutable Mutex mu_;
  CondVar work_;
  CondVar sealed_cv_;
  std::unordered_map<Offset, std::uint32_t> record_of_ LMC_GUARDED_BY(mu_);
  std::vector<std::uint32_t> free_records_ LMC_GUARDED_BY(mu_);
  std::uint64_t records_used_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t next_sequence_ LMC_GUARDED_BY(mu_) = 1;
  std::unordered_map<std::string, std::uint32_t> namespace_of_ LMC_GUARDED_BY(mu_);
  std::uint64_t namespace_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::deque<SealJob> to_seal_ LMC_GUARDED_BY(mu_);  // oldest first
  bool sealing_ LMC_GUARDED_BY(mu_) = false;         // the sealer holds a batch
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  bool boosted_ LMC_GUARDED_BY(mu_) = false;  // the sealer runs at nice 19, not idle
  std::atomic<pid_t> sealer_tid_{0};
  store::JournalCounters counts_;
  std::thread sealer_;
};

// The factory of L1Config::journal for --recover-pool (store/slot_journal.h).
Result<std::unique_ptr<store::SlotJournal>> MakePoolJournal(const std::string& pool_name,
                                                            const store::PoolGeometry& geometry,
                                                            const shm::ShmSegment& segment);

}  // namespace lmcache::restart
