// P2pAdapter, the peers as a source of the L2 cascade, against a fake fleet
// (fleet::PeerAccess) that answers the reference's operations 29-31 from
// what each fake peer holds and copies reads from each peer's own memory,
// so a test sees which peer a chunk came from and which peer got each
// unlock, and can hold reads back. The real thing, servers in other
// processes over ZMQ and UCX, is tests/python/test_p2p_sharing.py and
// test_p2p_fleet.py.
#include "tier/p2p/p2p_adapter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/msgpack_codec.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"
#include "fleet/p2p_object_key.h"
#include "protocol/p2p_codec.h"
#include "protocol/wire_codec.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;
using testing::KeysN;
constexpr std::uint64_t kObject = 4096;

// Peers 1..n; peer p's chunk of key i is kObject bytes of (16 * p + i).
class FakeFleet final : public fleet::PeerAccess {
 public:
  explicit FakeFleet(int peers) : memory_(static_cast<std::size_t>(peers) + 1) {
    for (int p = 1; p <= peers; ++p) memory_[p].resize(16 * kObject);
  }
  // Peer `p` holds key i (i < 16), with `size` bytes.
  void Hold(int p, int i, std::uint64_t size = kObject) {
    std::lock_guard lock(mu_);
    std::memset(memory_[p].data() + i * kObject, 16 * p + i, kObject);
    holds_[p][KeyN(i)] = {static_cast<std::int64_t>(i * kObject), static_cast<std::int64_t>(size)};
  }
  void Drop(int p, int i) {
    std::lock_guard lock(mu_);
    holds_[p].erase(KeyN(i));
  }
  void Silence(int p) { silent_.insert(p); }
  // Peer `p` answers queries, but the answers reach the requester past its
  // deadline (it sees kTimeout; the peer's locks stand).
  void LoseQueryReplies(int p) { lost_queries_.insert(p); }
  // The tasks peer `p` was asked to end.
  std::vector<std::int64_t> Ended(int p) {
    std::lock_guard lock(mu_);
    return ended_[p];
  }
  void HoldReads(bool hold) {
    std::lock_guard lock(mu_);
    hold_reads_ = hold;
  }
  void ReleaseReads() {
    std::vector<std::function<void()>> reads;
    {
      std::lock_guard lock(mu_);
      reads.swap(held_reads_);
    }
    for (auto& read : reads) read();
  }
  // The keys each peer was asked to unlock, in order; and the locks it holds.
  std::vector<store::ObjectKey> Unlocked(int p) {
    std::lock_guard lock(mu_);
    return unlocked_[p];
  }
  int Locks(int p) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [id, task] : tasks_) n += task.peer == p ? static_cast<int>(task.locked.size()) : 0;
    return n;
  }
  // Peer `p` restarted: its tasks and their locks went with its old life,
  // and its new life's task ids are others.
  void Restart(int p) {
    std::lock_guard lock(mu_);
    std::erase_if(tasks_, [p](const auto& entry) { return entry.second.peer == p; });
    next_task_ += 1000;
  }
  void UseLocalPool(std::span<std::byte> pool) { local_ = pool; }
  // Directed lookups: the adapter asks the peers `directory` names.
  void UseDirectory(const fleet::PeerDirectory* directory) { directory_ = directory; }
  // How many p2p_lookup_and_lock calls peer `p` received.
  int LookupsAt(int p) {
    std::lock_guard lock(mu_);
    return lookups_at_[p];
  }
  const fleet::PeerDirectory* directory() const override { return directory_; }
  fleet::P2pLookupCounters* lookup_counters() const override { return &counters_; }
  fleet::P2pLookupStats Counted() const {
    fleet::P2pLookupStats s;
    counters_.CopyTo(&s);
    return s;
  }

  std::vector<fleet::ReadyPeer> Ready() const override {
    std::vector<fleet::ReadyPeer> ready;
    for (std::size_t p = 1; p < memory_.size(); ++p) {
      ready.push_back({"tcp://peer" + std::to_string(p), p, p, "boot"});
    }
    return ready;
  }
  void Call(fleet::PeerId peer, Op op, std::vector<std::string> payloads, TimeMs,
            fleet::PeerRpc::Done done) const override {
    if (silent_.contains(static_cast<int>(peer))) {
      done(Status(ErrorCode::kTimeout, "the peer did not answer by the call's deadline"));
      return;
    }
    auto* self = const_cast<FakeFleet*>(this);
    Result<std::string> answer = self->Answer(static_cast<int>(peer), op, payloads);
    if (op == Op::kP2pQueryLookupResults && lost_queries_.contains(static_cast<int>(peer))) {
      answer = Status(ErrorCode::kTimeout, "the answer came past the call's deadline");
    }
    done(std::move(answer));
  }
  // Peer `p`'s batches land only their first `n` reads, then fail (it died).
  void DieAfter(int p, std::size_t n) {
    std::lock_guard lock(mu_);
    die_after_[p] = n;
  }
  void Read(fleet::PeerHandle peer, std::vector<fleet::UcxRead> reads, TimeMs,
            fleet::UcxChannel::ReadsDone done) const override {
    auto* self = const_cast<FakeFleet*>(this);
    std::size_t whole = reads.size();
    std::vector<bool> served(reads.size(), false);
    {
      std::lock_guard lock(self->mu_);
      auto dies = die_after_.find(static_cast<int>(peer));
      if (dies != die_after_.end()) whole = std::min(whole, dies->second);
      for (std::size_t i = 0; i < reads.size(); ++i) served[i] = self->Holds(static_cast<int>(peer), reads[i]);
    }
    auto land = [self, peer, reads, whole, served, done = std::move(done)] {
      std::vector<bool> landed(reads.size(), false);
      Status status;
      for (std::size_t i = 0; i < whole; ++i) {
        if (!served[i]) {
          status = Status(ErrorCode::kNotFound, "the peer refused the read");
          continue;
        }
        const fleet::UcxRead& r = reads[i];
        std::memcpy(self->local_.data() + r.local_offset, self->memory_[peer].data() + r.remote_offset,
                    r.size);
        landed[i] = true;
      }
      if (whole < reads.size()) status = Status(ErrorCode::kUnavailable, "the peer died");
      done(status, std::move(landed));
    };
    std::unique_lock lock(self->mu_);
    if (hold_reads_) {
      self->held_reads_.push_back(std::move(land));
      return;
    }
    lock.unlock();
    land();
  }
  const Clock& clock() const override { return clock_; }
  TimeMs lookup_timeout_ms() const override { return 1000; }
  TimeMs load_timeout_ms() const override { return 1000; }

 private:
  static std::string Int(std::int64_t v) {
    msgpk::Encoder e;
    e.Int(v);
    return e.Take();
  }
  Result<std::string> Answer(int p, Op op, const std::vector<std::string>& payloads) {
    std::lock_guard lock(mu_);
    if (op == Op::kP2pLookupAndLock) {
      lookups_at_[p] += 1;
      auto keys = protocol::DecodeP2pKeys(payloads.at(0));
      if (!keys.ok()) return keys.status();
      const std::int64_t id = ++next_task_;
      FakeTask& task = tasks_[id];
      task.peer = p;
      for (const protocol::P2pObjectKey& wire : *keys) {
        const store::ObjectKey key = fleet::FromP2pObjectKey(wire);
        auto held = holds_[p].find(key);
        if (held == holds_[p].end()) {
          task.answer.push_back({-1, 0});
        } else {
          task.answer.push_back(held->second);
          task.locked.emplace(key, held->second);
        }
      }
      return Int(id);
    }
    if (op == Op::kP2pEndTask) {
      auto id = protocol::DecodeInt(payloads.at(0), "task");
      ended_[p].push_back(*id);
      if (auto task = tasks_.find(*id); task != tasks_.end() && task->second.peer == p) {
        tasks_.erase(task);
      }
      return msgpk::Encoder().Nil().Take();
    }
    if (op == Op::kP2pQueryLookupResults) {
      auto id = protocol::DecodeInt(payloads.at(0), "task");
      FakeTask& task = tasks_.at(*id);
      return protocol::EncodeP2pAddresses(task.answer);
    }
    // p2p_unlock_task (ours: [task, keys]) releases that task's lock on
    // each key; p2p_unlock_objects (by key) one lock of the peer's on it,
    // its oldest task's, as our owners do for a requester of the reference.
    const bool by_task = op == Op::kP2pUnlockTask;
    std::optional<std::int64_t> id;
    if (by_task) id = *protocol::DecodeInt(payloads.at(0), "task");
    auto keys = protocol::DecodeP2pKeys(payloads.at(by_task ? 1 : 0));
    for (const protocol::P2pObjectKey& wire : *keys) {
      const store::ObjectKey key = fleet::FromP2pObjectKey(wire);
      unlocked_[p].push_back(key);
      for (auto& [task_id, task] : tasks_) {
        if (task.peer != p || (id && task_id != *id)) continue;
        if (task.locked.erase(key) > 0) break;
      }
    }
    return msgpk::Encoder().Nil().Take();
  }
  // Whether a task of peer `p` holds the object at `read`'s range locked
  // (our owners serve no other read).
  bool Holds(int p, const fleet::UcxRead& read) {
    auto task = tasks_.find(read.task);
    if (task == tasks_.end() || task->second.peer != p) return false;
    return std::any_of(task->second.locked.begin(), task->second.locked.end(), [&](const auto& l) {
      return static_cast<std::uint64_t>(l.second.offset) == read.remote_offset &&
             static_cast<std::uint64_t>(l.second.size) == read.size;
    });
  }

  testing::FakeClock clock_;
  const fleet::PeerDirectory* directory_ = nullptr;
  mutable fleet::P2pLookupCounters counters_;
  std::map<int, int> lookups_at_;
  std::set<int> silent_;
  std::mutex mu_;
  std::vector<std::vector<std::byte>> memory_;
  std::span<std::byte> local_;
  template <class T>
  using ByKey = std::unordered_map<store::ObjectKey, T, store::ObjectKeyHash>;
  std::map<int, ByKey<protocol::P2pAddress>> holds_;
  std::map<int, std::vector<store::ObjectKey>> unlocked_;
  // A peer's lookup: its answer, and the locks it holds (by key, where).
  struct FakeTask {
    int peer = 0;
    std::vector<protocol::P2pAddress> answer;
    ByKey<protocol::P2pAddress> locked;
  };
  std::map<std::int64_t, FakeTask> tasks_;  // by id, oldest first
  std::set<int> lost_queries_;
  std::map<int, std::vector<std::int64_t>> ended_;
  std::map<int, std::size_t> die_after_;
  std::int64_t next_task_ = 0;
  bool hold_reads_ = false;
  std::vector<std::function<void()>> held_reads_;
};

