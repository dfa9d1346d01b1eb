// RouterLoop with a fake RequestHandler: frames in and out, refusals before a
// request runs, fairness between clients, departures, duplicate endpoints.
#include "transport/router_loop.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/msgpack_codec.h"
#include "fakes/wait_until.h"
#include "protocol/wire_codec.h"

namespace lmcache::transport {
namespace {

using msgpk::Encoder;

// Operations by name: "echo" (inline), "work" (CPU pool), "fail" (inline,
// answers an error), "server_info" (inline, like the real one's pid field),
// "stream" (inline: two items at once, then open until a cancel or its
// connection's close ends it).
class FakeHandler final : public RequestHandler {
 public:
  Result<RequestRoute> Route(std::string_view frame) const override {
    auto name = protocol::DecodeString(frame, "operation");
    if (!name.ok()) return Status(ErrorCode::kUnknownOperation, "not a name");
    if (*name == "echo") return RequestRoute{Pool::kInline, 1024, 0};
    if (*name == "work") return RequestRoute{Pool::kCpu, 1u << 20, 1};
    if (*name == "fail") return RequestRoute{Pool::kInline, 1024, 2};
    if (*name == "server_info") return RequestRoute{Pool::kInline, 0, 3};
    if (*name == "park") return RequestRoute{Pool::kCpu, 1024, 4};
    if (*name == "stream") return RequestRoute{Pool::kInline, 1024, 5};
    return Status(ErrorCode::kUnknownOperation, "unknown operation '" + *name + "'");
  }
  void Handle(const RequestRoute& route, const RequestContext& context, Payloads payloads,
              ReplyFn done) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      handled_.push_back(std::string(payloads.empty() ? "" : payloads[0]));
      if (route.row == 1) cv_.wait(lock, [this] { return !gate_closed_; });
    }
    if (route.row == 2) {
      done({Encoder().Bool(false).Take(), protocol::EncodeErrorMap(InvalidArgument("nope"))});
      return;
    }
    if (route.row == 4) {  // answered later: when its connection closes
      std::lock_guard<std::mutex> lock(mu_);
      parked_.push_back(std::move(done));
      return;
    }
    if (route.row == 5) {
      for (int i = 1; i <= 2; ++i) {
        done({Encoder().Int(i).Take(), std::nullopt, ReplyKind::kStreamItem});
      }
      std::lock_guard<std::mutex> lock(mu_);
      streams_[std::string(context.uid)] = std::move(done);
      return;
    }
    if (route.row == 3) {
      msgpk::MapWriter info;
      info.Field("pid").Int(getpid());
      done({info.Take(), std::nullopt});
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back("answered " + std::string(payloads.empty() ? "" : payloads[0]));
    }
    const char* value = context.connection.empty() ? "?" : context.fleet_member ? "member" : "ok";
    done({Encoder().Str(value).Take(), std::nullopt});
  }
  ReplyFrames Refuse(const RequestRoute*, const Status& status) override {
    return {Encoder().Nil().Take(), protocol::EncodeErrorMap(status)};
  }
  // Answers the parked requests, holding the handler's lock as a real
  // handler may (the service answers a parked wait under its session's).
  void OnClosing(std::string_view connection) override {
    std::lock_guard<std::mutex> lock(mu_);
    closing_.emplace_back(connection);
    in_closing_ = true;
    for (ReplyFn& done : parked_) done({Encoder().Nil().Take(), std::nullopt});
    parked_.clear();
    for (auto& [uid, done] : streams_) done({{}, std::nullopt, ReplyKind::kStreamEnd});
    streams_.clear();
    in_closing_ = false;
  }
  void OnStreamControl(std::string_view, std::string_view uid, StreamSignal signal) override {
    std::lock_guard<std::mutex> lock(mu_);
    controls_.push_back(std::string(signal == StreamSignal::kAck ? "ack " : "cancel ") +
                        std::to_string(*protocol::DecodeInt(uid, "uid")));
    if (signal != StreamSignal::kCancel) return;
    auto it = streams_.find(std::string(uid));
    if (it == streams_.end()) return;
    it->second({{}, std::nullopt, ReplyKind::kStreamEnd});
    streams_.erase(it);
  }
  std::vector<std::string> controls() {
    std::lock_guard<std::mutex> lock(mu_);
    return controls_;
  }
  void OnDisconnect(std::string_view connection) override {
    if (in_closing_) {  // called back from inside OnClosing: it would deadlock on mu_
      reentered_ = true;
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    disconnected_.emplace_back(connection);
    events_.push_back("disconnected");
  }

  void CloseGate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_closed_ = true;
  }
  void OpenGate() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      gate_closed_ = false;
    }
    cv_.notify_all();
  }
  std::vector<std::string> handled() {
    std::lock_guard<std::mutex> lock(mu_);
    return handled_;
  }
  std::size_t disconnects() {
    std::lock_guard<std::mutex> lock(mu_);
    return disconnected_.size();
  }
  std::size_t closings() {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_.size();
  }
  std::size_t parked() {
    std::lock_guard<std::mutex> lock(mu_);
    return parked_.size();
  }
  bool reentered() const { return reentered_.load(); }
  // "answered <first payload>" and "disconnected", in the order they happened.
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_closed_ = false;
  std::vector<std::string> handled_;
  std::vector<std::string> disconnected_;
  std::vector<std::string> events_;
  std::vector<std::string> closing_;
  std::vector<ReplyFn> parked_;
  std::map<std::string, ReplyFn> streams_;  // by uid frame
  std::vector<std::string> controls_;
  std::atomic<bool> in_closing_{false};
  std::atomic<bool> reentered_{false};
};

class RouterLoopTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> urls, FairQueueLimits limits = {},
             std::optional<FleetEndpointConfig> fleet = std::nullopt) {
    RouterConfig config;
    config.urls = std::move(urls);
    config.fleet = std::move(fleet);
    config.cpu_workers = 1;
    config.queue_limits = limits;
    config.context = &context_;
    auto loop = RouterLoop::Create(config);
    ASSERT_TRUE(loop.ok()) << loop.status().ToString();
    loop_ = std::move(*loop);
    thread_ = std::thread([this] { loop_->Run(&handler_); });
  }
  void TearDown() override {
    handler_.OpenGate();
    if (loop_) loop_->Stop();
    if (thread_.joinable()) thread_.join();
    loop_.reset();
  }
  zmq::socket_t Dealer(const std::string& url) {
    zmq::socket_t dealer(context_, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(url);
    return dealer;
  }
  static void Send(zmq::socket_t& dealer, std::uint64_t uid, const std::string& op,
                   std::vector<std::string> payloads = {}) {
    std::vector<zmq::const_buffer> frames;
    const std::string uid_frame = Encoder().Uint(uid).Take();
    const std::string op_frame = Encoder().Str(op).Take();
    frames.push_back(zmq::buffer(uid_frame));
    frames.push_back(zmq::buffer(op_frame));
    for (const std::string& p : payloads) frames.push_back(zmq::buffer(p));
    ASSERT_TRUE(zmq::send_multipart(dealer, frames));
  }
  // A stream's control frame, as the reference's client sends it: [uid, b"", signal].
  static void SendControl(zmq::socket_t& dealer, std::uint64_t uid, const std::string& signal) {
    const std::string uid_frame = Encoder().Uint(uid).Take();
    std::vector<zmq::const_buffer> frames{zmq::buffer(uid_frame), zmq::const_buffer(nullptr, 0),
                                          zmq::buffer(signal)};
    ASSERT_TRUE(zmq::send_multipart(dealer, frames));
  }
  static std::vector<std::string> Receive(zmq::socket_t& dealer, int timeout_ms = 5000) {
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return {};
    std::vector<zmq::message_t> parts;
    (void)zmq::recv_multipart(dealer, std::back_inserter(parts));
    std::vector<std::string> out;
    for (auto& part : parts) out.emplace_back(part.to_string());
    return out;
  }

  zmq::context_t context_{1};
  FakeHandler handler_;
  std::unique_ptr<RouterLoop> loop_;
  std::thread thread_;
};

struct CurvePair {
  std::string public_z85, secret_z85;
  static CurvePair Make() {
    char pub[41] = {}, sec[41] = {};
    EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
    return {pub, sec};
  }
};

