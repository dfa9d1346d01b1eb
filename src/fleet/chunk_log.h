// ChunkLog: what this server's L1 came to hold and lost, as chunk ids
// (PeerDirectory::ChunkIdOf), numbered, for the directories of its peers
// (issue 43): a peer's DirectoryFeed reads it with p2p_chunk_events, and
// after a gap (or at first contact) lists our L1 with p2p_chunk_listing,
// then reads on from where the listing began.
//
// Why not the KV event log (events/kv_event_log.h): that log keeps a
// stored chunk only with its token binding (a chunk loaded from L2 or a
// peer, or adopted at a warm restart, has none and is never announced),
// pauses until its first reader, numbers every medium's and model's records
// together, and carries tokens a directory does not need. This one is
// recorded from startup, L1 only, 8 bytes per chunk.
//
// A chunk id stands for every object of that model, tenant and chunk hash
// (its KV ranks, object groups, layouts): the log counts the resident
// objects of each id, and records a chunk as stored when its first object
// arrives and as removed when its last one goes. So evicting one rank of a
// chunk whose other ranks stay announces nothing, and an eviction and a
// re-admission whose callbacks reach the log in the other order (they run
// after the table's locks) still leave the chunk held. Objects resident
// before the log listened (a warm restart's) are counted with Seed. The
// counts cost about 40 bytes per resident chunk.
//
// A record is one table callback's chunks of one change (a callback's
// chunks past kMaxRecordChunks go in further records), numbered
// consecutively from 1.
// The log keeps the newest records up to `max_chunks` chunks in all; a
// reader whose cursor fell behind them gets `lost` (and resynchronises from
// a listing), and one whose cursor is ahead (it read a previous life: the
// incarnation differs) too.
//
// Thread-safety: every method from any thread. The callbacks come from the
// table's threads, never under a table lock, and hash outside the log's
// mutex (a leaf).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fleet/peer_directory.h"
#include "store/listener.h"

namespace lmcache::fleet {

struct ChunkRecord {
  std::uint64_t seq = 0;
  DirectoryChange change = DirectoryChange::kStored;
  std::vector<ChunkId> chunks;
  bool operator==(const ChunkRecord&) const = default;
};

// A page of records after a reader's cursor (p2p_chunk_events' answer).
struct ChunkPage {
  std::uint64_t incarnation = 0;
  std::uint64_t next_cursor = 0;  // the last record in the page (the cursor, when none)
  bool lost = false;              // records after the cursor are gone, or it is ahead of the log
  std::vector<ChunkRecord> records;
  bool operator==(const ChunkPage&) const = default;
};

struct ChunkLogConfig {
  std::size_t max_chunks = 1u << 20;  // 8 MiB of ids: 100 s of 10,000 admissions a second
};

struct ChunkLogStats {
  std::uint64_t last_seq = 0;
  std::uint64_t records = 0;  // kept now
  std::uint64_t chunks = 0;   // kept now
  std::uint64_t dropped_records = 0;
};

class ChunkLog final : public store::StoreListener {
 public:
  static constexpr std::size_t kMaxRecordChunks = 4096;

  // `incarnation` names this process's log (never 0).
  ChunkLog(const ChunkLogConfig& config, std::uint64_t incarnation);

  void OnAdmitted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  store::AdmissionSource source) override;
  void OnEvicted(std::span<const store::ObjectKey> keys,
                 std::span<const std::uint64_t> bytes) override;
  void OnDeleted(std::span<const store::ObjectKey> keys,
                 std::span<const std::uint64_t> bytes) override;

  // Counts objects already resident when the log started listening (before
  // any is served), without recording them: a peer lists them.
  void Seed(std::span<const store::ObjectKey> keys) LMC_EXCLUDES(mu_);

  std::uint64_t incarnation() const { return incarnation_; }
  // The last record's number (0: none yet).
  std::uint64_t last_seq() const LMC_EXCLUDES(mu_);
  // The records after `cursor`, at most `max_records` of them and, past the
  // first, at most `max_chunks` chunks in all.
  ChunkPage ReadAfter(std::uint64_t cursor, std::size_t max_records, std::size_t max_chunks) const
      LMC_EXCLUDES(mu_);
  ChunkLogStats Stats() const LMC_EXCLUDES(mu_);

 private:
  void Append(DirectoryChange change, std::span<const store::ObjectKey> keys) LMC_EXCLUDES(mu_);

  const ChunkLogConfig config_;
  const std::uint64_t incarnation_;
  mutable Mutex mu_;
  std::deque<ChunkRecord> records_ LMC_GUARDED_BY(mu_);
  // Resident objects per chunk id (absent: none).
  std::unordered_map<ChunkId, std::uint32_t> resident_ LMC_GUARDED_BY(mu_);
  std::uint64_t chunks_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t next_seq_ LMC_GUARDED_BY(mu_) = 1;
  std::uint64_t dropped_ LMC_GUARDED_BY(mu_) = 0;
};

// The chunk id of each of `keys`, in order.
std::vector<ChunkId> ChunkIdsOf(std::span<const store::ObjectKey> keys);
// `ids` each once, in first-seen order.
std::vector<ChunkId> Distinct(std::vector<ChunkId> ids);
// The chunk ids of `keys`, each once, in first-seen order.
std::vector<ChunkId> DistinctChunkIds(std::span<const store::ObjectKey> keys);

}  // namespace lmcache::fleet
