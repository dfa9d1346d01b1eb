// PeerRpc: a member's calls to peers' fleet endpoints. Against the real
// server binary (another process, P2P on): the handshake reads a PeerInfo
// that is compatible with our own, its UCX descriptor connects and reads
// the peer's pool, and ops 29-31 round-trip in the reference's shapes. A
// call ends once: answered; when the peer's connection closes (a peer that
// died holding it, or one refusing our key); or at its deadline (a peer
// that is down when it is sent, or that sends garbage). A peer that comes
// back is reached again. Deadlines run on a fake clock.
#include "fleet/peer_rpc.h"

#include <gtest/gtest.h>

#include <functional>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "fakes/fake_clock.h"
#include "fakes/free_port.h"
#include "fakes/server_process.h"
#include "fakes/temp_dir.h"
#include "fakes/wait_until.h"
#include "fleet/peer_info.h"
#include "fleet/ucx_channel.h"

namespace lmcache::fleet {
namespace {

using testing::FakeClock;
using testing::ServerProcess;
using testing::TempDir;
using testing::WaitUntil;

constexpr TimeMs kLongDeadline = 600'000;  // never reached: the fake clock stands still

std::string WriteKeyFile(const TempDir& dir, const std::string& name, char fill) {
  const std::string path = (dir.path() / name).string();
  std::ofstream(path) << std::string(32, fill);
  chmod(path.c_str(), 0600);
  return path;
}

FleetKey LoadKey(const std::string& path) {
  auto key = FleetKey::Load(path);
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return *std::move(key);
}

// A server with P2P on, its fleet endpoint on `port`.
std::unique_ptr<ServerProcess> StartPeer(const TempDir& dir, const std::string& key_file, int port,
                                         const std::string& name) {
  auto server = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--l1-size-gb", "0.05", "--url", "ipc://" + (dir.path() / (name + ".sock")).string(),
      "--p2p-advertise-url", "127.0.0.1:" + std::to_string(port), "--p2p-auth-key-file",
      key_file});
  EXPECT_TRUE(server->WaitForLog("P2P on", std::chrono::seconds(60))) << server->Log();
  return server;
}

// Calls and waits for the result (the RPC thread runs `done`).
Result<std::string> CallAndWait(PeerRpc& rpc, PeerId peer, Op op,
                                std::vector<std::string> payloads, TimeMs deadline) {
  std::promise<Result<std::string>> result;
  auto future = result.get_future();
  rpc.Call(peer, op, std::move(payloads), deadline,
           [&result](Result<std::string> r) { result.set_value(std::move(r)); });
  return future.get();
}

// A spec-shaped ObjectKey (p2p-spec.md 4.2) for a chunk nobody stored.
// A PeerRpc holding the key of `dir`'s fleet.key, its deadlines on `clock`.
std::unique_ptr<PeerRpc> StartRpc(const TempDir& dir, const FakeClock& clock) {
  return std::move(PeerRpc::Start(LoadKey(WriteKeyFile(dir, "fleet.key", 'k')), &clock)).value();
}