// The fleet endpoint (P2P): only a client with the members' CURVE key pair
// gets a connection, and its requests are marked as a fleet member's; a
// client with another key pair, or none (ZMQ's NULL mechanism, as every
// worker speaks), never gets a reply, and each refusal is counted.
TEST_F(RouterLoopTest, TheFleetEndpointServesOnlyClientsThatProveTheFleetKey) {
  const CurvePair server = CurvePair::Make();
  const CurvePair member = CurvePair::Make();
  const CurvePair stranger = CurvePair::Make();
  std::array<std::uint8_t, 32> member_key{};
  ASSERT_NE(zmq_z85_decode(member_key.data(), member.public_z85.c_str()), nullptr);
  FleetEndpointConfig fleet;
  fleet.url = "tcp://127.0.0.1:0";
  fleet.server_secret_z85 = server.secret_z85;
  fleet.is_member = [member_key](std::span<const std::uint8_t> key) {
    return key.size() == member_key.size() && std::equal(key.begin(), key.end(), member_key.begin());
  };
  Start({"inproc://router-fleet-clients"}, {}, fleet);
  ASSERT_EQ(loop_->endpoints().size(), 2u);
  const std::string fleet_url = loop_->endpoints()[1];
  auto curve_dealer = [&](const CurvePair& pair) {
    zmq::socket_t dealer(context_, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::curve_serverkey, server.public_z85);
    dealer.set(zmq::sockopt::curve_publickey, pair.public_z85);
    dealer.set(zmq::sockopt::curve_secretkey, pair.secret_z85);
    dealer.connect(fleet_url);
    return dealer;
  };

  auto member_dealer = curve_dealer(member);
  Send(member_dealer, 1, "echo", {Encoder().Str("from a member").Take()});
  const auto reply = Receive(member_dealer);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(*protocol::DecodeString(reply[2], "value"), "member");

  auto stranger_dealer = curve_dealer(stranger);
  Send(stranger_dealer, 2, "echo", {Encoder().Str("from a stranger").Take()});
  auto plain_dealer = Dealer(fleet_url);  // no CURVE at all
  Send(plain_dealer, 3, "echo", {Encoder().Str("in the clear").Take()});
  ASSERT_TRUE(testing::WaitUntil([&] { return loop_->Stats().fleet_refused >= 1; }));
  EXPECT_TRUE(Receive(stranger_dealer, 300).empty());
  EXPECT_TRUE(Receive(plain_dealer, 300).empty());
  EXPECT_EQ(loop_->Stats().fleet_admitted, 1u);
  for (const std::string& handled : handler_.handled()) {
    EXPECT_EQ(handled.find("stranger"), std::string::npos);
    EXPECT_EQ(handled.find("clear"), std::string::npos);
  }
  // The clients' endpoint is unchanged: NULL mechanism, and not a member's.
  auto worker = Dealer("inproc://router-fleet-clients");
  Send(worker, 4, "echo", {Encoder().Str("a worker").Take()});
  const auto worker_reply = Receive(worker);
  ASSERT_EQ(worker_reply.size(), 3u);
  EXPECT_EQ(*protocol::DecodeString(worker_reply[2], "value"), "ok");
}

TEST_F(RouterLoopTest, RepliesEchoUidAndOperationAndCarryTheValue) {
  Start({"inproc://router-echo"});
  auto dealer = Dealer("inproc://router-echo");
  Send(dealer, 7, "echo", {Encoder().Str("hello").Take()});
  const auto reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[0], Encoder().Uint(7).Take());
  EXPECT_EQ(reply[1], Encoder().Str("echo").Take());
  EXPECT_EQ(*protocol::DecodeString(reply[2], "value"), "ok");
  Send(dealer, 8, "fail");
  const auto failed = Receive(dealer);
  ASSERT_EQ(failed.size(), 4u);
  EXPECT_EQ(protocol::DecodeErrorMap(failed[3]).code(), ErrorCode::kInvalidArgument);
  // Counted once the send returned (the client may see the reply first).
  (void)testing::WaitUntil([&] { return loop_->Stats().replied >= 2; });
  EXPECT_EQ(loop_->Stats().replied, 2u);
}