class P2pAdapterTest : public ::testing::Test {
 protected:
  explicit P2pAdapterTest(int peers = 2) : fleet_(peers), pool_(16 * kObject) {
    fleet_.UseLocalPool(pool_);
    EXPECT_TRUE(adapter_.AttachMemory(pool_).ok());
  }
  std::vector<bool> Lookup(const std::vector<store::ObjectKey>& keys) {
    std::vector<bool> found;
    adapter_.SubmitLookup(keys, kObject, [&found](std::vector<bool> f) { found = std::move(f); });
    return found;
  }
  // Loads key i into slot i; the outcomes, once `done` ran (nullopt if not yet).
  std::shared_ptr<std::optional<std::vector<L2LoadOutcome>>> Load(const std::vector<int>& keys) {
    auto outcomes = std::make_shared<std::optional<std::vector<L2LoadOutcome>>>();
    keys_.clear();
    for (int i : keys) keys_.push_back(KeyN(static_cast<std::uint64_t>(i)));
    std::vector<L2Read> reads;
    for (std::size_t j = 0; j < keys.size(); ++j) {
      reads.push_back({&keys_[j], std::span(pool_).subspan(keys[j] * kObject, kObject)});
    }
    adapter_.SubmitLoad(reads, [outcomes](std::vector<L2LoadOutcome> o) { *outcomes = std::move(o); });
    return outcomes;
  }
  // Slot i holds peer p's bytes of key i.
  bool SlotFrom(int i, int p) {
    const auto fill = static_cast<std::byte>(16 * p + i);
    return std::all_of(pool_.begin() + i * kObject, pool_.begin() + (i + 1) * kObject,
                       [fill](std::byte b) { return b == fill; });
  }

