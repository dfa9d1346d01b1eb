// The takeover socket and the two sides of a handover, in one process (the
// real two-process handover is tests/python/test_warm_restart.py): frames,
// a descriptor passed with SCM_RIGHTS, deadlines, refusals, and the
// predecessor's judgement of a successor's geometry.
#include "restart/takeover.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::restart {
namespace {

using std::chrono::milliseconds;

class TakeoverTest : public ::testing::Test {
 protected:
  TakeoverTest() {
    path_ = "/tmp/lmc-takeover-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    path_ = path_.substr(0, 100);
    std::filesystem::remove(path_);
  }
  ~TakeoverTest() override { std::filesystem::remove(path_); }

  static TakeoverGeometry Geometry() {
    return {"lmcache_l1_pool_takeover_test",
            {64 << 20, 4096, 2 << 20, 64 << 20},
            store::ChunkSizes(256)};
  }
  // A file standing in for the pool segment.
  static UniqueFd MemFd(const std::string& contents) {
    UniqueFd fd(memfd_create("pool", MFD_CLOEXEC));
    EXPECT_EQ(write(fd.get(), contents.data(), contents.size()),
              static_cast<ssize_t>(contents.size()));
    return fd;
  }

  std::string path_;
};

TEST_F(TakeoverTest, FramesAndADescriptorCrossTheSocket) {
  auto listener = TakeoverListener::Listen(path_);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  struct stat info {};
  ASSERT_EQ(stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u) << "the socket file is only for this user";
  auto client = TakeoverSocket::Connect(path_);
  ASSERT_TRUE(client.ok());
  auto server = listener->Accept(milliseconds(2000));
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  const UniqueFd pool = MemFd("the pool's bytes");
  const std::string big(3 << 20, 'x');  // more than one read's worth
  // Sent while the peer reads: a frame larger than the socket's buffer.
  auto sent = std::async(std::launch::async,
                         [&] { return server->Send(FrameType::kImage, big, pool.get()); });
  UniqueFd passed;
  auto got = client->Receive(FrameType::kImage, milliseconds(5000), big.size(), &passed);
  ASSERT_TRUE(sent.get().ok());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, big);
  ASSERT_TRUE(passed.valid());
  char bytes[16] = {};
  EXPECT_EQ(pread(passed.get(), bytes, sizeof(bytes), 0), 16);
  EXPECT_EQ(std::string(bytes, 16), "the pool's bytes") << "the same file, not a copy";

  // An empty frame; a frame of another type; one larger than allowed.
  ASSERT_TRUE(client->Send(FrameType::kAdopted, "").ok());
  EXPECT_EQ(*server->Receive(FrameType::kAdopted, milliseconds(2000), 0), "");
  ASSERT_TRUE(client->Send(FrameType::kHello, "hi").ok());
  EXPECT_EQ(server->Receive(FrameType::kAdopted, milliseconds(2000), 16).status().code(),
            ErrorCode::kMalformedRequest);
  ASSERT_TRUE(server->Send(FrameType::kVerdict, std::string(100, 'v')).ok());
  EXPECT_EQ(client->Receive(FrameType::kVerdict, milliseconds(2000), 99).status().code(),
            ErrorCode::kMalformedRequest);
}

TEST_F(TakeoverTest, SilenceTimesOutAndAClosedPeerIsReported) {
  auto listener = TakeoverListener::Listen(path_);
  ASSERT_TRUE(listener.ok());
  EXPECT_EQ(listener->Accept(milliseconds(50)).status().code(), ErrorCode::kTimeout);
  auto client = TakeoverSocket::Connect(path_);
  auto server = listener->Accept(milliseconds(2000));
  ASSERT_TRUE(client.ok() && server.ok());
  EXPECT_EQ(client->Receive(FrameType::kVerdict, milliseconds(50), 16).status().code(),
            ErrorCode::kTimeout);
  EXPECT_FALSE(client->WaitClosed(milliseconds(50)));
  *server = TakeoverSocket(UniqueFd());  // the peer goes
  EXPECT_EQ(client->Receive(FrameType::kVerdict, milliseconds(2000), 16).status().code(),
            ErrorCode::kUnavailable);
  EXPECT_TRUE(client->WaitClosed(milliseconds(2000)));
}

