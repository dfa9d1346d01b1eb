// S3 credentials, resolved once at startup the way the AWS tools resolve
// them (first found wins):
//   1. the adapter's config: aws_access_key_id + aws_secret_access_key
//      (+ aws_session_token);
//   2. the environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
//      (+ AWS_SESSION_TOKEN);
//   3. the shared credentials file: AWS_SHARED_CREDENTIALS_FILE, else
//      $HOME/.aws/credentials, section AWS_PROFILE (else "default").
// A half-given pair (an id without a secret) is an error that says which
// half is missing, never a silent fall-through to the next source. The
// secret is never logged: `source` says where the keys came from.
//
// Thread-safety: pure functions (the environment is passed in).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "lmcache/status.h"
#include "tier/s3/sigv4.h"

namespace lmcache::tier {

struct ResolvedS3Credentials {
  S3Credentials credentials;
  std::string source;  // "config", "environment", "<file> [profile]"
};

// Reads an environment variable (null: unset).
using EnvironmentLookup = std::function<const char*(const char*)>;

Result<ResolvedS3Credentials> ResolveS3Credentials(const S3Credentials& from_config,
                                                   const EnvironmentLookup& environment);

// The [profile] section of an AWS credentials file's text: its
// aws_access_key_id, aws_secret_access_key and aws_session_token.
// kNotFound when the file has no such section.
Result<S3Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile);

}  // namespace lmcache::tier