  FakeFleet fleet_;
  std::vector<std::byte> pool_;
  std::vector<store::ObjectKey> keys_;
  P2pAdapter adapter_{&fleet_};
};

// Each key comes from the first peer (in the membership's order) that
// holds it; the other peers' locks on it end at once; the bytes land in
// the slot; Unlock ends each lock at the peer that holds it.
TEST_F(P2pAdapterTest, EachKeyComesFromTheFirstPeerThatHoldsItAndTheOthersLocksEndAtOnce) {
  for (int i : {0, 1}) fleet_.Hold(1, i);
  for (int i : {0, 1, 2, 3}) fleet_.Hold(2, i);
  EXPECT_EQ(Lookup(KeysN(0, 5)), (std::vector<bool>{true, true, true, true, false}));
  EXPECT_EQ(fleet_.Unlocked(2), (std::vector<store::ObjectKey>{KeyN(0), KeyN(1)}));
  EXPECT_EQ(fleet_.Locks(1), 2);
  EXPECT_EQ(fleet_.Locks(2), 2);
  EXPECT_EQ(adapter_.Stats().objects, 4u);

  auto outcomes = Load({0, 1, 2, 3});
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>(4, L2LoadOutcome::kLoaded));
  EXPECT_TRUE(SlotFrom(0, 1) && SlotFrom(1, 1) && SlotFrom(2, 2) && SlotFrom(3, 2));
  adapter_.Unlock(KeysN(0, 4));
  EXPECT_EQ(fleet_.Locks(1), 0);
  EXPECT_EQ(fleet_.Locks(2), 0);
  EXPECT_EQ(fleet_.Unlocked(1), (std::vector<store::ObjectKey>{KeyN(0), KeyN(1)}));
  const L2AdapterStats stats = adapter_.Stats();
  EXPECT_EQ(stats.objects, 0u);
  EXPECT_EQ(stats.loaded_objects, 4u);
  EXPECT_EQ(stats.loaded_bytes, 4 * kObject);
}