// A call to a peer nobody listens on: the fake clock never reaches its
// deadline, so it stays unanswered until the RPC stops (checked for 300 ms).
struct UnansweredCall {
  PeerId peer = 0;
  std::future<Result<std::string>> result;
};
UnansweredCall CallNobody(PeerRpc& rpc, const FakeClock& clock) {
  UnansweredCall call;
  call.peer = rpc.Connect("tcp://127.0.0.1:" + std::to_string(testing::FreeTcpPort()));
  auto pending = std::make_shared<std::promise<Result<std::string>>>();
  call.result = pending->get_future();
  rpc.Call(call.peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
           [pending](Result<std::string> r) { pending->set_value(std::move(r)); });
  EXPECT_EQ(call.result.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  return call;
}

std::string AbsentKeys() {
  msgpk::Encoder e;
  e.Array(1).Map(5);
  e.Str("chunk_hash").Bin(std::string(32, '\x5a'));
  e.Str("model_name").Str("peer-rpc-test");
  e.Str("kv_rank").Int((1 << 24) | (1 << 8));  // world size 1, rank 0
  e.Str("object_group_id").Int(0);
  e.Str("cache_salt").Str("");
  return e.Take();
}

std::string Layouts() {
  msgpk::Encoder e;
  e.Map(1).Int(0).Map(2);
  e.Str("shapes").Array(1).Array(4).Int(2).Int(4).Int(256).Int(128);
  e.Str("dtypes").Array(1).Str("bfloat16");
  return e.Take();
}

TEST(PeerRpcTest, HandshakesLooksUpAndReadsTheRealServersPoolOverUcx) {
  TempDir dir("lmc_peer_rpc");
  const std::string key_file = WriteKeyFile(dir, "fleet.key", 'k');
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(dir, key_file, port, "peer");
  const FleetKey key = LoadKey(key_file);
  FakeClock clock;
  auto rpc = std::move(PeerRpc::Start(key, &clock)).value();
  const PeerId peer = rpc->Connect("tcp://127.0.0.1:" + std::to_string(port));

  auto reply = CallAndWait(*rpc, peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString() << server->Log();
  auto theirs = PeerInfo::FromServerInfo(*reply);
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  EXPECT_EQ(theirs->key_fingerprint, key.fingerprint());
  EXPECT_EQ(theirs->advertise_url, "127.0.0.1:" + std::to_string(port));
  PeerInfo ours = *theirs;
  ours.boot_id = "our own";
  EXPECT_TRUE(CheckCompatible(ours, *theirs).ok());
  ours.chunk_size = theirs->chunk_size * 2;
  EXPECT_EQ(CheckCompatible(ours, *theirs).code(), ErrorCode::kLayoutMismatch);

  // The descriptor reaches the peer's data channel, which answers: a read
  // naming no lookup task of the peer's is refused there (kNotFound; an
  // unreachable channel would time out), as the server serves only objects
  // a task of its holds locked (reads that land: test_p2p_sharing.py).
  std::vector<std::byte> pool(1 << 20, std::byte{0x11});
  auto channel = std::move(UcxChannel::Create(pool.data(), pool.size(), &clock, key.data_key()))
                     .value();
  auto handle = channel->Connect(theirs->data_channel);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  std::promise<Status> read;
  channel->Read(*handle, {{.remote_offset = 0, .local_offset = 4096, .size = 64 << 10}},
                clock.NowMs() + kLongDeadline, [&read](Status s) { read.set_value(s); });
  EXPECT_EQ(read.get_future().get().code(), ErrorCode::kNotFound);

  // Ops 29-31 in the reference's shapes: a task id, one miss, nil.
  auto task = CallAndWait(*rpc, peer, Op::kP2pLookupAndLock, {AbsentKeys(), Layouts()},
                          clock.NowMs() + kLongDeadline);
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  msgpk::MsgpackCursor task_id(*task);
  auto id = task_id.ReadInt("task");
  ASSERT_TRUE(id.ok());
  auto results = CallAndWait(*rpc, peer, Op::kP2pQueryLookupResults,
                             {msgpk::Encoder().Int(*id).Take()}, clock.NowMs() + kLongDeadline);
  ASSERT_TRUE(results.ok());
  msgpk::MsgpackCursor addresses(*results);
  ASSERT_EQ(*addresses.ReadArrayHeader("addresses"), 1u);
  std::optional<std::int64_t> offset;
  ASSERT_TRUE(addresses
                  .ReadFields("address",
                              [&](std::string_view name) -> Result<bool> {
                                if (name != "offset") return false;
                                LMC_ASSIGN_OR_RETURN(offset, addresses.ReadInt("offset"));
                                return true;
                              })
                  .ok());
  EXPECT_EQ(offset, -1);
  auto unlocked = CallAndWait(*rpc, peer, Op::kP2pUnlockObjects, {AbsentKeys()},
                              clock.NowMs() + kLongDeadline);
  ASSERT_TRUE(unlocked.ok());
  EXPECT_EQ(*unlocked, std::string("\xc0", 1));
  EXPECT_EQ(rpc->Stats().replies, 4u);
  EXPECT_EQ(rpc->Stats().timeouts, 0u);
}

// A member of another fleet (another key) is never answered: the server
// refuses its CURVE handshake and closes the connection, which ends the
// call then (kUnavailable), not at its deadline.
TEST(PeerRpcTest, AStrangerIsNeverAnsweredAndItsCallEndsWhenTheServerCloses) {
  TempDir dir("lmc_peer_rpc");
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(dir, WriteKeyFile(dir, "fleet.key", 'k'), port, "peer");
  FakeClock clock;  // stands still: the deadline never comes
  auto rpc = std::move(PeerRpc::Start(LoadKey(WriteKeyFile(dir, "other.key", 'o')), &clock))
                 .value();
  const PeerId peer = rpc->Connect("tcp://127.0.0.1:" + std::to_string(port));
  std::atomic<int> ended{0};
  std::optional<Status> status;
  std::mutex mu;
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + 5'000, [&](Result<std::string> r) {
    std::lock_guard lock(mu);
    status = r.status();
    ended.fetch_add(1);
  });
  ASSERT_TRUE(WaitUntil([&] { return ended.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // more refusals: still once
  EXPECT_EQ(ended.load(), 1);
  std::lock_guard lock(mu);
  EXPECT_EQ(status->code(), ErrorCode::kUnavailable);
  EXPECT_EQ(rpc->Stats().closed_calls, 1u);
  EXPECT_EQ(rpc->Stats().replies, 0u);
  EXPECT_EQ(rpc->Stats().timeouts, 0u);
}

TEST(PeerRpcTest, ADeadPeerTimesOutAndIsReachedAgainWhenItIsBack) {
  TempDir dir("lmc_peer_rpc");
  const std::string key_file = WriteKeyFile(dir, "fleet.key", 'k');
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(dir, key_file, port, "first");
  FakeClock clock;
  auto rpc = std::move(PeerRpc::Start(LoadKey(key_file), &clock)).value();
  const PeerId peer = rpc->Connect("tcp://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(CallAndWait(*rpc, peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline).ok());

  kill(server->pid(), SIGKILL);
  server->WaitExit(std::chrono::seconds(30));
  std::promise<Result<std::string>> dead;
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + 1'000,
            [&dead](Result<std::string> r) { dead.set_value(std::move(r)); });
  clock.Advance(1'000);
  EXPECT_EQ(dead.get_future().get().status().code(), ErrorCode::kTimeout);

  // The same address, a new life: ZMQ reconnects and the next call is answered.
  server = StartPeer(dir, key_file, port, "second");
  auto again = CallAndWait(*rpc, peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(PeerInfo::FromServerInfo(*again).ok());
}

// A peer killed while it holds our call (it read the request and never
// answered): its connection closes, and the call ends then, not at its
// deadline (a lookup would otherwise wait out --p2p-lookup-timeout on a dead
// peer, holding the locks the other peers gave it: lmcache-soak --nodes 3
// with node kills found tasks held that long). A reply queued before the
// close still counts.
TEST(PeerRpcTest, ACallToAPeerThatDiesEndsWhenItsConnectionCloses) {
  TempDir dir("lmc_peer_rpc");
  const FleetKey key = LoadKey(WriteKeyFile(dir, "fleet.key", 'k'));
  FakeClock clock;  // stands still: no deadline ends anything here
  auto rpc = std::move(PeerRpc::Start(key, &clock)).value();
  zmq::context_t context(1);
  auto listen = [&] {
    auto router = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    router->set(zmq::sockopt::linger, 0);
    router->set(zmq::sockopt::curve_server, 1);
    router->set(zmq::sockopt::curve_secretkey, key.server().secret_z85);
    return router;
  };
  auto router = listen();
  router->bind("tcp://127.0.0.1:*");
  const std::string url = router->get(zmq::sockopt::last_endpoint);
  const PeerId peer = rpc->Connect(url);
  std::promise<Result<std::string>> answered, held;
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
            [&answered](Result<std::string> r) { answered.set_value(std::move(r)); });
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
            [&held](Result<std::string> r) { held.set_value(std::move(r)); });
  std::vector<zmq::message_t> first, second;
  ASSERT_TRUE(zmq::recv_multipart(*router, std::back_inserter(first)));
  ASSERT_TRUE(zmq::recv_multipart(*router, std::back_inserter(second)));
  // The first is answered just before the peer goes; the second never is.
  const std::string nil("\xc0", 1);
  std::vector<zmq::const_buffer> reply{zmq::buffer(first[0].data(), first[0].size()),
                                       zmq::buffer(first[1].data(), first[1].size()),
                                       zmq::buffer(first[2].data(), first[2].size()),
                                       zmq::buffer(nil)};
  zmq::send_multipart(*router, reply);
  // The peer dies: its socket closes, once its queued reply has left (a
  // linger of its own: the reply is not raced against the close).
  router->set(zmq::sockopt::linger, 5000);
  router.reset();

  auto held_result = held.get_future();
  ASSERT_EQ(held_result.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the call to the dead peer waited for its deadline";
  EXPECT_EQ(held_result.get().status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(answered.get_future().get().ok());
  EXPECT_EQ(rpc->Stats().closed_calls, 1u);
  EXPECT_EQ(rpc->Stats().timeouts, 0u);

  // The peer back at the same address: reached again.
  router = listen();
  router->bind(url);
  std::promise<Result<std::string>> again;
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
            [&again](Result<std::string> r) { again.set_value(std::move(r)); });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(zmq::recv_multipart(*router, std::back_inserter(request)));
  std::vector<zmq::const_buffer> back{zmq::buffer(request[0].data(), request[0].size()),
                                      zmq::buffer(request[1].data(), request[1].size()),
                                      zmq::buffer(request[2].data(), request[2].size()),
                                      zmq::buffer(nil)};
  zmq::send_multipart(*router, back);
  EXPECT_TRUE(again.get_future().get().ok());
}

// A hostile fleet endpoint (it holds the server's CURVE pair) that answers
// with frames that are not a reply to the call: each is dropped and counted,
// and the call still ends exactly once, at its deadline.
TEST(PeerRpcTest, RepliesThatMatchNoCallAreDroppedAndTheCallEndsAtItsDeadline) {
  TempDir dir("lmc_peer_rpc");
  const FleetKey key = LoadKey(WriteKeyFile(dir, "fleet.key", 'k'));
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::curve_server, 1);
  router.set(zmq::sockopt::curve_secretkey, key.server().secret_z85);
  router.bind("tcp://127.0.0.1:*");
  const std::string url = router.get(zmq::sockopt::last_endpoint);

  FakeClock clock;
  auto rpc = std::move(PeerRpc::Start(key, &clock)).value();
  const PeerId peer = rpc->Connect(url);
  std::atomic<int> ended{0};
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + 1'000,
            [&ended](Result<std::string> r) {
              EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
              ended.fetch_add(1);
            });
  std::vector<zmq::message_t> request;
  ASSERT_TRUE(zmq::recv_multipart(router, std::back_inserter(request)));
  ASSERT_EQ(request.size(), 3u);  // identity, uid, "server_info"
  const std::string identity = request[0].to_string();
  const std::string uid = request[1].to_string();
  auto send = [&](std::vector<std::string> frames) {
    frames.insert(frames.begin(), identity);
    std::vector<zmq::const_buffer> buffers;
    for (const std::string& f : frames) buffers.push_back(zmq::buffer(f));
    zmq::send_multipart(router, buffers);
  };
  const std::string nil("\xc0", 1);
  send({uid, msgpk::Encoder().Int(29).Take(), nil});            // another operation
  send({msgpk::Encoder().Uint(9999).Take(), request[2].to_string(), nil});  // nobody's uid
  send({"\xff\xff", request[2].to_string(), nil});              // not a uid at all
  send({uid});                                                  // one frame
  ASSERT_TRUE(WaitUntil([&] {
    const PeerRpcStats s = rpc->Stats();
    return s.stray_replies + s.late_replies == 4;
  }));
  EXPECT_EQ(ended.load(), 0);
  clock.Advance(1'000);
  ASSERT_TRUE(WaitUntil([&] { return ended.load() == 1; }));
  send({uid, request[2].to_string(), nil});  // the right reply, too late: dropped
  ASSERT_TRUE(WaitUntil([&] { return rpc->Stats().late_replies == 2; }));
  EXPECT_EQ(ended.load(), 1);
  EXPECT_EQ(rpc->Stats().replies, 0u);
}

TEST(PeerRpcTest, UnknownPeersFailAtOnceAndStoppingEndsCallsInFlight) {
  TempDir dir("lmc_peer_rpc");
  FakeClock clock;
  auto rpc = StartRpc(dir, clock);
  auto unknown = CallAndWait(*rpc, 12345, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline);
  EXPECT_EQ(unknown.status().code(), ErrorCode::kUnavailable);
  auto not_a_peer_op = CallAndWait(*rpc, 1, Op::kStore, {}, clock.NowMs() + kLongDeadline);
  EXPECT_EQ(not_a_peer_op.status().code(), ErrorCode::kNotSupported);

  UnansweredCall call = CallNobody(*rpc, clock);
  rpc.reset();
  EXPECT_EQ(call.result.get().status().code(), ErrorCode::kUnavailable);
}

// A completion that calls again while the RPC stops (a requester going on to
// its next step) still gets its answer, at once: no call is ever left
// without one (a lookup would wait for it for ever).
TEST(PeerRpcTest, ACallMadeFromACompletionWhileStoppingEndsAtOnce) {
  TempDir dir("lmc_peer_rpc");
  FakeClock clock;
  auto rpc = StartRpc(dir, clock);
  const PeerId peer = rpc->Connect("tcp://127.0.0.1:" + std::to_string(testing::FreeTcpPort()));
  // Three deep: the first is ended with the calls in flight, the second
  // with the queued ones, the third after both.
  std::promise<Result<std::string>> last;
  PeerRpc* raw = rpc.get();
  std::function<void(int)> call_again = [&](int depth) {
    raw->Call(peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
              [&, depth](Result<std::string> r) {
                if (depth == 3) {
                  last.set_value(std::move(r));
                } else {
                  call_again(depth + 1);
                }
              });
  };
  call_again(1);
  rpc.reset();
  auto future = last.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(future.get().status().code(), ErrorCode::kUnavailable);
}

// Stop (a server shutting down): a call in flight ends now, not at its
// deadline, and a later call ends at once on its caller's thread; the RPC
// object stays usable (Stop twice, then its destructor).
TEST(PeerRpcTest, StopEndsCallsInFlightNowAndLaterOnesAtOnce) {
  TempDir dir("lmc_peer_rpc");
  FakeClock clock;
  auto rpc = StartRpc(dir, clock);
  UnansweredCall call = CallNobody(*rpc, clock);
  const PeerId peer = call.peer;
  rpc->Stop();
  ASSERT_EQ(call.result.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(call.result.get().status().code(), ErrorCode::kUnavailable);
  const std::thread::id caller = std::this_thread::get_id();
  std::optional<std::thread::id> ran_on;
  rpc->Call(peer, Op::kServerInfo, {}, clock.NowMs() + kLongDeadline,
            [&](Result<std::string> r) {
              EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable);
              ran_on = std::this_thread::get_id();
            });
  EXPECT_EQ(ran_on, caller);
  rpc->Stop();
}

}  // namespace
}  // namespace lmcache::fleet