// The reference's streaming transport (RpcSpec.streaming, MessagingStream):
// items [uid, operation, value] under the request's uid while it stays
// open, the end marker [uid, operation] without a value frame, and the
// client's control frames [uid, b"", b"ack" | b"cancel"], which get no reply.
TEST_F(RouterLoopTest, AStreamSendsItemsThenAnEndMarkerAndControlFramesGetNoReply) {
  Start({"inproc://router-stream"});
  auto dealer = Dealer("inproc://router-stream");
  Send(dealer, 9, "stream");
  for (int i = 1; i <= 2; ++i) {
    const auto item = Receive(dealer);
    ASSERT_EQ(item.size(), 3u) << "item " << i;
    EXPECT_EQ(item[0], Encoder().Uint(9).Take());
    EXPECT_EQ(item[1], Encoder().Str("stream").Take());
    EXPECT_EQ(*protocol::DecodeInt(item[2], "value"), i);
  }
  SendControl(dealer, 9, "bogus");  // neither: a malformed request, answered and counted
  const auto bogus = Receive(dealer);
  ASSERT_EQ(bogus.size(), 4u) << "a malformed request is answered [uid, operation, nil, error]";
  EXPECT_EQ(bogus[0], Encoder().Uint(9).Take());
  EXPECT_EQ(bogus[1], "");  // the empty operation frame, echoed
  EXPECT_EQ(protocol::DecodeErrorMap(bogus[3]).code(), ErrorCode::kMalformedRequest);
  SendControl(dealer, 9, "ack");
  EXPECT_TRUE(Receive(dealer, 300).empty()) << "a control frame got a reply";
  SendControl(dealer, 9, "cancel");
  const auto end = Receive(dealer);
  ASSERT_EQ(end.size(), 2u) << "the end marker is [uid, operation]";
  EXPECT_EQ(end[0], Encoder().Uint(9).Take());
  EXPECT_EQ(end[1], Encoder().Str("stream").Take());
  EXPECT_EQ(handler_.controls(), (std::vector<std::string>{"ack 9", "cancel 9"}));
  // Other requests on the same connection are unaffected.
  Send(dealer, 10, "echo");
  EXPECT_EQ(Receive(dealer).size(), 3u);
  (void)testing::WaitUntil([&] { return loop_->Stats().replied >= 3; });
  const TransportStats stats = loop_->Stats();
  EXPECT_EQ(stats.stream_items, 2u);
  EXPECT_EQ(stats.replied, 3u);  // the refusal, the end marker and the echo
  EXPECT_EQ(stats.stream_controls, 2u);
  EXPECT_EQ(stats.bad_controls, 1u);
}

// Only [uid, b"", b"ack" | b"cancel"] is a control frame. Every other request
// with an empty operation frame is answered as malformed: before, each shape
// below (an independent fuzzer's) went unanswered and cost its client the
// whole reply timeout.
TEST_F(RouterLoopTest, AnEmptyOperationFrameThatIsNoStreamControlIsAnswered) {
  Start({"inproc://router-empty-op"});
  auto dealer = Dealer("inproc://router-empty-op");
  const std::string uid = Encoder().Uint(5).Take();
  const std::vector<std::vector<std::string>> shapes = {
      {uid, ""}, {uid, "", ""}, {"", "", ""}, std::vector<std::string>(40, ""),
      {uid, "", "ack", "extra"}};
  for (const auto& frames : shapes) {
    std::vector<zmq::const_buffer> parts;
    for (const std::string& f : frames) parts.push_back(zmq::buffer(f));
    ASSERT_TRUE(zmq::send_multipart(dealer, parts));
    const auto reply = Receive(dealer);
    ASSERT_EQ(reply.size(), 4u) << frames.size() << " frames: no reply";
    EXPECT_EQ(reply[0], frames[0]);
    EXPECT_EQ(reply[1], "");
    EXPECT_EQ(protocol::DecodeErrorMap(reply[3]).code(), ErrorCode::kMalformedRequest);
  }
  EXPECT_TRUE(testing::WaitUntil([&] { return loop_->Stats().bad_controls == shapes.size(); }));
  EXPECT_TRUE(handler_.controls().empty());
}