// A key twice in one lookup is one lock at the peer, held by its first place.
TEST_F(P2pAdapterTest, AKeyRepeatedInALookupIsOneLockHeldByItsFirstPlace) {
  fleet_.Hold(1, 0);
  EXPECT_EQ(Lookup({KeyN(0), KeyN(1), KeyN(0)}), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(fleet_.Locks(1), 1);
  adapter_.Unlock(KeysN(0, 1));
  EXPECT_EQ(fleet_.Locks(1), 0);
}

// Two lookups hold one key at two peers; the second request reads through
// the first's lock while the first unlocks: the unlock must end the lock
// nobody reads through, or the peer could evict the object and reuse its
// memory under the read (the reviewer's interleaving; before, Unlock ended
// the oldest lock whatever was read through it).
TEST_F(P2pAdapterTest, AnUnlockNeverEndsALockAReadGoesThrough) {
  fleet_.Hold(1, 0);
  EXPECT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});  // request R: at peer 1
  fleet_.Drop(1, 0);
  fleet_.Hold(2, 0);
  EXPECT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});  // request S: at peer 2
  fleet_.HoldReads(true);
  auto outcomes = Load({0});  // S's read, through one of the two locks
  ASSERT_FALSE(outcomes->has_value());
  ASSERT_EQ(fleet_.Locks(1), 1);
  ASSERT_EQ(fleet_.Locks(2), 1);
  adapter_.Unlock(KeysN(0, 1));  // R is done
  // Exactly one lock ended, and it is not the one the read goes through.
  EXPECT_EQ(fleet_.Locks(1) + fleet_.Locks(2), 1);
  fleet_.ReleaseReads();
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>{L2LoadOutcome::kLoaded});
  const bool from_peer1 = SlotFrom(0, 1);
  // The lock left is the one the read went through.
  EXPECT_EQ(fleet_.Locks(from_peer1 ? 1 : 2), 1);
  adapter_.Unlock(KeysN(0, 1));  // S is done
  EXPECT_EQ(fleet_.Locks(1) + fleet_.Locks(2), 0);
  EXPECT_EQ(adapter_.Stats().objects, 0u);
}

