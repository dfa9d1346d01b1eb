#include "daemon/endpoints.h"

#include <filesystem>
#include <optional>

namespace lmcache::daemon {
namespace {

// Where an endpoint binds, in a form two spellings of one address share.
struct BindPoint {
  enum class Kind { kPath, kTcp } kind = Kind::kPath;
  std::string path_or_host;
  std::string port;  // tcp only
};

std::string NormalPath(const std::string& path) {
  if (path.starts_with("@")) return path;  // a Linux abstract socket name, not a file
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return std::filesystem::path(path).lexically_normal().string();
  // weakly_canonical resolves the links of the parts that exist already.
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, ec);
  return (ec ? absolute.lexically_normal() : canonical).string();
}

bool IsWildcardHost(const std::string& host) {
  return host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

bool IsEphemeralPort(const std::string& port) { return port.empty() || port == "*" || port == "0"; }

// nullopt for what binds nothing we can compare (another transport).
std::optional<BindPoint> BindPointOf(const std::string& address) {
  if (address.starts_with("ipc://")) {
    return BindPoint{BindPoint::Kind::kPath, NormalPath(address.substr(6)), ""};
  }
  if (address.starts_with("unix:")) {
    return BindPoint{BindPoint::Kind::kPath, NormalPath(address.substr(5)), ""};
  }
  if (!address.starts_with("tcp://")) return std::nullopt;
  const std::string rest = address.substr(6);
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = rest.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  return BindPoint{BindPoint::Kind::kTcp, host, rest.substr(colon + 1)};
}

bool SameAddress(const BindPoint& a, const BindPoint& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == BindPoint::Kind::kPath) return a.path_or_host == b.path_or_host;
  if (IsEphemeralPort(a.port) || IsEphemeralPort(b.port) || a.port != b.port) return false;
  return a.path_or_host == b.path_or_host || IsWildcardHost(a.path_or_host) ||
         IsWildcardHost(b.path_or_host);
}

std::string Describe(const BindPoint& point) {
  if (point.kind == BindPoint::Kind::kPath) return "the socket file " + point.path_or_host;
  return "tcp port " + point.port;
}

}  // namespace

Status RefuseSharedEndpoints(const std::vector<NamedEndpoint>& endpoints) {
  std::vector<std::optional<BindPoint>> points;
  points.reserve(endpoints.size());
  for (const NamedEndpoint& endpoint : endpoints) points.push_back(BindPointOf(endpoint.address));
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    for (std::size_t j = i + 1; j < endpoints.size(); ++j) {
      if (!points[i] || !points[j] || !SameAddress(*points[i], *points[j])) continue;
      const NamedEndpoint& a = endpoints[i];
      const NamedEndpoint& b = endpoints[j];
      const std::string who = a.flag == b.flag ? a.flag + " is given twice with"
                                                : a.flag + " and " + b.flag + " name";
      return InvalidConfig(who + " the same address (" + a.address + " and " + b.address + ": " +
                           Describe(*points[i]) +
                           "); each endpoint of a server needs an address of its own: change "
                           "one of them");
    }
  }
  return Status::Ok();
}

}  // namespace lmcache::daemon