// An open stream is a request in flight: its connection is released once
// the handler ends it (on the close), not before.
TEST_F(RouterLoopTest, AConnectionWithAnOpenStreamIsReleasedOnceTheStreamEnds) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmc_router_stream_" + std::to_string(getpid()) + ".sock");
  Start({"ipc://" + path});
  {
    auto client = Dealer("ipc://" + path);
    Send(client, 3, "stream");
    ASSERT_EQ(Receive(client).size(), 3u);
    ASSERT_EQ(Receive(client).size(), 3u);
  }  // closed with the stream open
  (void)testing::WaitUntil([&] { return handler_.disconnects() != 0; });
  EXPECT_EQ(handler_.closings(), 1u);
  EXPECT_EQ(handler_.disconnects(), 1u);
  EXPECT_FALSE(handler_.reentered());
}

TEST_F(RouterLoopTest, RequestsRefusedBeforeTheyRunStillGetAReply) {
  Start({"inproc://router-refuse"});
  auto dealer = Dealer("inproc://router-refuse");
  // No operation frame.
  const std::string uid = Encoder().Uint(1).Take();
  dealer.send(zmq::buffer(uid), zmq::send_flags::none);
  auto reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 4u);
  EXPECT_EQ(protocol::DecodeErrorMap(reply[3]).code(), ErrorCode::kMalformedRequest);
  // An unknown operation.
  Send(dealer, 2, "teleport");
  reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 4u);
  EXPECT_EQ(protocol::DecodeErrorMap(reply[3]).code(), ErrorCode::kUnknownOperation);
  // A payload over the operation's limit never reaches the handler.
  Send(dealer, 3, "echo", {std::string(2000, 'x')});
  reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 4u);
  EXPECT_EQ(protocol::DecodeErrorMap(reply[3]).code(), ErrorCode::kTooLarge);
  EXPECT_TRUE(handler_.handled().empty());
  (void)testing::WaitUntil([&] { return loop_->Stats().refused >= 3; });
  EXPECT_EQ(loop_->Stats().refused, 3u);
}