// A lock whose every holder is being read through ends when the reads do.
TEST_F(P2pAdapterTest, AnUnlockOfALockBeingReadEndsItWhenTheReadLands) {
  fleet_.Hold(1, 0);
  EXPECT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});
  fleet_.HoldReads(true);
  auto outcomes = Load({0});
  adapter_.Unlock(KeysN(0, 1));  // (a controller unlocks after its load: a stray unlock)
  EXPECT_EQ(fleet_.Locks(1), 1);
  fleet_.ReleaseReads();
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(fleet_.Locks(1), 0);
  EXPECT_EQ(adapter_.Stats().objects, 0u);
}

// A peer that does not answer holds nothing; one that answers an address
// of another size than asked holds nothing, and the lock it took ends at
// once; with no peers at all, nothing is asked.
TEST_F(P2pAdapterTest, ASilentPeerOrOneAnsweringAnotherSizeHoldsNothing) {
  fleet_.Hold(1, 0);
  fleet_.Silence(1);
  fleet_.Hold(2, 0, kObject + 1);
  EXPECT_EQ(Lookup({KeyN(0)}), std::vector<bool>{false});
  EXPECT_EQ(fleet_.Locks(2), 0);
  EXPECT_EQ(fleet_.Unlocked(2), std::vector<store::ObjectKey>{KeyN(0)});
  auto outcomes = Load({0});  // never locked: a miss, nothing read
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>{L2LoadOutcome::kMissing});
  EXPECT_EQ(adapter_.Stats().objects, 0u);
}

// An owner answered, but its answer reached us past our deadline (or could
// not be used): its task's locks would stand until its read TTL. The
// adapter ends that task at once with p2p_end_task.
TEST_F(P2pAdapterTest, ATaskWhoseAnswerCameTooLateIsEndedWithItsLocks) {
  fleet_.Hold(1, 0);
  fleet_.Hold(1, 1);
  fleet_.Hold(2, 1);
  fleet_.LoseQueryReplies(1);
  EXPECT_EQ(Lookup({KeyN(0), KeyN(1)}), (std::vector<bool>{false, true}));  // key 1 from peer 2
  EXPECT_EQ(fleet_.Locks(1), 0);
  EXPECT_EQ(fleet_.Ended(1).size(), 1u);
  EXPECT_TRUE(fleet_.Ended(2).empty());
  adapter_.Unlock(std::vector<store::ObjectKey>{KeyN(1)});
  EXPECT_EQ(fleet_.Locks(2), 0);
}

// A peer that died mid-batch: the reads that landed whole before are loaded
// (their bytes are the peer's), the rest failed; every lock is released.
TEST_F(P2pAdapterTest, APeerDyingMidBatchCostsOnlyTheReadsThatHadNotLanded) {
  for (int i = 0; i < 4; ++i) fleet_.Hold(1, i);
  const std::vector<store::ObjectKey> keys = {KeyN(0), KeyN(1), KeyN(2), KeyN(3)};
  ASSERT_EQ(Lookup(keys), std::vector<bool>(4, true));
  fleet_.DieAfter(1, 2);
  auto outcomes = Load({0, 1, 2, 3});
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, (std::vector<L2LoadOutcome>{L2LoadOutcome::kLoaded, L2LoadOutcome::kLoaded,
                                                    L2LoadOutcome::kFailed, L2LoadOutcome::kFailed}));
  EXPECT_TRUE(SlotFrom(0, 1) && SlotFrom(1, 1));
  adapter_.Unlock(keys);
  EXPECT_EQ(fleet_.Locks(1), 0);
  const L2AdapterStats stats = adapter_.Stats();
  EXPECT_EQ(stats.loaded_objects, 2u);
  EXPECT_EQ(stats.objects, 0u);
}

