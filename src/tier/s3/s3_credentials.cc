#include "tier/s3/s3_credentials.h"

#include <fstream>
#include <sstream>

namespace lmcache::tier {
namespace {

std::string_view Trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

// OK when both halves are given or neither; names the missing half.
Status CheckPair(const S3Credentials& c, std::string_view where, std::string_view id_name,
                 std::string_view secret_name) {
  if (c.access_key_id.empty() == c.secret_access_key.empty()) return Status::Ok();
  const std::string_view missing = c.access_key_id.empty() ? id_name : secret_name;
  return Status(ErrorCode::kInvalidConfig, "S3 credentials in " + std::string(where) +
                                               " are incomplete: " + std::string(missing) +
                                               " is missing");
}

std::string Value(const EnvironmentLookup& environment, const char* name) {
  const char* value = environment(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

Result<S3Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile) {
  S3Credentials found;
  bool in_section = false;
  bool section_seen = false;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = Trim(text.substr(begin, end - begin));
    begin = end + 1;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_section = Trim(line.substr(1, line.size() - 2)) == profile;
      section_seen = section_seen || in_section;
      continue;
    }
    if (!in_section) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = Trim(line.substr(0, eq));
    const std::string value(Trim(line.substr(eq + 1)));
    if (name == "aws_access_key_id") found.access_key_id = value;
    if (name == "aws_secret_access_key") found.secret_access_key = value;
    if (name == "aws_session_token") found.session_token = value;
  }
  if (!section_seen) {
    return Status(ErrorCode::kNotFound, "no [" + std::string(profile) + "] section");
  }
  return found;
}

Result<ResolvedS3Credentials> ResolveS3Credentials(const S3Credentials& from_config,
                                                   const EnvironmentLookup& environment) {
  LMC_RETURN_IF_ERROR(
      CheckPair(from_config, "the adapter's config", "aws_access_key_id", "aws_secret_access_key"));
  if (!from_config.empty()) return ResolvedS3Credentials{from_config, "config"};

  S3Credentials env{Value(environment, "AWS_ACCESS_KEY_ID"),
                    Value(environment, "AWS_SECRET_ACCESS_KEY"),
                    Value(environment, "AWS_SESSION_TOKEN")};
  LMC_RETURN_IF_ERROR(
      CheckPair(env, "the environment", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"));
  if (!env.empty()) return ResolvedS3Credentials{env, "environment"};

  std::string path = Value(environment, "AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty()) {
    const std::string home = Value(environment, "HOME");
    if (!home.empty()) path = home + "/.aws/credentials";
  }
  std::string profile = Value(environment, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string none =
      "no S3 credentials: set aws_access_key_id and aws_secret_access_key in the adapter's "
      "config, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a [" +
      profile + "] section in " + (path.empty() ? "~/.aws/credentials" : path);
  std::ifstream file(path);
  if (path.empty() || !file) return Status(ErrorCode::kInvalidConfig, none);
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = ParseCredentialsFile(text.str(), profile);
  if (!parsed.ok()) return Status(ErrorCode::kInvalidConfig, none);
  const std::string where = path + " [" + profile + "]";
  LMC_RETURN_IF_ERROR(CheckPair(*parsed, where, "aws_access_key_id", "aws_secret_access_key"));
  if (parsed->empty()) return Status(ErrorCode::kInvalidConfig, none);
  return ResolvedS3Credentials{std::move(parsed).value(), where};
}

}  // namespace lmcache::tier
