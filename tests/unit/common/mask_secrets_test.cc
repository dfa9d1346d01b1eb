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
// holding '/', '@', ',', a space or a quote (it splits at the last @). A
// value is one URL: several joined into one text are masked as one, never
// less (the resp adapter masks each before joining them).
TEST(MaskSecretsTest, EveryFormOfUserInfoIsMaskedWhole) {
  EXPECT_EQ(MaskSecrets("redis://SECRET@h:6379"), "redis://***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:pa/ss@h:6379"), "redis://u:***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:p@ss@h:6379"), "redis://u:***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:Tr0ub4dor,3@h:6379"), "redis://u:***@h:6379");
  EXPECT_EQ(MaskSecrets("redis://u:a b'c@h:6379/2"), "redis://u:***@h:6379/2");
  EXPECT_EQ(MaskSecrets("resp:redis://a:b@h1:7000,redis://c@h2:7000,redis://h3:7000"),
            "resp:redis://a:***@h2:7000,redis://h3:7000");
}

// In JSON the strings are JSON's own: a ',' or an escaped quote inside a
// URL does not end it.
TEST(MaskSecretsTest, JsonStringsAreMaskedAsWholeUrls) {
  EXPECT_EQ(MaskSecrets(R"({"type":"resp","url":"redis://u:Tr0ub4dor,3@h:6379"})"),
            R"({"type":"resp","url":"redis://u:***@h:6379"})");
  EXPECT_EQ(MaskSecrets(R"({"url": ["redis://u:a\"b, c@h1:7000", "redis://x,y@h2"]})"),
            R"({"url": ["redis://u:***@h1:7000", "redis://***@h2"]})");
  EXPECT_EQ(MaskSecrets(R"({"token": ["a", "b"], "nested": {"url": "redis://p@h"}})"),
            R"({"token": ["***", "***"], "nested": {"url": "redis://***@h"}})");
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