// The owner restarted between a lookup and its unlock (its locks went with
// its old life), and the same key was locked again in its new life. The
// first lookup's unlock names its task, which the new life never made, and
// releases nothing there; by key, it released the second lookup's lock,
// whose read then went through an object the owner was free to evict.
TEST_F(P2pAdapterTest, AnUnlockMeantForAnOwnersPreviousLifeReleasesNothingOfItsNewOne) {
  fleet_.Hold(1, 0);
  ASSERT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});
  fleet_.Restart(1);
  ASSERT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});
  ASSERT_EQ(fleet_.Locks(1), 1);
  adapter_.Unlock(KeysN(0, 1));  // the first lookup is done
  EXPECT_EQ(fleet_.Locks(1), 1);
  auto outcomes = Load({0});  // the second one's read
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>{L2LoadOutcome::kLoaded});
  EXPECT_TRUE(SlotFrom(0, 1));
  adapter_.Unlock(KeysN(0, 1));
  EXPECT_EQ(fleet_.Locks(1), 0);
  EXPECT_EQ(adapter_.Stats().objects, 0u);
}

// Every read names the task whose lock it goes through, and an owner serves
// only ranges a live task of its holds: a read through a lock of the
// owner's previous life fails and lands nothing (it would read whatever the
// new life keeps at that offset).
TEST_F(P2pAdapterTest, AReadThroughALockOfAnOwnersPreviousLifeFailsAndLandsNothing) {
  fleet_.Hold(1, 0);
  ASSERT_EQ(Lookup({KeyN(0)}), std::vector<bool>{true});
  fleet_.Restart(1);
  auto outcomes = Load({0});
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>{L2LoadOutcome::kFailed});
  EXPECT_FALSE(SlotFrom(0, 1));
  adapter_.Unlock(KeysN(0, 1));
  EXPECT_EQ(adapter_.Stats().objects, 0u);
}

// Directed lookups (--p2p-lookup directed): each key goes to one peer in
// step that the directory names (the one with the longest run of the
// lookup's chunks first), a key no peer in step names to every peer not in
// step (stale, or not known to the directory yet), and a key nobody names
// nowhere; the counters say what was asked and found.
class DirectedP2pAdapterTest : public P2pAdapterTest {
 protected:
  DirectedP2pAdapterTest() : P2pAdapterTest(3) {
    fleet_.UseDirectory(&directory_);
    for (fleet::PeerId p : {1, 2}) directory_.AddPeer(p, 1024);  // peer 3: not yet known
  }
  static fleet::ChunkId Id(int i) {
    const store::ObjectKey key = KeyN(static_cast<std::uint64_t>(i));
    return fleet::PeerDirectory::ChunkIdOf(key.model_name, key.chunk_hash);
  }
  // Peer `p` holds keys `held` (in our fake and in step in the directory).
  void Holds(int p, std::initializer_list<int> held) {
    std::vector<fleet::ChunkId> ids;
    for (int i : held) {
      fleet_.Hold(p, i);
      ids.push_back(Id(i));
    }
    directory_.Empty(static_cast<fleet::PeerId>(p));
    directory_.Replay(static_cast<fleet::PeerId>(p), fleet::DirectoryChange::kStored, ids);
    directory_.Resynced(static_cast<fleet::PeerId>(p), 1, 0);
  }
  fleet::PeerDirectory directory_;
};

