#include "fleet/ucx_descriptor.h"

namespace lmcache::fleet {
namespace {

constexpr char kMagic[4] = {'L', 'U', 'C', 'X'};
constexpr std::uint8_t kDescriptorVersion = 2;  // 1 carried a remote key (never released)

void PutU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Reads little-endian fields from an untrusted byte string, failing on a short one.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool Take(std::size_t n, std::string_view* out) {
    if (bytes_.size() < n) return false;
    *out = bytes_.substr(0, n);
    bytes_.remove_prefix(n);
    return true;
  }
  template <typename T>
  bool Int(T* out) {
    std::string_view raw;
    if (!Take(sizeof(T), &raw)) return false;
    *out = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      *out |= static_cast<T>(static_cast<unsigned char>(raw[i])) << (8 * i);
    }
    return true;
  }
  bool Blob(std::string* out) {
    std::uint32_t length = 0;
    std::string_view raw;
    if (!Int(&length) || length == 0 || length > kMaxWorkerAddressBytes || !Take(length, &raw)) return false;
    out->assign(raw);
    return true;
  }
  bool empty() const { return bytes_.empty(); }

 private:
  std::string_view bytes_;
};

}  // namespace

std::string UcxDescriptor::Encode() const {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(kDescriptorVersion));
  PutU32(out, static_cast<std::uint32_t>(worker_address.size()));
  out += worker_address;
  PutU64(out, size);
  return out;
}

Result<UcxDescriptor> UcxDescriptor::Parse(std::string_view bytes) {
  Reader in(bytes);
  std::string_view magic;
  std::uint8_t version = 0;
  UcxDescriptor d;
  if (!in.Take(sizeof(kMagic), &magic) || magic != std::string_view(kMagic, sizeof(kMagic)) ||
      !in.Int(&version)) {
    return Status(ErrorCode::kMalformedRequest, "not a UCX descriptor");
  }
  if (version != kDescriptorVersion) {
    return Status(ErrorCode::kNotSupported, "UCX descriptor version " + std::to_string(version) +
                                                " (this server reads " +
                                                std::to_string(kDescriptorVersion) + ")");
  }
  if (!in.Blob(&d.worker_address) || !in.Int(&d.size) || !in.empty()) {
    return Status(ErrorCode::kMalformedRequest,
                  "a UCX descriptor's fields are missing, empty, over 64 KiB or trailed by bytes");
  }
  if (d.size == 0) return Status(ErrorCode::kMalformedRequest, "a UCX descriptor's pool is empty");
  return d;
}

}  // namespace lmcache::fleet
