// UringReads: every read of a batch ends once, in its place, with all its
// bytes, the end of its file, or its error; short reads are continued; more
// reads than the ring's depth wait for room; several threads submit at once;
// the destructor waits for what is in flight. Pipes stand in for a file that
// returns less than asked (as a network filesystem may): their reads end
// short whenever the writer has written less.
#include "tier/fs/uring_reads.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace lmcache::tier {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<UringReads> Ring(unsigned rings, unsigned depth) {
  auto ring = UringReads::Create(rings, depth);
  if (!ring.ok()) ADD_FAILURE() << ring.status().ToString();
  return ring.ok() ? std::move(ring).value() : nullptr;
}

// A batch's results as its callbacks report them: each read once, then the
// batch; a read reported twice, or after the batch, is a failure.
struct Results {
  explicit Results(std::size_t reads) : of(reads, kNotYet) {}
  UringReads::ReadDone OnRead() {
    return [this](std::size_t i, int result) {
      EXPECT_FALSE(in_callback.exchange(true)) << "two callbacks of one batch at once";
      EXPECT_FALSE(ended) << "a read reported after its batch";
      EXPECT_EQ(of.at(i), kNotYet) << "read " << i << " reported twice";
      of.at(i) = result;
      in_callback = false;
    };
  }
  UringReads::BatchDone OnBatch() {
    return [this] {
      ended = true;
      done.set_value();
    };
  }
  static constexpr int kNotYet = 99;
  std::vector<int> of;
  std::atomic<bool> in_callback{false};
  bool ended = false;
  std::promise<void> done;
};

// Submits and waits for the batch's results.
std::vector<int> ReadAll(UringReads& ring, std::vector<UringReads::Read> reads) {
  Results results(reads.size());
  ring.Submit(std::move(reads), results.OnRead(), results.OnBatch());
  results.done.get_future().get();
  return results.of;
}

// A pipe whose reads return what was written so far.
struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_end = UniqueFd(fds[0]);
    write_end = UniqueFd(fds[1]);
  }
  UniqueFd read_end, write_end;
};

class UringReadsTest : public ::testing::Test {
 protected:
  UringReadsTest() {
    dir_ = fs::temp_directory_path() / ("lmcache_uring_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~UringReadsTest() override { fs::remove_all(dir_); }

  // A file of `size` bytes, byte i = i * 7 + seed; opened for reading.
  UniqueFd File(const std::string& name, std::size_t size, int seed) {
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 7 + seed);
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return UniqueFd(::open((dir_ / name).c_str(), O_RDONLY | O_CLOEXEC));
  }
  static bool Holds(std::span<const std::byte> got, std::size_t from, int seed) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != std::byte(static_cast<unsigned char>((from + i) * 7 + seed))) return false;
    }
    return true;
  }

  fs::path dir_;
};

TEST_F(UringReadsTest, ReadsHeaderAndPayloadOfEveryFileOfABatchDeeperThanTheRing) {
  auto ring = Ring(1, 4);
  ASSERT_NE(ring, nullptr);
  constexpr int kFiles = 40;
  constexpr std::size_t kHeader = 100, kPayload = 70000;
  std::vector<UniqueFd> fds;
  std::vector<std::vector<std::byte>> header(kFiles, std::vector<std::byte>(kHeader));
  std::vector<std::vector<std::byte>> payload(kFiles, std::vector<std::byte>(kPayload));
  std::vector<UringReads::Read> reads;
  for (int i = 0; i < kFiles; ++i) {
    fds.push_back(File(std::string("f").append(std::to_string(i)), kHeader + kPayload, i));
    const auto at = static_cast<std::size_t>(i);
    reads.push_back({fds.back().get(), {std::span(header[at]), std::span(payload[at])}});
  }
  const std::vector<int> results = ReadAll(*ring, std::move(reads));
  ASSERT_EQ(results.size(), static_cast<std::size_t>(kFiles));
  for (int i = 0; i < kFiles; ++i) {
    const auto at = static_cast<std::size_t>(i);
    EXPECT_EQ(results[at], 1) << i;
    EXPECT_TRUE(Holds(header[at], 0, i)) << i;
    EXPECT_TRUE(Holds(payload[at], kHeader, i)) << i;
  }
}

