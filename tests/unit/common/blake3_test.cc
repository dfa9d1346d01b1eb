#include "common/blake3.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace lmcache {
namespace {

// b3sum (the BLAKE3 team's own tool) is the oracle. A missing b3sum is a failure, not a skip:
// otherwise a CI image without it would silently stop checking the digests.
constexpr const char* kInstallHint =
    "b3sum not found: install it (apt-get install b3sum, or tools/dev.sh) - the BLAKE3 tests "
    "use it as the reference implementation";

// Runs `command` through the shell; returns its stdout, or nullopt if it did not exit 0.
std::optional<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

// Path of the b3sum binary, or "" if it is not installed.
std::string FindB3sum() {
  if (std::filesystem::exists("/usr/bin/b3sum")) return "/usr/bin/b3sum";
  const auto found = RunCommand("command -v b3sum 2>/dev/null");
  if (!found || found->empty()) return "";
  return found->substr(0, found->find('\n'));
}

std::string ShellQuote(const std::string& s) {
  std::string quoted = "'";
  for (const char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A private temporary directory, removed with its contents when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "blake3_test.XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes `bytes` to a file in `dir` and returns b3sum's hex digest of it ("" on error).
std::string B3sumHex(const std::string& b3sum, const TempDir& dir,
                     std::span<const std::uint8_t> bytes) {
  const auto file = dir.path() / "input.bin";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) return "";
  }
  const auto out = RunCommand(ShellQuote(b3sum) + " --no-names " + ShellQuote(file.string()));
  if (!out || out->size() < 64) return "";
  return out->substr(0, 64);
}

std::vector<std::uint8_t> RandomBytes(std::mt19937& rng, std::size_t size) {
  std::vector<std::uint8_t> bytes(size);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  return bytes;
}

// Lengths around every block, chunk and tree boundary that has tripped implementations up:
// short last blocks, exactly full chunks (which must not be merged before Finalize), and
// non-power-of-two chunk counts. Plus random lengths from a fixed seed.
std::vector<std::size_t> OracleLengths() {
  std::vector<std::size_t> lengths = {0,     1,     63,    64,    65,     1023,      1024, 1025,
                                      2048,  2049,  3072,  4096,  4097,   5121,      8192, 16385,
                                      31744, 65536, 65537, 100000, 512 * 1024};
  std::mt19937 rng(0xB1A4E3);
  std::uniform_int_distribution<std::size_t> dist(0, 300000);
  for (int i = 0; i < 40; ++i) lengths.push_back(dist(rng));
  return lengths;
}

TEST(Blake3, EmptyInputHasTheWellKnownDigest) {
  EXPECT_EQ(ToHex(Blake3({})), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
  EXPECT_EQ(ToHex(Blake3Hasher().Finalize()), ToHex(Blake3({})));
}

TEST(Blake3, MatchesB3sumAcrossLengths) {
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kInstallHint;
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  std::mt19937 rng(20240601);
  int checked = 0;
  for (const std::size_t length : OracleLengths()) {
    const auto bytes = RandomBytes(rng, length);
    const std::string expected = B3sumHex(b3sum, dir, bytes);
    ASSERT_EQ(expected.size(), 64u) << "b3sum failed on length " << length << "; " << kInstallHint;
    EXPECT_EQ(ToHex(Blake3(bytes)), expected) << "length " << length;
    ++checked;
  }
  RecordProperty("lengths_checked", checked);
}

TEST(Blake3, TwelveZeroBytesMatchB3sum) {
  // The reference's NONE_HASH is the digest of 12 zero bytes.
  const std::vector<std::uint8_t> zeros(12, 0);
  const std::string ours = ToHex(Blake3(zeros));
  EXPECT_EQ(ours, "7e3eff9ef7613a50340eb12677ee03b83ac759fcba9bb32705f07248d56d473b");
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kInstallHint;
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  EXPECT_EQ(ours, B3sumHex(b3sum, dir, zeros));
}

TEST(Blake3, IncrementalUpdatesEqualOneShot) {
  std::mt19937 rng(7);
  for (const std::size_t length : {0u, 1u, 64u, 1024u, 1025u, 3072u, 70000u, 300001u}) {
    const auto bytes = RandomBytes(rng, length);
    const Blake3Digest expected = Blake3(bytes);
    // Piece sizes from empty to several chunks, so splits land everywhere relative to blocks.
    for (const std::size_t max_piece : {1u, 65u, 1100u, 5000u}) {
      std::uniform_int_distribution<std::size_t> piece(0, max_piece);
      Blake3Hasher hasher;
      std::size_t offset = 0;
      while (offset < length) {
        const std::size_t n = std::min(piece(rng), length - offset);
        hasher.Update(std::span(bytes).subspan(offset, n));
        offset += n;
      }
      EXPECT_EQ(hasher.Finalize(), expected) << "length " << length << " max_piece " << max_piece;
    }
  }
}

TEST(Blake3, FinalizeDoesNotModifyTheState) {
  std::mt19937 rng(11);
  const auto bytes = RandomBytes(rng, 9000);
  Blake3Hasher hasher;
  std::size_t offset = 0;
  for (const std::size_t n : {0u, 100u, 924u, 1024u, 1u, 2047u, 64u, 4840u}) {
    hasher.Update(bytes.data() + offset, n);
    offset += n;
    // Finalizing mid-stream gives the prefix's digest, and twice gives the same answer.
    EXPECT_EQ(hasher.Finalize(), Blake3(std::span(bytes).first(offset))) << offset;
    EXPECT_EQ(hasher.Finalize(), hasher.Finalize());
  }
  ASSERT_EQ(offset, bytes.size());
  EXPECT_EQ(hasher.Finalize(), Blake3(bytes));
}

TEST(Blake3, ResetReturnsToTheEmptyState) {
  std::mt19937 rng(13);
  const auto first = RandomBytes(rng, 5000);
  const auto second = RandomBytes(rng, 700);
  Blake3Hasher hasher;
  hasher.Update(first);
  hasher.Reset();
  EXPECT_EQ(hasher.Finalize(), Blake3({}));
  hasher.Update(second);
  EXPECT_EQ(hasher.Finalize(), Blake3(second));
}

TEST(Blake3, ToHexPrintsBytesInOrderInLowercase) {
  Blake3Digest digest{};
  digest[0] = 0xAB;
  digest[31] = 0x0F;
  const std::string hex = ToHex(digest);
  ASSERT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 2), "ab");
  EXPECT_EQ(hex.substr(62, 2), "0f");
}

}  // namespace
}  // namespace lmcache
