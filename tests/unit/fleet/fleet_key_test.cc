// FleetKey: which key files are refused and why, that the derived CURVE
// pairs are stable and differ per key, and that only the member pair's
// public key is accepted.
#include "fleet/fleet_key.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace lmcache::fleet {
namespace {

class FleetKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lmc_fleet_key_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes, mode_t mode) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string Refusal(const std::string& path) {
    auto key = FleetKey::Load(path);
    EXPECT_FALSE(key.ok()) << path;
    return key.ok() ? "" : key.status().message();
  }

  std::filesystem::path dir_;
};

const std::string kKeyA(32, 'a');

TEST_F(FleetKeyTest, LoadsA0600FileAndDerivesStableDistinctPairs) {
  auto key = FleetKey::Load(Write("a", kKeyA, 0600));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->server().public_z85.size(), 40u);
  EXPECT_EQ(key->client().secret_z85.size(), 40u);
  EXPECT_NE(key->server().public_z85, key->client().public_z85);
  // The same bytes always give the same pairs: every member derives them alone.
  auto again = FleetKey::FromBytes(std::vector<std::uint8_t>(kKeyA.begin(), kKeyA.end()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->server().secret_z85, key->server().secret_z85);
  EXPECT_EQ(again->client().public_z85, key->client().public_z85);
  EXPECT_EQ(again->fingerprint(), key->fingerprint());
  EXPECT_EQ(key->fingerprint().size(), 16u);
  // A key differing in one byte derives unrelated pairs.
  std::string other = kKeyA;
  other[31] = 'b';
  auto b = FleetKey::FromBytes(std::vector<std::uint8_t>(other.begin(), other.end()));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->server().public_z85, key->server().public_z85);
  EXPECT_NE(b->client().public_z85, key->client().public_z85);
  EXPECT_NE(b->fingerprint(), key->fingerprint());
  // The secret derives the public key (what ZMQ's CURVE will check).
  char derived[41] = {};
  ASSERT_EQ(zmq_curve_public(derived, key->client().secret_z85.c_str()), 0);
  EXPECT_EQ(derived, key->client().public_z85);
}

TEST_F(FleetKeyTest, AcceptsOnlyTheMemberPairsPublicKey) {
  auto key = FleetKey::FromBytes(std::vector<std::uint8_t>(kKeyA.begin(), kKeyA.end()));
  ASSERT_TRUE(key.ok());
  std::uint8_t member[32];
  zmq_z85_decode(member, key->client().public_z85.c_str());
  EXPECT_TRUE(key->IsMemberKey(member));
  std::uint8_t server[32];
  zmq_z85_decode(server, key->server().public_z85.c_str());
  EXPECT_FALSE(key->IsMemberKey(server));
  member[31] ^= 1;
  EXPECT_FALSE(key->IsMemberKey(member));
  EXPECT_FALSE(key->IsMemberKey(std::span<const std::uint8_t>(member, 31)));
}

TEST_F(FleetKeyTest, RefusesFilesOthersCanReadOrWrite) {
  for (mode_t mode : {0604, 0620, 0660, 0644, 0606}) {
    const std::string why = Refusal(Write("open" + std::to_string(mode), kKeyA, mode));
    EXPECT_NE(why.find("chmod"), std::string::npos) << why;
  }
  EXPECT_TRUE(FleetKey::Load(Write("ro", kKeyA, 0400)).ok());
}

// A Kubernetes Secret: the mounted name is a link to a link to the file,
// which root owns, mode 0400, or 0440 with fsGroup.
TEST_F(FleetKeyTest, FollowsLinksAsASecretMountIsMadeAndChecksTheFile) {
  std::filesystem::create_directories(dir_ / "..2026_11_28" );
  const std::string target = Write("..2026_11_28/fleet.key", kKeyA, 0400);
  std::filesystem::create_directory_symlink(dir_ / "..2026_11_28", dir_ / "..data");
  std::filesystem::create_symlink(dir_ / "..data" / "fleet.key", dir_ / "fleet.key");
  ASSERT_TRUE(FleetKey::Load((dir_ / "fleet.key").string()).ok());
  ::chmod(target.c_str(), 0644);
  EXPECT_NE(Refusal((dir_ / "fleet.key").string()).find("chmod"), std::string::npos);
}

// Root's file may be group-readable; anyone else's may not, and a file of
// another user is refused (the tests run as root when CI does: the checks
// that need another uid run only then).
TEST_F(FleetKeyTest, OwnershipDecidesWhatModeIsAccepted) {
  const std::string path = Write("owned", kKeyA, 0440);
  if (::geteuid() == 0) {
    EXPECT_TRUE(FleetKey::Load(path).ok());  // root's, group-readable
    ::chmod(path.c_str(), 0460);
    EXPECT_NE(Refusal(path).find("chmod 440"), std::string::npos);
    ::chmod(path.c_str(), 0600);
    ASSERT_EQ(::chown(path.c_str(), 12345, 12345), 0);
    EXPECT_NE(Refusal(path).find("uid 12345"), std::string::npos);
  } else {
    EXPECT_NE(Refusal(path).find("chmod 600"), std::string::npos);  // ours: no group bits
  }
}

TEST_F(FleetKeyTest, RefusesShortOrHugeKeysMissingFilesAndDirectories) {
  const std::string short_why = Refusal(Write("short", std::string(31, 'k'), 0600));
  EXPECT_NE(short_why.find("31 bytes"), std::string::npos) << short_why;
  EXPECT_NE(short_why.find("/dev/urandom"), std::string::npos) << short_why;
  Refusal(Write("huge", std::string(kMaxFleetKeyBytes + 1, 'k'), 0600));
  const std::string missing = Refusal((dir_ / "missing").string());
  EXPECT_NE(missing.find("--p2p-auth-key-file"), std::string::npos) << missing;
  Refusal(dir_.string());
  EXPECT_FALSE(FleetKey::FromBytes(std::vector<std::uint8_t>(16, 1)).ok());
}

}  // namespace
}  // namespace lmcache::fleet