TEST_F(UringReadsTest, AShortFileEndsWithZeroAndABadFdWithItsErrno) {
  auto ring = Ring(1, 8);
  ASSERT_NE(ring, nullptr);
  UniqueFd whole = File("whole", 300, 1), cut = File("cut", 250, 2);
  std::vector<std::byte> h1(100), p1(200), h2(100), p2(200), h3(100), p3(200);
  const std::vector<int> results =
      ReadAll(*ring, {{whole.get(), {std::span(h1), std::span(p1)}},
                      {cut.get(), {std::span(h2), std::span(p2)}},
                      {-1, {std::span(h3), std::span(p3)}}});
  EXPECT_EQ(results, (std::vector<int>{1, 0, -EBADF}));
  EXPECT_TRUE(Holds(p1, 100, 1));
}

TEST_F(UringReadsTest, AReadThatEndsShortIsContinuedWhereItStopped) {
  auto ring = Ring(1, 2);
  ASSERT_NE(ring, nullptr);
  Pipe pipe;
  const int read_end = pipe.read_end.get(), write_end = pipe.write_end.get();
  std::string bytes(5000, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  std::vector<std::byte> header(64), payload(bytes.size() - 64);
  Results results(1);
  auto ended = results.done.get_future();
  ring->Submit({{read_end, {std::span(header), std::span(payload)}}}, results.OnRead(),
               results.OnBatch());
  // Four pieces, each ending inside a buffer or at its edge: every read but
  // the last returns short and is resubmitted for the rest.
  for (const auto& [from, to] : {std::pair<std::size_t, std::size_t>{0, 40}, {40, 64}, {64, 3000},
                                {3000, 5000}}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ended.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
    ASSERT_EQ(::write(write_end, bytes.data() + from, to - from),
              static_cast<ssize_t>(to - from));
  }
  ended.get();
  EXPECT_EQ(results.of, std::vector<int>{1});
  EXPECT_TRUE(Holds(header, 0, 3));
  EXPECT_TRUE(Holds(payload, 64, 3));
}

TEST_F(UringReadsTest, ThreadsSubmittingAtOnceEachGetTheirOwnBytes) {
  auto ring = Ring(2, 3);  // four threads over two rings of depth 3
  ASSERT_NE(ring, nullptr);
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<UniqueFd> fds;
  for (int t = 0; t < kThreads; ++t) fds.push_back(File(std::string("t").append(std::to_string(t)), 9000, t));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<std::vector<std::byte>> h(5, std::vector<std::byte>(1000)),
            p(5, std::vector<std::byte>(8000));
        std::vector<UringReads::Read> reads;
        for (std::size_t i = 0; i < 5; ++i) {
          reads.push_back({fds[static_cast<std::size_t>(t)].get(), {std::span(h[i]), std::span(p[i])}});
        }
        const std::vector<int> results = ReadAll(*ring, std::move(reads));
        for (std::size_t i = 0; i < 5; ++i) {
          if (results[i] != 1 || !Holds(h[i], 0, t) || !Holds(p[i], 1000, t)) wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(UringReadsTest, TheDestructorWaitsForTheReadsInFlightAndTheirCallback) {
  auto ring = Ring(2, 2);
  ASSERT_NE(ring, nullptr);
  Pipe pipe;
  const int read_end = pipe.read_end.get(), write_end = pipe.write_end.get();
  std::vector<std::byte> header(4), payload(4);
  std::atomic<bool> called{false};
  ring->Submit({{read_end, {std::span(header), std::span(payload)}}},
               [](std::size_t, int) {}, [&called] { called = true; });
  auto destroyed = std::async(std::launch::async, [&ring] { ring.reset(); });
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  ASSERT_EQ(::write(write_end, "12345678", 8), 8);
  destroyed.get();
  EXPECT_TRUE(called.load());
}

TEST_F(UringReadsTest, AnEmptyBatchAndAReadOfNothingCompleteAtOnce) {
  auto ring = Ring(1, 1);
  ASSERT_NE(ring, nullptr);
  EXPECT_TRUE(ReadAll(*ring, {}).empty());
  std::vector<std::byte> none;
  UniqueFd file = File("empty", 0, 0);
  EXPECT_EQ(ReadAll(*ring, {{file.get(), {std::span(none), std::span(none)}}}),
            std::vector<int>{1});  // a read of nothing has all its bytes
  EXPECT_EQ(UringReads::Create(0, 1).status().code(), ErrorCode::kInvalidConfig);
  EXPECT_EQ(UringReads::Create(1, 0).status().code(), ErrorCode::kInvalidConfig);
}

}  // namespace
}  // namespace lmcache::tier
