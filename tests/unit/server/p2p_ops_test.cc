// The owner side's operations through the real Service (p2p-spec.md 4-5):
// a peer's lookup locks what is resident in the size its layout says, its
// results come once and only to that peer, in request order, pointing at
// the object's bytes in this server's pool; its unlock releases its locks.
// Frames are made by protocol/p2p_codec, whose output p2p_codec_test checks
// byte for byte against the reference's shapes. Peers call as over the
// fleet endpoint (they proved the fleet key) unless a test says otherwise.
#include "server/p2p_ops.h"

#include "fleet/chunk_feed_codec.h"
#include "fleet/p2p_object_key.h"
#include "fleet/peer_info.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "fakes/service_harness.h"
#include "protocol/p2p_codec.h"

namespace lmcache::server {
namespace {

using protocol::P2pAddress;
using protocol::P2pObjectKey;

// One object of the layout below: 2 x 4 x 16 x 8 bfloat16 = 2048 bytes.
const protocol::P2pLayout kLayout{{{2, 4, 16, 8}}, {"bfloat16"}};
constexpr std::uint64_t kObjectBytes = 2048;
constexpr std::int64_t kRank0 = (1 << 24) | (1 << 8);  // world size 1, rank 0

P2pObjectKey RequestedObject(char fill, std::int64_t group = 0) {
  return P2pObjectKey{std::string(32, fill), "llama", kRank0, group, "", 0, ""};
}

store::ObjectKey StoreKeyOf(const P2pObjectKey& key) { return fleet::FromP2pObjectKey(key); }

std::string Layouts(std::initializer_list<std::int64_t> groups) {
  protocol::P2pLayouts layouts;
  for (std::int64_t group : groups) layouts.by_group[group] = kLayout;
  return protocol::EncodeP2pLayouts(layouts);
}

class P2pOpsTest : public ::testing::Test {
 protected:
  // Stores `key` with bytes all `fill`, as a worker's write.
  void Store(const P2pObjectKey& key, std::uint64_t bytes = kObjectBytes) {
    const store::ObjectKey k = StoreKeyOf(key);
    auto lease = h_.l1().table().ReserveWrite(std::span(&k, 1), bytes, store::Owner::Instance(1),
                                              store::AllocationMode::kAllOrNothing);
    ASSERT_TRUE(lease.ok() && lease->reserved == 1);
    std::memset(h_.pool() + lease->offsets[0], key.chunk_hash[0], bytes);
    ASSERT_EQ(h_.l1().table().FinishWrite(lease->lease).admitted, 1u);
  }
  Reply Call(std::string_view peer, std::string_view op, std::vector<std::string> frames) {
    return h_.CallAs(peer, op, std::move(frames), Transport::kTcp, fleet_member_);
  }
  std::int64_t Lookup(std::string_view peer, const std::vector<P2pObjectKey>& keys,
                      const std::string& layouts) {
    Reply reply = Call(peer, "p2p_lookup_and_lock", {protocol::EncodeP2pKeys(keys), layouts});
    EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
    return *protocol::DecodeInt(reply.value, "task id");
  }
  std::optional<std::vector<P2pAddress>> Results(std::string_view peer, std::int64_t task) {
    Reply reply = Call(peer, "p2p_query_lookup_results", {testing::IntFrame(task)});
    EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
    return *protocol::DecodeP2pAddresses(reply.value);
  }
  // p2p_hello: `connection` speaks for the requester at `url` in its life `boot_id`.
  Reply Hello(std::string_view connection, std::string url, std::string boot_id) {
    return Call(connection, "p2p_hello", {fleet::PeerHello{std::move(url), std::move(boot_id)}.Encode()});
  }
  // A lookup of `key` by `connection`, queried: the lock it took is answered.
  void LockAnswered(std::string_view connection, const P2pObjectKey& key) {
    const std::int64_t task = Lookup(connection, {key}, Layouts({0}));
    auto addresses = Results(connection, task);
    ASSERT_TRUE(addresses.has_value() && (*addresses)[0].valid());
  }
  void Closed(std::string_view connection) { h_.service().OnDisconnect(connection); }
  Reply Unlock(std::string_view peer, const std::vector<P2pObjectKey>& keys) {
    return Call(peer, "p2p_unlock_objects", {protocol::EncodeP2pKeys(keys)});
  }
  std::uint32_t Locks(const P2pObjectKey& key) {
    const auto info = h_.l1().table().Find(StoreKeyOf(key));
    return info ? info->read_locks : 0;
  }