// A server handing over to its successor (warm restart): requests that
// reached its sockets but were never read are answered with the retryable
// error it gives, not dropped with the connection; none of them runs.
TEST_F(RouterLoopTest, StopRefusingAnswersEveryRequestStillQueuedInTheSockets) {
  RouterConfig config;
  config.urls = {"inproc://router-handover"};
  config.cpu_workers = 1;
  config.context = &context_;
  auto loop = RouterLoop::Create(config);
  ASSERT_TRUE(loop.ok());
  loop_ = std::move(*loop);
  auto dealer = Dealer("inproc://router-handover");
  for (std::uint64_t uid = 1; uid <= 300; ++uid) {  // more than one receive batch
    Send(dealer, uid, "echo", {Encoder().Str("late").Take()});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // queued in the ROUTER
  loop_->StopRefusing(Status(ErrorCode::kUnavailable, "handing over: retry"));
  loop_->Run(&handler_);  // stopped already: only the final pass runs
  for (std::uint64_t uid = 1; uid <= 300; ++uid) {
    const auto reply = Receive(dealer);
    ASSERT_EQ(reply.size(), 4u) << "request " << uid << " got no reply";
    EXPECT_EQ(reply[0], Encoder().Uint(uid).Take());
    EXPECT_EQ(reply[1], Encoder().Str("echo").Take());
    const Status refused = protocol::DecodeErrorMap(reply[3]);
    EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
    EXPECT_EQ(refused.message(), "handing over: retry");
  }
  EXPECT_TRUE(handler_.handled().empty());
  EXPECT_EQ(loop_->Stats().refused, 300u);
}

// Issue 19: 24 of 160,000 fuzzed requests, each with a payload just over
// 64 MiB, never got a reply: the transport's frame limit (then 64 MiB) made
// ZMQ drop the request and the peer's connection, and the client waited out
// its timeout. The transport now takes frames of twice the largest
// operation limit, so such a request reaches the operation's own check.
TEST_F(RouterLoopTest, APayloadJustOverTheOldFrameLimitGetsATooLargeReply) {
  const std::string url = "ipc://" + (std::filesystem::temp_directory_path() /
                                      ("lmc_router_big_" + std::to_string(getpid()) + ".sock"))
                                         .string();
  Start({url});
  auto dealer = Dealer(url);
  Send(dealer, 1, "work", {std::string((64u << 20) + 1, 'x')});
  auto reply = Receive(dealer, 30'000);
  ASSERT_EQ(reply.size(), 4u) << "no reply to a 64 MiB + 1 payload";
  const Status status = protocol::DecodeErrorMap(reply[3]);
  EXPECT_EQ(status.code(), ErrorCode::kTooLarge);
  EXPECT_NE(status.message().find(std::to_string(1u << 20)), std::string::npos)
      << status.message();                  // names the operation's limit
  Send(dealer, 2, "echo", {"still here"});  // the connection survived
  reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 3u);  // uid, operation, value: a success
  EXPECT_EQ(handler_.handled().size(), 1u);
}

TEST_F(RouterLoopTest, AWellBehavedClientIsServedBeforeAFloodersBacklog) {
  Start({"inproc://router-fair"});
  auto flooder = Dealer("inproc://router-fair");
  auto polite = Dealer("inproc://router-fair");
  handler_.CloseGate();  // the single CPU worker parks on the first request
  Send(flooder, 0, "work", {"flood-0"});
  // The order of arrival is set by what the loop has observably done, never
  // by sleeps: flood-0 runs (held at the gate), then the whole backlog is in
  // the CPU pool's queue, and only then does the polite client send.
  ASSERT_TRUE(testing::WaitUntil([&] { return handler_.handled().size() == 1; }))
      << "flood-0 never ran";
  for (std::uint64_t i = 1; i < 100; ++i) Send(flooder, i, "work", {"flood-" + std::to_string(i)});
  ASSERT_TRUE(testing::WaitUntil([&] { return loop_->Stats().queued_requests == 99; }))
      << "the flood was not queued: " << loop_->Stats().queued_requests << " of 99";
  Send(polite, 0, "work", {"polite"});
  ASSERT_TRUE(testing::WaitUntil([&] { return loop_->Stats().queued_requests == 100; }))
      << "the polite request was not queued behind the flood";
  handler_.OpenGate();
  ASSERT_EQ(Receive(polite).size(), 3u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(Receive(flooder).size(), 3u) << i;
  const auto order = handler_.handled();
  ASSERT_EQ(order.size(), 101u);
  // flood-0 was running; then one more of the flooder's at most, then the polite client.
  const auto polite_at = std::find(order.begin(), order.end(), "polite") - order.begin();
  EXPECT_LE(polite_at, 2) << "the polite client waited behind " << polite_at << " requests";
}

TEST_F(RouterLoopTest, AClientOverItsQueueShareIsRefusedWhileOthersAreServed) {
  FairQueueLimits limits;
  limits.client_bytes = 4096;
  Start({"inproc://router-share"}, limits);
  auto flooder = Dealer("inproc://router-share");
  auto polite = Dealer("inproc://router-share");
  handler_.CloseGate();
  for (std::uint64_t i = 0; i < 20; ++i) Send(flooder, i, "work", {std::string(1000, 'f')});
  Send(polite, 0, "work", {std::string(1000, 'p')});
  // Every request dispatched before the gate opens (not a sleep): one runs,
  // held at the gate, and each of the other 20 is queued or refused.
  ASSERT_TRUE(testing::WaitUntil([&] {
    const TransportStats stats = loop_->Stats();
    return handler_.handled().size() == 1 && stats.queued_requests + stats.overloaded == 20;
  })) << "not every request reached the pool before the gate opened";
  handler_.OpenGate();
  std::size_t unavailable = 0;
  for (int i = 0; i < 20; ++i) {
    const auto reply = Receive(flooder);
    ASSERT_GE(reply.size(), 3u);
    if (reply.size() == 4 && protocol::DecodeErrorMap(reply[3]).code() == ErrorCode::kUnavailable) {
      unavailable += 1;
    }
  }
  EXPECT_GE(unavailable, 14u);  // at most 4 KiB (+ the running one) of its requests were queued
  const auto reply = Receive(polite);
  ASSERT_EQ(reply.size(), 3u);  // served, not refused
  EXPECT_EQ(loop_->Stats().overloaded, unavailable);
}

TEST_F(RouterLoopTest, AClosedConnectionIsReportedToTheHandler) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmc_router_test_" + std::to_string(getpid()) + ".sock");
  Start({"ipc://" + path});
  {
    auto client = Dealer("ipc://" + path);
    Send(client, 0, "echo");
    ASSERT_EQ(Receive(client).size(), 3u);
  }  // closed
  (void)testing::WaitUntil([&] { return handler_.disconnects() != 0; });
  EXPECT_EQ(handler_.disconnects(), 1u);
  EXPECT_EQ(loop_->Stats().disconnects, 1u);
}

// A client of the server's own user that sends its last requests and closes
// at once (a worker's final releases): those read after the loop saw the
// close (late) are judged as their connection was, never refused as from
// another user (the review found them answered 105 PERMISSION_DENIED, and
// what they would release held until its TTL). Over tcp, where the owner
// check applies; many rounds, since which messages are read late is the
// kernel's and ZMQ's timing.
TEST_F(RouterLoopTest, RequestsReadAfterTheirTcpConnectionClosedAreJudgedAsItWas) {
  Start({"tcp://127.0.0.1:0"});
  const std::string url = loop_->endpoints().at(0);
  constexpr int kRounds = 100;
  constexpr int kLast = 20;
  for (int round = 0; round < kRounds; ++round) {
    zmq::socket_t client(context_, zmq::socket_type::dealer);
    client.set(zmq::sockopt::linger, 5000);  // what was sent leaves before the close
    client.connect(url);
    Send(client, 0, "echo", {"first-" + std::to_string(round)});
    ASSERT_EQ(Receive(client).size(), 3u);
    for (int i = 0; i < kLast; ++i) {
      Send(client, static_cast<std::uint64_t>(i + 1), "echo",
           {"last-" + std::to_string(round) + "-" + std::to_string(i)});
    }
    client.close();
  }
  const std::string final_request = "last-" + std::to_string(kRounds - 1) + "-" +
                                     std::to_string(kLast - 1);
  ASSERT_TRUE(testing::WaitUntil([&] {
    const auto handled = handler_.handled();
    return loop_->Stats().refused_users != 0 ||
           std::count(handled.begin(), handled.end(), final_request) == 1;
  }));
  EXPECT_EQ(loop_->Stats().refused_users, 0u);
  const auto handled = handler_.handled();
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kLast; ++i) {
      const std::string name = "last-" + std::to_string(round) + "-" + std::to_string(i);
      EXPECT_EQ(std::count(handled.begin(), handled.end(), name), 1) << name;
    }
  }
}

