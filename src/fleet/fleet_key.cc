#include "fleet/fleet_key.h"

#include <algorithm>

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"

namespace lmcache::fleet {
namespace {

using Digest = std::array<std::uint8_t, 32>;

// Labels of the derived keys: a new label (v2) is a new, unrelated key.
constexpr std::string_view kServerLabel = "lmcache p2p fleet endpoint server v1";
constexpr std::string_view kClientLabel = "lmcache p2p fleet endpoint client v1";
constexpr std::string_view kFingerprintLabel = "lmcache p2p fleet key fingerprint v1";
constexpr std::string_view kDataLabel = "lmcache p2p data channel read v1";

Digest Hmac(std::span<const std::uint8_t> key, std::string_view label) {
  Digest out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(label.data()), label.size(), out.data(), &length);
  return out;
}

std::string Z85(const Digest& bytes) {
  char text[41] = {};
  zmq_z85_encode(text, bytes.data(), bytes.size());
  return text;
}

Result<CurveKeyPair> PairFromSecret(const Digest& secret) {
  CurveKeyPair pair;
  pair.secret_z85 = Z85(secret);
  char public_text[41] = {};
  if (zmq_curve_public(public_text, pair.secret_z85.c_str()) != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("this libzmq cannot derive CURVE keys (built without libsodium?): ") +
                      zmq_strerror(zmq_errno()));
  }
  pair.public_z85 = public_text;
  return pair;
}

std::string Refusal(const std::string& path, std::string_view why) {
  return "--p2p-auth-key-file " + path + ": " + std::string(why);
}

}  // namespace

Result<FleetKey> FleetKey::FromBytes(std::span<const std::uint8_t> key) {
  if (key.size() < kMinFleetKeyBytes || key.size() > kMaxFleetKeyBytes) {
    return InvalidConfig("the fleet key has " + std::to_string(key.size()) +
                         " bytes; it must have 32 to 65536 (e.g. head -c 32 /dev/urandom)");
  }
  FleetKey fleet_key;
  fleet_key.passphrase_ = std::all_of(key.begin(), key.end(), [](std::uint8_t b) {
    return (b >= 0x20 && b < 0x7f) || b == '\n' || b == '\r' || b == '\t';
  });
  LMC_ASSIGN_OR_RETURN(fleet_key.server_, PairFromSecret(Hmac(key, kServerLabel)));
  LMC_ASSIGN_OR_RETURN(fleet_key.client_, PairFromSecret(Hmac(key, kClientLabel)));
  zmq_z85_decode(fleet_key.client_public_.data(), fleet_key.client_.public_z85.c_str());
  fleet_key.data_key_ = Hmac(key, kDataLabel);
  const Digest print = Hmac(key, kFingerprintLabel);
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < 8; ++i) {
    fleet_key.fingerprint_ += kHex[print[i] >> 4];
    fleet_key.fingerprint_ += kHex[print[i] & 0xf];
  }
  return fleet_key;
}

// Who may read the file: its owner and, for a file root owns, its group
// (a Kubernetes Secret mounted with fsGroup is root's, mode 0440); never
// others, and nobody but the owner may write it.
static Status CheckAccess(const std::string& path, const struct stat& info) {
  const bool ours = info.st_uid == ::geteuid();
  const bool roots = info.st_uid == 0;
  if (!ours && !roots) {
    return InvalidConfig(Refusal(path, "owned by uid " + std::to_string(info.st_uid) +
                                           ", neither this server's uid " +
                                           std::to_string(::geteuid()) + " nor root (chown it)"));
  }
  const mode_t forbidden = roots ? 027 : 077;  // a root-owned file may be group-readable
  if ((info.st_mode & forbidden) != 0) {
    return InvalidConfig(Refusal(path, roots ? "owned by root and writable by its group or "
                                               "open to others (chmod 440 it at most)"
                                             : "readable or writable by group or others (chmod "
                                               "600 it)"));
  }
  return Status::Ok();
}

Result<FleetKey> FleetKey::Load(const std::string& path) {
  // Symbolic links are followed (a Kubernetes Secret's file is a link into
  // its current version); what is checked is the file they lead to.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return InvalidConfig(Refusal(path, std::string("cannot open: ") + std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return InvalidConfig(Refusal(path, "not a regular file"));
  }
  LMC_RETURN_IF_ERROR(CheckAccess(path, info));
  if (info.st_size < static_cast<off_t>(kMinFleetKeyBytes) ||
      info.st_size > static_cast<off_t>(kMaxFleetKeyBytes)) {
    return InvalidConfig(Refusal(path, std::to_string(info.st_size) +
                                           " bytes; a fleet key has 32 to 65536 (e.g. head -c 32 "
                                           "/dev/urandom > FILE)"));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + filled, bytes.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return InvalidConfig(Refusal(path, "short read"));
    filled += static_cast<std::size_t>(n);
  }
  Result<FleetKey> key = FromBytes(bytes);
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return key;
}

bool FleetKey::IsMemberKey(std::span<const std::uint8_t> public_key) const {
  return public_key.size() == client_public_.size() &&
         CRYPTO_memcmp(public_key.data(), client_public_.data(), client_public_.size()) == 0;
}

}  // namespace lmcache::fleet