TEST_F(DirectedP2pAdapterTest, EachKeyIsAskedOnlyAtThePeerWithTheLongestRunThatMayHoldIt) {
  directory_.AddPeer(3, 1024);
  Holds(1, {0, 1});
  Holds(2, {0, 1, 2, 3});
  Holds(3, {});
  EXPECT_EQ(Lookup(KeysN(0, 5)), (std::vector<bool>{true, true, true, true, false}));
  // One call, to peer 2 (it may hold the longest run): none to peers 1 and 3.
  EXPECT_EQ(fleet_.LookupsAt(1), 0);
  EXPECT_EQ(fleet_.LookupsAt(2), 1);
  EXPECT_EQ(fleet_.LookupsAt(3), 0);
  fleet::P2pLookupStats counted = fleet_.Counted();
  EXPECT_EQ(counted.lookups, 1u);
  EXPECT_EQ(counted.rpcs, 1u);
  EXPECT_EQ(counted.found_chunks, 4u);
  EXPECT_EQ(counted.missed_keys, 1u);
  EXPECT_EQ(counted.unnamed_keys, 1u);  // key 4: nobody named
  EXPECT_EQ(counted.wrong_hints, 0u);
  auto outcomes = Load({0, 1, 2, 3});
  ASSERT_TRUE(outcomes->has_value());
  EXPECT_EQ(**outcomes, std::vector<L2LoadOutcome>(4, L2LoadOutcome::kLoaded));
  EXPECT_TRUE(SlotFrom(0, 2) && SlotFrom(3, 2));
  adapter_.Unlock(KeysN(0, 4));
  EXPECT_EQ(fleet_.Locks(2), 0);

  // Nothing any peer in step may hold, and every peer in step: no call at all.
  EXPECT_EQ(Lookup(KeysN(8, 2)), (std::vector<bool>{false, false}));
  EXPECT_EQ(fleet_.Counted().rpcs, 1u);
  EXPECT_EQ(fleet_.Counted().unnamed_keys, 3u);
}

TEST_F(DirectedP2pAdapterTest, APeerNotInStepIsAskedForWhatNoPeerInStepNames) {
  Holds(1, {0, 1});
  fleet_.Hold(3, 2);  // peer 3 is ready but the directory has not met it yet
  directory_.Empty(2);  // peer 2 went stale (a gap): its filter is not trusted
  fleet_.Hold(2, 3);
  EXPECT_EQ(Lookup(KeysN(0, 5)), (std::vector<bool>{true, true, true, true, false}));
  EXPECT_EQ(fleet_.LookupsAt(1), 1);  // keys 0 and 1, named
  EXPECT_EQ(fleet_.LookupsAt(2), 1);  // keys 2 to 4, not named by anyone in step
  EXPECT_EQ(fleet_.LookupsAt(3), 1);  // the same
  EXPECT_EQ(fleet_.Unlocked(1), std::vector<store::ObjectKey>{});  // never asked for 2 to 4
  EXPECT_EQ(fleet_.Counted().rpcs, 3u);
  EXPECT_EQ(fleet_.Counted().unnamed_keys, 0u);
  adapter_.Unlock(KeysN(0, 4));
  for (int p : {1, 2, 3}) EXPECT_EQ(fleet_.Locks(p), 0);
}

TEST_F(DirectedP2pAdapterTest, AHintThePeerDoesNotBearOutIsCountedAndCostsOneCall) {
  directory_.AddPeer(3, 1024);
  Holds(3, {});
  Holds(1, {0, 1});
  fleet_.Drop(1, 1);  // evicted at peer 1, its removal not read yet
  EXPECT_EQ(Lookup(KeysN(0, 2)), (std::vector<bool>{true, false}));
  EXPECT_EQ(fleet_.LookupsAt(1), 1);
  EXPECT_EQ(fleet_.LookupsAt(2), 0);
  EXPECT_EQ(fleet_.Counted().wrong_hints, 1u);
  adapter_.Unlock(KeysN(0, 1));
  EXPECT_EQ(fleet_.Locks(1), 0);
}

}  // namespace
}  // namespace lmcache::tier