// The soak (lmcache-soak, 28 min, a worker killed every 2 s) ended with 12
// read leases nobody held: a worker killed while its lookup waited in the CPU
// pool was reported gone before the lookup ran, so the lookup's session was
// recorded under a connection already released. A connection's close must
// reach the handler only after every request it sent has been answered.
TEST_F(RouterLoopTest, AClosedConnectionIsReportedOnlyAfterItsRequestsInFlightAreAnswered) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmc_router_inflight_" + std::to_string(getpid()) + ".sock");
  Start({"ipc://" + path});
  handler_.CloseGate();
  {
    auto client = Dealer("ipc://" + path);
    Send(client, 0, "work", {"w1"});
    Send(client, 1, "work", {"w2"});  // queued behind w1 in the one-thread pool
    (void)testing::WaitUntil([&] { return !handler_.handled().empty(); });
    ASSERT_EQ(handler_.handled().size(), 1u);
  }  // the client dies with both requests in flight
  (void)testing::WaitUntil([&] { return loop_->Stats().disconnects != 0; });
  ASSERT_EQ(loop_->Stats().disconnects, 1u);  // the transport has seen the close
  // The loop counts the close before it tells the handler: wait for the
  // handler to hear of it, one way or the other (not for a fixed time).
  (void)testing::WaitUntil([&] { return handler_.closings() != 0 || handler_.disconnects() != 0; });
  // A wrong loop might still report it gone a moment later: give it the chance
  // (this pause can only let the check below catch more, never fail it).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(handler_.disconnects(), 0u) << "reported gone with its requests still running";
  EXPECT_EQ(handler_.closings(), 1u) << "its waiting requests are to be answered now";
  handler_.OpenGate();
  (void)testing::WaitUntil([&] { return handler_.disconnects() != 0; });
  EXPECT_EQ(handler_.events(),
            (std::vector<std::string>{"answered w1", "answered w2", "disconnected"}));
}

