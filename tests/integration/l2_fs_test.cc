// The fs L2 tier end to end, through the real server binary and the client:
// a prompt forced out of L1 comes back from disk byte for byte, also after a
// restart over the same directory; a flipped, a truncated and a temporary
// file are misses and are cleaned, never served.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fakes/client_stats.h"
#include "fakes/server_process.h"
#include "lmcache/client.h"
#include "worker/token_hasher.h"
#include "store/object_key.h"
#include "tier/fs/fs_key_codec.h"

namespace lmcache {
namespace {

namespace fs = std::filesystem;
using client::Client;
using client::ClientOptions;
using testing::ServerProcess;

constexpr std::size_t kChunk = 256;
constexpr std::size_t kChunks = 4;
const char* const kModel = "l2/test-model";

std::vector<std::uint32_t> Tokens() {
  std::vector<std::uint32_t> tokens(kChunk * kChunks);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i * 7 + 3);
  return tokens;
}

std::vector<std::byte> ChunkBytes(std::size_t c, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = std::byte(static_cast<unsigned char>(i * 31 + c * 101));
  return out;
}

// The file the fs adapter keeps chunk `c` of the test prompt in.
fs::path ChunkFile(const fs::path& dir, std::size_t c) {
  const auto tokens = Tokens();
  const auto hashes = worker::HashChunks(tokens, kChunk, 0, kChunks, worker::NoneHash());
  store::ObjectKey key{hashes[c], kModel, *store::PackKvRank(1, 0), 0, "", 0, ""};
  return dir / tier::ObjectFileName(key);
}

class L2FsTest : public ::testing::Test {
 protected:
  L2FsTest() {
    const std::string tag = std::to_string(::getpid());
    dir_ = fs::temp_directory_path() / ("lmcache_l2_e2e_" + tag);
    fs::remove_all(dir_);
    url_ = "ipc://" + (fs::temp_directory_path() / ("lmcache_l2_e2e_" + tag + ".sock")).string();
  }
  ~L2FsTest() override { fs::remove_all(dir_); }

  std::unique_ptr<ServerProcess> Start() {
    auto server = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--l1-size-gb", "0.25", "--url", url_, "--port", "0", "--prefault-threads", "1",
        "--l2-adapter", R"({"type":"fs","base_path":")" + dir_.string() + R"("})"});
    EXPECT_TRUE(server->WaitForLog("ready", std::chrono::seconds(60))) << server->Log();
    return server;
  }
  std::unique_ptr<Client> Connect() { return testing::ConnectWorker(url_, 1, kModel, 2, 64); }
  client::KeySpec Key(const std::string& request) const {
    client::KeySpec key;
    key.model_name = kModel;
    key.token_ids = Tokens();
    key.end = static_cast<std::int64_t>(kChunk * kChunks);
    key.request_id = request;
    return key;
  }
  static std::uint64_t StoreStat(Client& c, std::string_view field) {
    return testing::StatsField(c, {"l2", "store", field});
  }
  // Until the L2 tier has written all kChunks behind. The bound only guards a
  // hang (callers assert the count afterwards), so it allows for a sanitizer
  // build beside CPU-bound neighbours.
  static void WaitStored(Client& c) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (StoreStat(c, "stored") < kChunks && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Looks the prompt up in a new session and retrieves the prefix found; every byte must match.
  std::size_t LookupAndCheck(Client& c, const std::string& request) {
    client::KeySpec key = Key(request);
    auto hits = c.Lookup(key);
    EXPECT_TRUE(hits.ok()) << hits.status().ToString();
    if (!hits.ok() || *hits == 0) return 0;
    key.end = static_cast<std::int64_t>(*hits * kChunk);
    std::vector<std::vector<std::byte>> out(*hits, std::vector<std::byte>(c.ObjectBytes()));
    std::vector<std::span<std::byte>> spans(out.begin(), out.end());
    EXPECT_TRUE(c.Retrieve(key, spans).ok());
    for (std::size_t i = 0; i < *hits; ++i) EXPECT_EQ(out[i], ChunkBytes(i, c.ObjectBytes())) << i;
    (void)c.EndSession(request);
    return *hits;
  }
  static void Stop(ServerProcess& server) {
    kill(server.pid(), SIGTERM);
    EXPECT_EQ(server.WaitExit(std::chrono::seconds(30)), 0) << server.Log();
  }

  fs::path dir_;
  std::string url_;
};

TEST_F(L2FsTest, APromptForcedOutOfL1ComesBackFromDiskAlsoAfterARestart) {
  {
    auto server = Start();
    auto c = Connect();
    std::vector<std::vector<std::byte>> chunks;
    for (std::size_t i = 0; i < kChunks; ++i) chunks.push_back(ChunkBytes(i, c->ObjectBytes()));
    std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
    ASSERT_TRUE(c->Store(Key("store"), in).ok());
    WaitStored(*c);
    ASSERT_EQ(StoreStat(*c, "stored"), kChunks);
    for (std::size_t i = 0; i < kChunks; ++i) EXPECT_TRUE(fs::exists(ChunkFile(dir_, i))) << i;
    ASSERT_TRUE(c->Call("clear", {}).ok());  // out of L1
    ASSERT_EQ(testing::StatsField(*c, {"l1", "resident_objects"}), 0u);
    EXPECT_EQ(LookupAndCheck(*c, "after-clear"), kChunks);
    EXPECT_EQ(testing::StatsField(*c, {"l1", "tier_admitted_objects"}), kChunks);  // loaded from disk
    EXPECT_EQ(StoreStat(*c, "stored"), kChunks);  // and not written back
    Stop(*server);
  }
  auto restarted = Start();
  EXPECT_NE(restarted->Log().find("4 objects"), std::string::npos) << restarted->Log();
  auto c = Connect();
  EXPECT_EQ(LookupAndCheck(*c, "after-restart"), kChunks);
  Stop(*restarted);
}

TEST_F(L2FsTest, FlippedTruncatedAndTemporaryFilesAreMissesAndAreCleanedNeverServed) {
  {
    auto server = Start();
    auto c = Connect();
    std::vector<std::vector<std::byte>> chunks;
    for (std::size_t i = 0; i < kChunks; ++i) chunks.push_back(ChunkBytes(i, c->ObjectBytes()));
    std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
    ASSERT_TRUE(c->Store(Key("store"), in).ok());
    WaitStored(*c);
    ASSERT_EQ(StoreStat(*c, "stored"), kChunks);
    Stop(*server);
  }
  {  // chunk 2 flipped in its payload, chunk 3 truncated, a write cut short
    std::fstream f(ChunkFile(dir_, 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x7f');
  }
  fs::resize_file(ChunkFile(dir_, 3), fs::file_size(ChunkFile(dir_, 3)) - 1);
  std::ofstream(dir_ / ".tmp" / "999-1.tmp") << "partial";
  auto server = Start();
  EXPECT_FALSE(fs::exists(ChunkFile(dir_, 3)));  // removed by the index rebuild
  EXPECT_TRUE(fs::is_empty(dir_ / ".tmp"));
  auto c = Connect();
  EXPECT_EQ(LookupAndCheck(*c, "damaged"), 2u);  // chunks 0-1 only: 2 fails its checksum
  EXPECT_FALSE(fs::exists(ChunkFile(dir_, 2)));  // deleted when the load found it damaged
  EXPECT_TRUE(fs::exists(ChunkFile(dir_, 0)));
  Stop(*server);
}

}  // namespace
}  // namespace lmcache
