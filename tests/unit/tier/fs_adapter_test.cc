// FsAdapter: durable, verified files; the index survives a restart; damaged,
// partial and stray files are misses and are removed, never served; a full,
// read-only or deleted directory costs stores, is logged once, and recovers.
#include "tier/fs_adapter.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "fakes/keys.h"
#include "tier/fs_key_codec.h"

namespace lmcache::tier {
namespace {

namespace fs = std::filesystem;
using testing::KeyN;

constexpr std::size_t kObject = 64 * 1024;

// Page-aligned bytes, as an L1 buffer is (so O_DIRECT can be used).
struct Buffer {
  explicit Buffer(std::size_t n, int seed = 0)
      : data(static_cast<std::byte*>(std::aligned_alloc(4096, n))), size(n) {
    for (std::size_t i = 0; i < n; ++i) data[i] = std::byte(static_cast<unsigned char>(i * 13 + seed));
  }
  ~Buffer() { std::free(data); }
  std::span<std::byte> span() { return {data, size}; }
  std::byte* data;
  std::size_t size;
};

class FsAdapterTest : public ::testing::Test {
 protected:
  FsAdapterTest() {
    dir_ = fs::temp_directory_path() / ("lmcache_fs_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    config_.base_path = dir_;
  }
  ~FsAdapterTest() override { fs::remove_all(dir_); }

  std::unique_ptr<FsAdapter> Open() {
    auto adapter = FsAdapter::Create(config_);
    EXPECT_TRUE(adapter.ok()) << adapter.status().ToString();
    return adapter.ok() ? std::move(adapter).value() : nullptr;
  }
  static Status StoreOne(FsAdapter& a, const store::ObjectKey& key, Buffer& b) {
    const std::vector<L2Write> writes = {{&key, b.span()}};
    return a.Store(writes)[0];
  }
  static L2LoadOutcome LoadOne(FsAdapter& a, const store::ObjectKey& key, Buffer& out) {
    const std::vector<L2Read> reads = {{&key, out.span()}};
    return a.Load(reads)[0];
  }

  fs::path dir_;
  FsAdapterConfig config_;
};

TEST_F(FsAdapterTest, StoresFilesUnderTheirNamesAndLoadsIdenticalBytes) {
  for (const bool direct : {false, true}) {
    config_.use_odirect = direct;
    auto adapter = Open();
    const auto key = KeyN(direct ? 2 : 1, "org/model");
    Buffer in(kObject, 5);
    ASSERT_TRUE(StoreOne(*adapter, key, in).ok());
    EXPECT_TRUE(fs::exists(dir_ / ObjectFileName(key)));
    EXPECT_TRUE(fs::is_empty(dir_ / ".tmp"));  // nothing left half-written
    Buffer out(kObject, 99);
    EXPECT_EQ(LoadOne(*adapter, key, out), L2LoadOutcome::kLoaded) << "direct " << direct;
    EXPECT_EQ(std::memcmp(out.data, in.data, kObject), 0);
  }
}

TEST_F(FsAdapterTest, ARestartedAdapterRebuildsItsIndexAndServesWhatWasStored) {
  std::vector<store::ObjectKey> keys = testing::KeysN(0, 20);
  {
    auto adapter = Open();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Buffer in(kObject, static_cast<int>(i));
      ASSERT_TRUE(StoreOne(*adapter, keys[i], in).ok());
    }
  }
  auto again = Open();
  EXPECT_EQ(again->rebuild_report().objects, 20u);
  EXPECT_EQ(again->rebuild_report().removed, 0u);
  EXPECT_EQ(again->LookupAndPin(keys), std::vector<bool>(20, true));
  again->Unpin(keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    Buffer expected(kObject, static_cast<int>(i));
    Buffer out(kObject, 77);
    ASSERT_EQ(LoadOne(*again, keys[i], out), L2LoadOutcome::kLoaded);
    EXPECT_EQ(std::memcmp(out.data, expected.data, kObject), 0);
  }
}

TEST_F(FsAdapterTest, FlippedOrTruncatedFilesAreMissesAndAreDeletedNeverServed) {
  auto adapter = Open();
  const auto flipped = KeyN(1);
  const auto truncated = KeyN(2);
  Buffer in(kObject);
  ASSERT_TRUE(StoreOne(*adapter, flipped, in).ok());
  ASSERT_TRUE(StoreOne(*adapter, truncated, in).ok());
  {
    std::fstream f(dir_ / ObjectFileName(flipped), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x42');
  }
  fs::resize_file(dir_ / ObjectFileName(truncated), 5000);
  Buffer out(kObject);
  EXPECT_EQ(LoadOne(*adapter, flipped, out), L2LoadOutcome::kCorrupt);
  EXPECT_EQ(LoadOne(*adapter, truncated, out), L2LoadOutcome::kCorrupt);
  EXPECT_FALSE(fs::exists(dir_ / ObjectFileName(flipped)));
  EXPECT_FALSE(fs::exists(dir_ / ObjectFileName(truncated)));
  EXPECT_EQ(LoadOne(*adapter, flipped, out), L2LoadOutcome::kMissing);
  EXPECT_EQ(adapter->Stats().checksum_failures, 2u);
}

TEST_F(FsAdapterTest, StartupRemovesPartialForeignAndTemporaryFiles) {
  const auto good = KeyN(1);
  const auto cut = KeyN(2);
  const auto moved = KeyN(3);
  {
    auto adapter = Open();
    Buffer in(kObject);
    for (const auto& key : {good, cut, moved}) ASSERT_TRUE(StoreOne(*adapter, key, in).ok());
  }
  fs::resize_file(dir_ / ObjectFileName(cut), kObject / 2);  // a crash mid-copy by a tool
  fs::rename(dir_ / ObjectFileName(moved), dir_ / ObjectFileName(KeyN(4)));  // wrong name
  std::ofstream(dir_ / ".tmp" / "123-7.tmp") << "half a write";
  std::ofstream(dir_ / "garbage.data") << "not an object";
  std::ofstream(dir_ / "README") << "an operator's note stays";
  auto adapter = Open();
  EXPECT_EQ(adapter->rebuild_report().objects, 1u);
  EXPECT_EQ(adapter->rebuild_report().removed, 4u);
  EXPECT_TRUE(fs::exists(dir_ / "README"));
  EXPECT_TRUE(fs::is_empty(dir_ / ".tmp"));
  const std::vector<store::ObjectKey> keys = {good, cut, moved, KeyN(4)};
  EXPECT_EQ(adapter->LookupAndPin(keys), (std::vector<bool>{true, false, false, false}));
}

TEST_F(FsAdapterTest, CapacityEvictsTheLeastRecentlyUsedFiles) {
  config_.max_size_bytes = 3 * (kObject + 512);
  auto adapter = Open();
  Buffer in(kObject);
  for (std::uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(StoreOne(*adapter, KeyN(i), in).ok());
  EXPECT_EQ(adapter->Stats().objects, 3u);
  EXPECT_EQ(adapter->Stats().evicted_objects, 2u);
  EXPECT_FALSE(fs::exists(dir_ / ObjectFileName(KeyN(0))));
  EXPECT_TRUE(fs::exists(dir_ / ObjectFileName(KeyN(4))));
  // And across a restart with a smaller capacity, the oldest go first.
  adapter.reset();
  config_.max_size_bytes = kObject + 512;
  auto smaller = Open();
  EXPECT_EQ(smaller->Stats().objects, 1u);
}

TEST_F(FsAdapterTest, ADeletedDirectoryIsRecreatedAtTheNextStore) {
  auto adapter = Open();
  Buffer in(kObject);
  ASSERT_TRUE(StoreOne(*adapter, KeyN(1), in).ok());
  fs::remove_all(dir_);
  Buffer out(kObject);
  EXPECT_EQ(LoadOne(*adapter, KeyN(1), out), L2LoadOutcome::kMissing);
  EXPECT_TRUE(StoreOne(*adapter, KeyN(2), in).ok());
  EXPECT_EQ(LoadOne(*adapter, KeyN(2), out), L2LoadOutcome::kLoaded);
  EXPECT_EQ(adapter->Stats().condition, "");
}

// A small tmpfs of our own: full and read-only for real (needs root and mount rights).
class FsConditionTest : public FsAdapterTest {
 protected:
  void SetUp() override {
    fs::create_directories(dir_);
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=256k") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                   << "): the full-disk and read-only checks need root with mount rights";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted_ = false;
};

TEST_F(FsConditionTest, AFullDiskCostsStoresIsReportedOnceAndRecovers) {
  auto adapter = Open();
  Buffer in(kObject);
  int stored = 0;
  Status last;
  for (std::uint64_t i = 0; i < 10 && (last = StoreOne(*adapter, KeyN(i), in)).ok(); ++i) ++stored;
  EXPECT_LT(stored, 4);  // 256 KiB holds three 64 KiB objects
  EXPECT_EQ(last.code(), ErrorCode::kIoError);
  EXPECT_EQ(adapter->Stats().condition, "disk full");
  EXPECT_TRUE(fs::is_empty(dir_ / ".tmp"));  // the failed write left nothing behind
  Buffer out(kObject);
  EXPECT_EQ(LoadOne(*adapter, KeyN(0), out), L2LoadOutcome::kLoaded);  // still serving
  ASSERT_EQ(::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, "size=1m"), 0);
  EXPECT_TRUE(StoreOne(*adapter, KeyN(50), in).ok());
  EXPECT_EQ(adapter->Stats().condition, "");
  EXPECT_GE(adapter->Stats().store_failures, 1u);
}

TEST_F(FsConditionTest, AReadOnlyDirectoryCostsStoresAndRecovers) {
  auto adapter = Open();
  Buffer in(kObject);
  ASSERT_TRUE(StoreOne(*adapter, KeyN(1), in).ok());
  ASSERT_EQ(::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k"), 0);
  EXPECT_FALSE(StoreOne(*adapter, KeyN(2), in).ok());
  EXPECT_FALSE(StoreOne(*adapter, KeyN(3), in).ok());
  EXPECT_EQ(adapter->Stats().condition, "directory not writable");
  Buffer out(kObject);
  EXPECT_EQ(LoadOne(*adapter, KeyN(1), out), L2LoadOutcome::kLoaded);
  ASSERT_EQ(::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, "size=256k"), 0);
  EXPECT_TRUE(StoreOne(*adapter, KeyN(2), in).ok());
  EXPECT_EQ(adapter->Stats().condition, "");
}

}  // namespace
}  // namespace lmcache::tier