// The soak's slow-L2 case deadlocked the loop: a closing connection's parked
// wait was answered (under its session's lock) on the loop thread, the
// answer was its last request in flight, and the transport released the
// connection from inside that answer, taking the same lock. The handler is
// never called back from inside its own callbacks.
TEST_F(RouterLoopTest, AConnectionIsNeverReleasedFromInsideTheHandlersOwnCallback) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmc_router_park_" + std::to_string(getpid()) + ".sock");
  Start({"ipc://" + path});
  {
    auto client = Dealer("ipc://" + path);
    Send(client, 0, "park");
    (void)testing::WaitUntil([&] { return handler_.parked() != 0; });
    ASSERT_EQ(handler_.parked(), 1u);
  }  // closed with its request parked
  (void)testing::WaitUntil([&] { return handler_.disconnects() != 0 || handler_.reentered(); });
  EXPECT_FALSE(handler_.reentered()) << "OnDisconnect called from inside OnClosing";
  EXPECT_EQ(handler_.closings(), 1u);
  EXPECT_EQ(handler_.disconnects(), 1u) << "released once its parked request was answered";
}

TEST_F(RouterLoopTest, ASecondLoopOnTheSameIpcPathIsRefusedNamingTheFirst) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmc_router_dup_" + std::to_string(getpid()) + ".sock");
  Start({"ipc://" + path});
  RouterConfig config;
  config.urls = {"ipc://" + path};
  auto second = RouterLoop::Create(config);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status().message();
  // The first one still serves.
  auto client = Dealer("ipc://" + path);
  Send(client, 0, "echo");
  EXPECT_EQ(Receive(client).size(), 3u);
}

TEST_F(RouterLoopTest, ASecondLoopOnTheSameTcpPortIsRefusedNamingTheFirst) {
  Start({"tcp://127.0.0.1:0"});
  const std::string url = loop_->endpoints().front();
  RouterConfig config;
  config.urls = {url};
  auto second = RouterLoop::Create(config);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status().message();
}


// Processes that only burn CPU until destroyed: the load of a busy CI machine.
class BusyProcesses {
 public:
  explicit BusyProcesses(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t child = ::fork();
      if (child == 0) {  // a shell, so that no descriptor of ours stays open in it
        ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      if (child > 0) children_.push_back(child);
    }
  }
  ~BusyProcesses() {
    for (const pid_t child : children_) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;

 private:
  std::vector<pid_t> children_;
};

// CI's ASan stage found 75 bytes leaked inside libzmq after this suite: the
// address frame of a connection-closed event. ZMQ's I/O thread sends such an
// event with a blocking send; a client that closed just before the loop was
// destroyed had its event sent after the loop closed the socket receiving
// them, so the I/O thread blocked (every later connection on the context
// went unserved) until the context ended, and the event leaked. Two busy
// processes widen the window as a loaded CI machine does: without the fix
// some round's client is never served (every build) and LeakSanitizer
// reports the frame (ASan); with it, 200 rounds pass.
TEST_F(RouterLoopTest, AClientClosingAsTheLoopIsDestroyedLeaksNothingInsideZmq) {
  BusyProcesses busy(2);
  for (int round = 0; round < 200 && !HasFailure(); ++round) {  // stuck once, stuck for good
    // A fresh path per round: no round meets the previous round's socket file.
    const std::string path = std::filesystem::temp_directory_path() /
                             ("lmc_router_teardown_" + std::to_string(getpid()) + "_" +
                              std::to_string(round) + ".sock");
    Start({"ipc://" + path});
    {
      auto client = Dealer("ipc://" + path);
      Send(client, static_cast<std::uint64_t>(round), "echo");
      EXPECT_EQ(Receive(client).size(), 3u) << "round " << round << ": ZMQ's I/O thread is stuck";
    }  // closed: its event races the teardown below
    TearDown();
  }
}

}  // namespace
}  // namespace lmcache::transport
