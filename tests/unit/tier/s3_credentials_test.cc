#include "tier/s3/s3_credentials.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "fakes/temp_dir.h"

namespace lmcache::tier {
namespace {

EnvironmentLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(S3CredentialsTest, ConfigWinsOverEnvironment) {
  auto r = ResolveS3Credentials(
      {"CID", "CSECRET", ""}, Env({{"AWS_ACCESS_KEY_ID", "EID"}, {"AWS_SECRET_ACCESS_KEY", "E"}}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->credentials.access_key_id, "CID");
  EXPECT_EQ(r->source, "config");
}

TEST(S3CredentialsTest, EnvironmentWithSessionToken) {
  auto r = ResolveS3Credentials({}, Env({{"AWS_ACCESS_KEY_ID", "EID"},
                                         {"AWS_SECRET_ACCESS_KEY", "ES"},
                                         {"AWS_SESSION_TOKEN", "TOK"}}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->credentials.secret_access_key, "ES");
  EXPECT_EQ(r->credentials.session_token, "TOK");
  EXPECT_EQ(r->source, "environment");
}

TEST(S3CredentialsTest, HalfAPairIsRefusedNamingTheMissingHalf) {
  auto config = ResolveS3Credentials({"CID", "", ""}, Env({}));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("aws_secret_access_key is missing"), std::string::npos);
  auto env = ResolveS3Credentials({}, Env({{"AWS_SECRET_ACCESS_KEY", "x"}}));
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("AWS_ACCESS_KEY_ID is missing"), std::string::npos);
}

TEST(S3CredentialsTest, CredentialsFileProfile) {
  lmcache::testing::TempDir dir("s3_credentials_test");
  const std::string path = (dir.path() / "credentials").string();
  std::ofstream(path) << "# comment\n[default]\naws_access_key_id = DID\n"
                         "aws_secret_access_key=DS\n\n[ceph] \n aws_access_key_id=PID\r\n"
                         "aws_secret_access_key = PS\naws_session_token = PT\n";
  auto d = ResolveS3Credentials({}, Env({{"AWS_SHARED_CREDENTIALS_FILE", path}}));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->credentials.access_key_id, "DID");
  EXPECT_EQ(d->source, path + " [default]");
  auto p = ResolveS3Credentials(
      {}, Env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "ceph"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->credentials.access_key_id, "PID");
  EXPECT_EQ(p->credentials.secret_access_key, "PS");
  EXPECT_EQ(p->credentials.session_token, "PT");
  // $HOME/.aws/credentials when no file is named.
  std::filesystem::create_directories(dir.path() / ".aws");
  std::filesystem::copy_file(path, dir.path() / ".aws" / "credentials");
  auto h = ResolveS3Credentials({}, Env({{"HOME", dir.path().string()}}));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->credentials.access_key_id, "DID");
}

TEST(S3CredentialsTest, NoneFoundSaysWhereToPutThem) {
  auto r = ResolveS3Credentials({}, Env({{"HOME", "/nonexistent"}, {"AWS_PROFILE", "p"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(r.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_NE(r.status().message().find("[p] section in /nonexistent/.aws/credentials"),
            std::string::npos);
  EXPECT_FALSE(ParseCredentialsFile("[a]\nx=1\n", "b").ok());
}

}  // namespace
}  // namespace lmcache::tier
