// Recovery of the L1 pool after its server died (--recover-pool): what a
// successor may adopt from the segment and the journal (pool_journal.h) a
// dead server left behind.
//
// Served again: every object whose record is Sealed (its commit point), whose
// key decodes, whose slot lies where a recorded slab puts one, and whose bytes
// still hash to the recorded checksum; the newest record wins a slot or a key
// named twice. Everything else in a recorded slab is *held*: kept from reuse
// for a write TTL, never served (a worker of the dead server may still be
// copying into a slot it was lent, or into one it was lent and lost). Records
// that fit no recorded slab are dropped: their slots are not the dead
// server's any more. The journal is read as untrusted bytes: anything
// malformed is refused or dropped, never followed.
//
// Thread-safety: PlanRecovery is reentrant; it reads the pool from up to
// `threads` threads. JournalFile is a plain RAII value.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/unique_fd.h"
#include "lmcache/status.h"
#include "restart/pool_journal.h"
#include "store/l1_cache.h"
#include "store/pool_image.h"

namespace lmcache::restart {

struct RecoveryReport {
  std::uint64_t records = 0;  // live records in the journal
  std::uint64_t objects = 0;  // verified: served again
  std::uint64_t bytes = 0;
  std::uint64_t held_slots = 0;  // kept from reuse (until a write TTL from now at most)
  std::uint64_t held_bytes = 0;
  std::uint64_t holds_ended = 0;  // held by an earlier recovery until a time now past: freed
  // Of the records not served, why:
  std::uint64_t staged = 0;               // lent to a writer
  std::uint64_t unsealed = 0;             // committed, checksum not computed before the crash
  std::uint64_t checksum_mismatches = 0;  // bytes changed after the seal
  std::uint64_t superseded = 0;           // a newer record named the slot or the key
  std::uint64_t undecodable = 0;          // key namespace missing or malformed
  std::uint64_t outside_slabs = 0;        // no recorded slab has that slot (dropped)
};

struct RecoveryPlan {
  store::PoolImage image;  // resident in commit order, oldest first
  RecoveryReport report;
};

// Fails (the caller starts cold) when the journal is not one of a pool of
// `expected` geometry, on this very segment, or is malformed as a whole.
Result<RecoveryPlan> PlanRecovery(std::span<const std::byte> journal,
                                  std::span<const std::byte> pool, const JournalGeometry& expected,
                                  unsigned threads);

// A server started after its predecessor died (--recover-pool): reopens the
// segment of config.shm_name that nobody holds any more and adopts, in
// place, every object the journal it left proves intact; slots a writer may
// still hold are kept from reuse for a write TTL at most. kNotFound when
// there is no segment or no journal (start cold); kAlreadyExists when a live
// server holds the segment. On any error the segment is left as it was.
Result<std::unique_ptr<store::L1Cache>> RecoverPool(const store::L1Config& config,
                                                    const Clock* clock, RecoveryReport* report);

// The journal a dead server left for `pool_name`, mapped read-only.
// kNotFound when there is none.
class JournalFile {
 public:
  static Result<JournalFile> Open(const std::string& pool_name);
  JournalFile(JournalFile&& other) noexcept;
  JournalFile& operator=(JournalFile&&) = delete;
  ~JournalFile();
  std::span<const std::byte> bytes() const { return {base_, size_}; }

 private:
  JournalFile(UniqueFd fd, const std::byte* base, std::size_t size)
      : fd_(std::move(fd)), base_(base), size_(size) {}
  UniqueFd fd_;
  const std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace lmcache::restart
