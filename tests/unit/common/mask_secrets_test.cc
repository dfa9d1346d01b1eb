// MaskSecrets: what GET /config shows of a value. Passwords in URLs and JSON
// fields named as secrets are masked; the rest, and values with no secret,
// are kept byte for byte.
#include "common/mask_secrets.h"

#include <gtest/gtest.h>

namespace lmcache {
namespace {

TEST(MaskSecretsTest, AUrlsPasswordIsMaskedAndItsUserKept) {
  EXPECT_EQ(MaskSecrets("redis://admin:hunter2@10.0.0.5:6379/0"), "redis://admin:***@10.0.0.5:6379/0");
  EXPECT_EQ(MaskSecrets("redis://:hunter2@host:6379"), "redis://:***@host:6379");
  EXPECT_EQ(MaskSecrets(R"({"type":"resp","url":["redis://a:b@h1:7000","redis://h2:7000"]})"),
            R"({"type":"resp","url":["redis://a:***@h1:7000","redis://h2:7000"]})");
}

// The forms a resp URL's parser accepts: a password with no user, one
// holding '/' or '@' (it splits at the last @); several URLs in one value.
TEST(MaskSecretsTest, EveryFormOfUserInfoIsMaskedWhole) {
  EXPECT_EQ(MaskSecrets("redis://SECRET@h:6379"), "redis://***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:pa/ss@h:6379"), "redis://u:***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:p@ss@h:6379"), "redis://u:***@h:6379");
  EXPECT_EQ(MaskSecrets("resp:redis://a:b@h1:7000,redis://c@h2:7000,redis://h3:7000"),
            "resp:redis://a:***@h1:7000,redis://***@h2:7000,redis://h3:7000");
}

TEST(MaskSecretsTest, JsonFieldsNamedAsSecretsAreMasked) {
  EXPECT_EQ(MaskSecrets(R"({"type":"resp","password":"p\"w","Auth_Token": "t", "db": 1})"),
            R"({"type":"resp","password":"***","Auth_Token": "***", "db": 1})");
}

TEST(MaskSecretsTest, ValuesWithoutSecretsAreKept) {
  for (const char* kept : {"tcp://127.0.0.1:5555", "ipc:///run/lmcache/lmcache.sock",
                           R"({"type":"fs","base_path":"/var/cache/lmcache"})", "64", "",
                           "/etc/lmcache/fleet.key"}) {
    EXPECT_EQ(MaskSecrets(kept), kept);
  }
}

}  // namespace
}  // namespace lmcache