  testing::ServiceHarness h_;
  bool fleet_member_ = true;
};

// A connection that did not prove the fleet key (a worker's endpoint, or a
// reference server without the key) gets the declared value of a clean
// miss, a task of misses, and takes nothing; its unlock releases nothing.
TEST_F(P2pOpsTest, AConnectionWithoutTheFleetKeyGetsMissesAndTakesNothing) {
  Store(RequestedObject('a'));
  fleet_member_ = true;
  const std::int64_t member_task = Lookup("member", {RequestedObject('a')}, Layouts({0}));
  ASSERT_EQ(Locks(RequestedObject('a')), 1u);
  fleet_member_ = false;
  const std::int64_t task =
      Lookup("stranger", {RequestedObject('a'), RequestedObject('a')}, Layouts({0}));
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  auto addresses = Results("stranger", task);
  ASSERT_TRUE(addresses.has_value());  // answered at once: no polling to a deadline
  EXPECT_EQ(*addresses, (std::vector<P2pAddress>{{-1, 0}, {-1, 0}}));
  // Even naming the member's connection, an unlock over an unproved one releases nothing.
  Reply unlocked = Unlock("member", {RequestedObject('a')});
  ASSERT_TRUE(unlocked.status.ok());
  EXPECT_EQ(unlocked.value, msgpk::Encoder().Nil().Take());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  fleet_member_ = true;
  ASSERT_TRUE(Results("member", member_task).has_value());
  ASSERT_TRUE(Unlock("member", {RequestedObject('a')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
}

// Our own key fields (lmc_layout_namespace, lmc_tags): an object stored
// under another layout or with tags is another object, found only by a key
// that names the same, never by the reference-shaped key of its tokens.
TEST_F(P2pOpsTest, AKeyFindsOnlyTheObjectOfItsLayoutNamespaceAndTags) {
  P2pObjectKey tagged = RequestedObject('t');
  tagged.layout_namespace = 7;
  tagged.tags = "lang%en";
  Store(tagged);
  P2pObjectKey other_layout = tagged;
  other_layout.layout_namespace = 8;
  P2pObjectKey untagged = tagged;
  untagged.tags.clear();
  const std::vector<P2pObjectKey> keys = {tagged, RequestedObject('t'), other_layout, untagged};
  const std::int64_t task = Lookup("member", keys, Layouts({0}));
  auto addresses = Results("member", task);
  ASSERT_TRUE(addresses.has_value());
  EXPECT_TRUE((*addresses)[0].valid());
  for (std::size_t i = 1; i < keys.size(); ++i) EXPECT_FALSE((*addresses)[i].valid()) << i;
  ASSERT_TRUE(Unlock("member", {tagged}).status.ok());
  EXPECT_EQ(Locks(tagged), 0u);
}

// --p2p-allow-unauthenticated: the reference's open operations, for fleets
// mixed with reference servers.
TEST(P2pOpsOpenTest, AllowingUnauthenticatedPeersServesEveryConnection) {
  server::ServiceConfig config;
  config.p2p_serve_unauthenticated = true;
  testing::ServiceHarness h(64ull << 20, config);
  const P2pObjectKey key = RequestedObject('a');
  const store::ObjectKey k = StoreKeyOf(key);
  auto lease = h.l1().table().ReserveWrite(std::span(&k, 1), kObjectBytes,
                                           store::Owner::Instance(1),
                                           store::AllocationMode::kAllOrNothing);
  ASSERT_TRUE(lease.ok() && lease->reserved == 1);
  ASSERT_EQ(h.l1().table().FinishWrite(lease->lease).admitted, 1u);
  Reply reply = h.CallAs("reference-peer", "p2p_lookup_and_lock",
                         {protocol::EncodeP2pKeys(std::vector<P2pObjectKey>{key}), Layouts({0})},
                         Transport::kTcp);
  ASSERT_TRUE(reply.status.ok());
  Reply results = h.CallAs("reference-peer", "p2p_query_lookup_results",
                           {reply.value}, Transport::kTcp);
  auto addresses = protocol::DecodeP2pAddresses(results.value);
  ASSERT_TRUE(addresses.ok() && addresses->has_value());
  EXPECT_TRUE((**addresses)[0].valid());
  EXPECT_EQ(h.l1().table().Find(k)->read_locks, 1u);
  ASSERT_TRUE(h.CallAs("reference-peer", "p2p_unlock_objects",
                       {protocol::EncodeP2pKeys(std::vector<P2pObjectKey>{key})}, Transport::kTcp)
                  .status.ok());
  EXPECT_EQ(h.l1().table().Find(k)->read_locks, 0u);
}

TEST_F(P2pOpsTest, APeerLooksUpQueriesOnceReadsThePoolAndUnlocks) {
  Store(RequestedObject('a'));
  const std::int64_t task =
      Lookup("peer-a", {RequestedObject('a'), RequestedObject('b')}, Layouts({0}));
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  EXPECT_FALSE(Results("peer-b", task).has_value());  // another peer's task
  auto addresses = Results("peer-a", task);
  ASSERT_TRUE(addresses.has_value());
  ASSERT_EQ(addresses->size(), 2u);
  const P2pAddress hit = (*addresses)[0];
  ASSERT_TRUE(hit.valid());
  EXPECT_EQ(hit.size, static_cast<std::int64_t>(kObjectBytes));
  for (std::int64_t i = 0; i < hit.size; ++i) {
    ASSERT_EQ(static_cast<char>(h_.pool()[hit.offset + i]), 'a') << i;
  }
  EXPECT_EQ((*addresses)[1], (P2pAddress{-1, 0}));
  EXPECT_FALSE(Results("peer-a", task).has_value());  // exactly once
  Reply unlocked = Unlock("peer-a", {RequestedObject('a'), RequestedObject('a')});
  ASSERT_TRUE(unlocked.status.ok());
  EXPECT_EQ(unlocked.value, msgpk::Encoder().Nil().Take());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
}

TEST_F(P2pOpsTest, AnOlderPeersSingleLayoutDescCoversEveryKey) {
  Store(RequestedObject('a'));
  protocol::P2pLayouts single;
  single.single = true;
  single.by_group[0] = kLayout;
  const std::int64_t task =
      Lookup("peer-a", {RequestedObject('a')}, protocol::EncodeP2pLayouts(single));
  auto addresses = Results("peer-a", task);
  ASSERT_TRUE(addresses.has_value());
  EXPECT_TRUE((*addresses)[0].valid());
  ASSERT_TRUE(Unlock("peer-a", {RequestedObject('a')}).status.ok());
}

TEST_F(P2pOpsTest, AnObjectOfAnotherSizeUnevenGroupsOrAMissingLayoutAreMissesNotErrors) {
  Store(RequestedObject('a'), kObjectBytes * 2);  // stored in another layout
  Store(RequestedObject('c'));
  Store(RequestedObject('d', 1));
  const std::int64_t wrong_size = Lookup("p", {RequestedObject('a')}, Layouts({0}));
  // Group 0 has one key and group 1 two: the reference's rule makes every key a miss.
  const std::int64_t uneven =
      Lookup("p", {RequestedObject('c'), RequestedObject('d', 1), RequestedObject('e', 1)},
             Layouts({0, 1}));
  const std::int64_t no_layout = Lookup("p", {RequestedObject('d', 1)}, Layouts({0}));
  for (const std::int64_t task : {wrong_size, uneven, no_layout}) {
    auto addresses = Results("p", task);
    ASSERT_TRUE(addresses.has_value());
    for (const P2pAddress& address : *addresses) EXPECT_FALSE(address.valid()) << task;
  }
  EXPECT_EQ(
      Locks(RequestedObject('a')) + Locks(RequestedObject('c')) + Locks(RequestedObject('d', 1)),
      0u);
}

TEST_F(P2pOpsTest, MalformedFramesAreRefusedWithTheDeclaredFailureValues) {
  Reply lookup = h_.CallAs("p", "p2p_lookup_and_lock", {"\xc1", Layouts({0})});
  EXPECT_FALSE(lookup.status.ok());
  EXPECT_EQ(lookup.value, msgpk::Encoder().Int(0).Take());  // the declared int
  Reply query = h_.CallAs("p", "p2p_query_lookup_results", {testing::StrFrame("x")});
  EXPECT_FALSE(query.status.ok());
  EXPECT_EQ(query.value, msgpk::Encoder().Nil().Take());
  Reply unlock = h_.CallAs("p", "p2p_unlock_objects", {"\x91\xc0"});
  EXPECT_FALSE(unlock.status.ok());
  EXPECT_EQ(unlock.value, msgpk::Encoder().Nil().Take());
}

std::string BinFrame(std::string_view bytes) {
  msgpk::Encoder e;
  e.Bin(bytes);
  return e.Take();
}

fleet::ChunkId IdOf(const P2pObjectKey& key) {
  return fleet::PeerDirectory::ChunkIdOf(key.model_name, StoreKeyOf(key).chunk_hash);
}

// p2p_chunk_events and p2p_chunk_listing (ours, issue 43): a member's
// directory reads what this L1 gained and lost, and lists what it holds in
// pages, with the log position the listing began at and an estimate of
// how many chunks L1 may hold. Without a chunk log (P2P off) both refuse.
TEST_F(P2pOpsTest, WithoutAChunkLogTheDirectoryOperationsRefuse) {
  Reply events = Call("p", "p2p_chunk_events", {testing::IntFrame(0), testing::IntFrame(10)});
  EXPECT_FALSE(events.status.ok());
  EXPECT_EQ(events.value, msgpk::Encoder().Nil().Take());
  EXPECT_FALSE(Call("p", "p2p_chunk_listing", {BinFrame(""), testing::IntFrame(10)}).status.ok());
}

TEST(P2pOpsChunkLogTest, AMembersDirectoryReadsTheLogAndListsL1InPages) {
  fleet::ChunkLog log({}, 42);
  testing::ServiceHarness h(64ull << 20, {}, true, nullptr, nullptr, nullptr, nullptr, &log);
  std::vector<fleet::ChunkId> stored;
  for (char fill : {'a', 'b', 'c'}) {
    const store::ObjectKey k = StoreKeyOf(RequestedObject(fill));
    auto lease = h.l1().table().ReserveWrite(std::span(&k, 1), kObjectBytes,
                                             store::Owner::Instance(1),
                                             store::AllocationMode::kAllOrNothing);
    ASSERT_TRUE(lease.ok() && lease->reserved == 1);
    ASSERT_EQ(h.l1().table().FinishWrite(lease->lease).admitted, 1u);
    stored.push_back(IdOf(RequestedObject(fill)));
  }
  auto call = [&h](std::string_view op, std::vector<std::string> frames) {
    return h.CallAs("peer", op, std::move(frames), Transport::kTcp, true);
  };

  Reply events = call("p2p_chunk_events", {testing::IntFrame(1), testing::IntFrame(10)});
  ASSERT_TRUE(events.status.ok()) << events.status.ToString();
  auto page = fleet::DecodeChunkPage(events.value);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->incarnation, 42u);
  ASSERT_EQ(page->records.size(), 2u);  // after record 1: the second and third stores
  EXPECT_EQ(page->records[0].seq, 2u);
  EXPECT_EQ(page->records[1].chunks, std::vector<fleet::ChunkId>{stored[2]});
  EXPECT_EQ(page->next_cursor, 3u);

  Reply first = call("p2p_chunk_listing", {BinFrame(""), testing::IntFrame(2)});
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  auto listing = fleet::DecodeChunkListing(first.value);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_EQ(listing->incarnation, 42u);
  EXPECT_EQ(listing->log_cursor, 3u);
  // The pool over the mean resident object's (aligned) bytes.
  const std::uint64_t mean = h.l1().table().Stats().resident_bytes / 3;
  EXPECT_GE(mean, kObjectBytes);
  EXPECT_EQ(listing->capacity_chunks, (64ull << 20) / mean);
  ASSERT_EQ(listing->chunks.size(), 2u);
  ASSERT_FALSE(listing->next.empty());
  Reply second = call("p2p_chunk_listing", {BinFrame(listing->next), testing::IntFrame(2)});
  auto rest = fleet::DecodeChunkListing(second.value);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_TRUE(rest->next.empty());
  std::vector<fleet::ChunkId> listed = listing->chunks;
  listed.insert(listed.end(), rest->chunks.begin(), rest->chunks.end());
  std::sort(listed.begin(), listed.end());
  std::sort(stored.begin(), stored.end());
  EXPECT_EQ(listed, stored);

  // Not a fleet member (it did not prove the fleet key): refused, nothing listed.
  for (std::string_view op : {"p2p_chunk_events", "p2p_chunk_listing"}) {
    std::vector<std::string> frames = op == "p2p_chunk_events"
                                          ? std::vector<std::string>{testing::IntFrame(0),
                                                                     testing::IntFrame(10)}
                                          : std::vector<std::string>{BinFrame(""),
                                                                     testing::IntFrame(10)};
    Reply stranger = h.CallAs("stranger", op, frames, Transport::kTcp, false);
    EXPECT_EQ(stranger.status.code(), ErrorCode::kPermissionDenied) << op;
    EXPECT_EQ(stranger.value, msgpk::Encoder().Nil().Take()) << op;
  }

  // What a peer could send wrong: refused, with the declared nil.
  for (auto frames : {std::vector<std::string>{testing::IntFrame(-1), testing::IntFrame(10)},
                      std::vector<std::string>{testing::IntFrame(0), testing::IntFrame(0)}}) {
    Reply bad = call("p2p_chunk_events", frames);
    EXPECT_FALSE(bad.status.ok());
    EXPECT_EQ(bad.value, msgpk::Encoder().Nil().Take());
  }
  EXPECT_FALSE(call("p2p_chunk_listing", {BinFrame("\xc1"), testing::IntFrame(2)}).status.ok());
  EXPECT_FALSE(call("p2p_chunk_listing", {BinFrame(""), testing::IntFrame(0)}).status.ok());
}

TEST_F(P2pOpsTest, ATaskNeverQueriedIsReapedByTheMaintenancePass) {
  Store(RequestedObject('a'));
  const std::int64_t task = Lookup("p", {RequestedObject('a')}, Layouts({0}));
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  h_.clock().Advance(30'000);  // --p2p-lookup-timeout's default
  h_.service().RunMaintenance();
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
  EXPECT_FALSE(Results("p", task).has_value());
}

// A requester's connection broke and came back (ZMQ gives the new one another
// id): its unlock on the new connection ends what its lookup on the old one
// locked, because both said which requester they speak for. Before p2p_hello
// the lock stayed until the read TTL.
TEST_F(P2pOpsTest, ARequesterThatReconnectedUnlocksWhatItsEarlierConnectionLocked) {
  Store(RequestedObject('a'));
  ASSERT_TRUE(Hello("conn-1", "10.0.0.1:5556", "boot-1").status.ok());
  LockAnswered("conn-1", RequestedObject('a'));
  Closed("conn-1");
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);  // the requester may come back: its lock stays
  ASSERT_TRUE(Hello("conn-2", "10.0.0.1:5556", "boot-1").status.ok());
  ASSERT_TRUE(Unlock("conn-2", {RequestedObject('a')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
}

// A requester killed while it held our locks, and restarted: its new life's
// hello ends every task of the old one, once no connection of the old life is
// open (an open one could be a live twin misconfigured with the same URL,
// which could still be reading).
TEST_F(P2pOpsTest, ARestartedRequestersOldLifeLosesItsLocksOnceNoConnectionOfItIsOpen) {
  Store(RequestedObject('a'));
  Store(RequestedObject('b'));
  ASSERT_TRUE(Hello("old", "10.0.0.1:5556", "boot-1").status.ok());
  LockAnswered("old", RequestedObject('a'));
  ASSERT_TRUE(Hello("other", "10.0.0.2:5556", "boot-9").status.ok());
  LockAnswered("other", RequestedObject('b'));

  // Closed first, then the new life: ended at its hello.
  Closed("old");
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  ASSERT_TRUE(Hello("new", "10.0.0.1:5556", "boot-2").status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
  EXPECT_EQ(h_.service().Snapshot().p2p_served.ended_life_tasks, 1u);
  EXPECT_EQ(Locks(RequestedObject('b')), 1u);  // another requester's lock stays

  // The new life first, the old connection still open: ended when it closes.
  LockAnswered("new", RequestedObject('a'));
  ASSERT_TRUE(Hello("newer", "10.0.0.1:5556", "boot-3").status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  Closed("new");
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
  EXPECT_EQ(Locks(RequestedObject('b')), 1u);
  ASSERT_TRUE(Unlock("other", {RequestedObject('b')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('b')), 0u);
}

// This owner restarted and a requester's connection came back to it before
// the requester's next probe said hello (up to --p2p-probe-interval later):
// its lookups and queries on that connection are first known by the
// connection alone. Its hello then makes them its life's, so the unlock it
// sends as that life ends them (before, the lock stood until the read TTL
// and a task never queried under the new name was reaped: lmcache-soak
// --nodes 3 with node kills found both).
TEST_F(P2pOpsTest, WhatAConnectionTookBeforeItsHelloIsItsLifesAfter) {
  Store(RequestedObject('a'));
  Store(RequestedObject('b'));
  LockAnswered("conn", RequestedObject('a'));  // queried before
  const std::int64_t unqueried =
      Lookup("conn", {RequestedObject('b')}, Layouts({0}));  // queried after
  ASSERT_TRUE(Hello("conn", "10.0.0.1:5556", "boot-1").status.ok());
  auto addresses = Results("conn", unqueried);
  ASSERT_TRUE(addresses.has_value() && (*addresses)[0].valid());
  ASSERT_TRUE(Unlock("conn", {RequestedObject('a'), RequestedObject('b')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
  EXPECT_EQ(Locks(RequestedObject('b')), 0u);
  EXPECT_EQ(h_.service().Snapshot().p2p_served.tasks, 0u);
  EXPECT_EQ(h_.service().Snapshot().p2p_served.stale_unlocks, 0u);
}

// A connection that never said who it speaks for (a reference requester)
// is the only one that can reach its tasks: when it closes, they end with
// their locks (before, they stood until the read TTL).
TEST_F(P2pOpsTest, AnUnnamedConnectionsTasksEndWhenItCloses) {
  Store(RequestedObject('a'));
  LockAnswered("reference-peer", RequestedObject('a'));
  ASSERT_TRUE(Hello("member", "10.0.0.1:5556", "boot-1").status.ok());
  LockAnswered("member", RequestedObject('a'));
  EXPECT_EQ(Locks(RequestedObject('a')), 2u);
  Closed("reference-peer");
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);  // the member's stays: its life may come back
  EXPECT_EQ(h_.service().Snapshot().p2p_served.closed_connection_tasks, 1u);
  Closed("member");
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
}

// Only a connection that proved the fleet key names a requester: a stranger
// claiming a member's URL with a new boot id ends nothing.
TEST_F(P2pOpsTest, AHelloWithoutTheFleetKeyEndsNothing) {
  Store(RequestedObject('a'));
  ASSERT_TRUE(Hello("member", "10.0.0.1:5556", "boot-1").status.ok());
  LockAnswered("member", RequestedObject('a'));
  Closed("member");
  fleet_member_ = false;
  ASSERT_TRUE(Hello("stranger", "10.0.0.1:5556", "boot-2").status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  fleet_member_ = true;
  ASSERT_TRUE(Hello("member-again", "10.0.0.1:5556", "boot-1").status.ok());
  ASSERT_TRUE(Unlock("member-again", {RequestedObject('a')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
}

TEST_F(P2pOpsTest, AMalformedHelloIsRefusedWithNil) {
  Reply hello = Call("p", "p2p_hello", {testing::StrFrame("x")});
  EXPECT_FALSE(hello.status.ok());
  EXPECT_EQ(hello.value, msgpk::Encoder().Nil().Take());
}

// p2p_end_task (ours): a requester that will not use a task (its answer came
// past its deadline) ends exactly that task with its locks; another task
// of it on the same key keeps its lock; an unknown id, or a connection
// without the fleet key, ends nothing.
TEST_F(P2pOpsTest, ARequesterEndsATaskItWillNotUseAndOnlyThatTasksLocksGo) {
  Store(RequestedObject('a'));
  Store(RequestedObject('b'));
  const std::int64_t unused =
      Lookup("p", {RequestedObject('a'), RequestedObject('b')}, Layouts({0}));
  ASSERT_TRUE(Results("p", unused).has_value());  // answered: its locks stand
  const std::int64_t kept = Lookup("p", {RequestedObject('a')}, Layouts({0}));
  ASSERT_TRUE(Results("p", kept).has_value());
  EXPECT_EQ(Locks(RequestedObject('a')), 2u);
  fleet_member_ = false;
  ASSERT_TRUE(Call("p", "p2p_end_task", {testing::IntFrame(unused)}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 2u);
  fleet_member_ = true;
  ASSERT_TRUE(Call("other", "p2p_end_task", {testing::IntFrame(unused)}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 2u);  // not the other peer's to end
  Reply ended = Call("p", "p2p_end_task", {testing::IntFrame(unused)});
  ASSERT_TRUE(ended.status.ok());
  EXPECT_EQ(ended.value, msgpk::Encoder().Nil().Take());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  EXPECT_EQ(Locks(RequestedObject('b')), 0u);
  EXPECT_EQ(h_.service().Snapshot().p2p_served.abandoned_tasks, 1u);
  ASSERT_TRUE(Call("p", "p2p_end_task", {testing::IntFrame(unused)}).status.ok());  // once
  EXPECT_EQ(h_.service().Snapshot().p2p_served.abandoned_tasks, 1u);
  ASSERT_TRUE(Unlock("p", {RequestedObject('a')}).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
}

// p2p_unlock_task (ours): our requesters unlock by task, so an unlock meant
// for a task of this owner's previous life (the requester did not see it
// restart) releases nothing of this life's, where p2p_unlock_objects by key
// releases the same requester's later lock on that key.
TEST_F(P2pOpsTest, AnUnlockByTaskReleasesThatTasksLockOnlyAndAStaleTaskNothing) {
  Store(RequestedObject('a'));
  const std::int64_t task = Lookup("p", {RequestedObject('a')}, Layouts({0}));
  ASSERT_TRUE(Results("p", task).has_value());
  auto unlock_task = [&](std::string_view peer, std::int64_t id) {
    return Call(peer, "p2p_unlock_task",
                {testing::IntFrame(id),
                 protocol::EncodeP2pKeys(std::vector<P2pObjectKey>{RequestedObject('a')})});
  };
  Reply stale = unlock_task("p", task - 1);  // a task this life never made
  ASSERT_TRUE(stale.status.ok());
  EXPECT_EQ(stale.value, msgpk::Encoder().Nil().Take());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);
  ASSERT_TRUE(unlock_task("other", task).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);  // not the other peer's task
  fleet_member_ = false;
  ASSERT_TRUE(unlock_task("p", task).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 1u);  // a connection without the fleet key
  fleet_member_ = true;
  ASSERT_TRUE(unlock_task("p", task).status.ok());
  EXPECT_EQ(Locks(RequestedObject('a')), 0u);
  EXPECT_EQ(h_.service().Snapshot().p2p_served.stale_unlocks, 2u);
  Reply malformed = Call("p", "p2p_unlock_task", {testing::StrFrame("x"), testing::StrFrame("y")});
  EXPECT_FALSE(malformed.status.ok());
  EXPECT_EQ(malformed.value, msgpk::Encoder().Nil().Take());
}

}  // namespace
}  // namespace lmcache::server