TEST_F(TakeoverTest, AStaleSocketFileIsReplacedALiveOneIsNot) {
  EXPECT_EQ(TakeoverSocket::Connect(path_).status().code(), ErrorCode::kNotFound);
  {
    auto first = TakeoverListener::Listen(path_);
    ASSERT_TRUE(first.ok());
    auto second = TakeoverListener::Listen(path_);
    EXPECT_EQ(second.status().code(), ErrorCode::kAlreadyExists);
    EXPECT_TRUE(std::filesystem::exists(path_)) << "the refused one removed the live file";
  }
  EXPECT_FALSE(std::filesystem::exists(path_)) << "the listener removes its file";
  // A dead server's file: bound, never removed.
  {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path_.c_str());
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  ASSERT_TRUE(std::filesystem::exists(path_));
  EXPECT_EQ(TakeoverSocket::Connect(path_).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(TakeoverListener::Listen(path_).ok());
}

TEST_F(TakeoverTest, NobodyToTakeOverFromIsAColdStart) {
  TakeoverHello hello;
  hello.geometry = Geometry();
  auto got = RequestTakeover(path_, hello, milliseconds(1000));
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
}

TEST_F(TakeoverTest, AMismatchedSuccessorIsRefusedAndThePredecessorServesOn) {
  std::atomic<int> woken{0};
  auto service = TakeoverService::Start(path_, Geometry(), [&] { woken += 1; });
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  TakeoverHello hello;
  hello.geometry = Geometry();
  hello.geometry.pool.pool_bytes *= 2;
  auto refused = RequestTakeover(path_, hello, milliseconds(5000));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--l1-size-gb"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("--takeover=if-compatible"), std::string::npos);
  EXPECT_EQ(woken.load(), 0);
  EXPECT_FALSE((*service)->Take().has_value());
  // Garbage from a stray peer is refused the same way.
  auto stray = TakeoverSocket::Connect(path_);
  ASSERT_TRUE(stray.ok());
  ASSERT_TRUE(stray->Send(FrameType::kHello, "not a hello").ok());
  auto verdict = stray->Receive(FrameType::kVerdict, milliseconds(5000), 1 << 16);
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(DecodeVerdict(*verdict)->verdict, Verdict::kRefused);
  EXPECT_EQ(woken.load(), 0);
}

TEST_F(TakeoverTest, AHandoverPassesTheSegmentAndTheImageAndWaitsForTheAcknowledgement) {
  std::promise<void> woken;
  auto service = TakeoverService::Start(path_, Geometry(), [&] { woken.set_value(); });
  ASSERT_TRUE(service.ok());
  TakeoverHello hello;
  hello.geometry = Geometry();
  hello.geometry.shm_name.clear();  // a successor without --shm-name takes ours
  auto successor = std::async(std::launch::async,
                              [&] { return RequestTakeover(path_, hello, milliseconds(10000)); });
  ASSERT_EQ(woken.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::optional<PendingTakeover> pending = (*service)->Take();
  ASSERT_TRUE(pending.has_value());
  EXPECT_FALSE(pending->cold);
  EXPECT_FALSE((*service)->Take().has_value()) << "one successor only";

  HandoverImage image;
  image.boot_id = "predecessor";
  image.shm_name = Geometry().shm_name;
  image.pool.table.resident = {{testing::KeyN(5), 4096, 100, false, std::nullopt}};
  const UniqueFd pool = MemFd("segment");
  auto handed = std::async(std::launch::async, [&] {
    return HandOver(*pending, pool.get(), image, milliseconds(10000));
  });
  auto inherited = successor.get();
  ASSERT_TRUE(inherited.ok()) << inherited.status().ToString();
  ASSERT_TRUE(inherited->has_value());
  Inheritance& inheritance = **inherited;
  EXPECT_TRUE(inheritance.segment.valid());
  EXPECT_EQ(inheritance.image.boot_id, "predecessor");
  EXPECT_EQ(inheritance.image.shm_name, Geometry().shm_name);
  ASSERT_EQ(inheritance.image.pool.table.resident.size(), 1u);
  EXPECT_EQ(inheritance.image.pool.table.resident[0].key, testing::KeyN(5));
  EXPECT_EQ(handed.wait_for(milliseconds(200)), std::future_status::timeout)
      << "the predecessor waits for the acknowledgement";
  ASSERT_TRUE(Acknowledge(inheritance).ok());
  EXPECT_TRUE(handed.get().ok());
}

TEST_F(TakeoverTest, ASuccessorThatAcceptsAColdStartWaitsForThePredecessorToGo) {
  std::promise<void> woken;
  auto service = TakeoverService::Start(path_, Geometry(), [&] { woken.set_value(); });
  ASSERT_TRUE(service.ok());
  TakeoverHello hello;
  hello.geometry = Geometry();
  hello.geometry.chunk_sizes = store::ChunkSizes(16);
  hello.cold_if_incompatible = true;
  auto successor = std::async(std::launch::async,
                              [&] { return RequestTakeover(path_, hello, milliseconds(10000)); });
  ASSERT_EQ(woken.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::optional<PendingTakeover> pending = (*service)->Take();
  ASSERT_TRUE(pending.has_value());
  EXPECT_TRUE(pending->cold);
  EXPECT_NE(pending->mismatch.find("--chunk-size"), std::string::npos);
  ASSERT_TRUE(HandOver(*pending, -1, {}, milliseconds(1000)).ok());
  EXPECT_EQ(successor.wait_for(milliseconds(200)), std::future_status::timeout)
      << "the successor starts only once the predecessor has exited";
  pending.reset();  // its end closes as its process exits
  auto cold = successor.get();
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_FALSE(cold->has_value());
}

}  // namespace
}  // namespace lmcache::restart
