#include "fleet/ucx_descriptor.h"

#include "common/byte_codec.h"

namespace lmcache::fleet {
namespace {

constexpr char kMagic[4] = {'L', 'U', 'C', 'X'};
// 1 carried a remote key (never released); 2's read requests named no task.
// 4: read replies authenticated (issue 62; fleet/ucx_wire.h). A member of
// another version speaks another data channel: it is excluded at the handshake.
constexpr std::uint8_t kDescriptorVersion = 4;

}  // namespace

std::string UcxDescriptor::Encode() const {
  ByteWriter out;
  out.PutRaw(std::string_view(kMagic, sizeof(kMagic)));
  out.Put(kDescriptorVersion);
  out.PutString(worker_address);
  out.Put(size);
  return out.Take();
}

Result<UcxDescriptor> UcxDescriptor::Parse(std::string_view bytes) {
  ByteReader in(bytes, "UCX descriptor");
  std::string_view magic;
  std::uint8_t version = 0;
  if (!in.GetRaw(sizeof(kMagic), &magic, "magic").ok() ||
      magic != std::string_view(kMagic, sizeof(kMagic)) || !in.Get(&version, "version").ok()) {
    return Status(ErrorCode::kMalformedRequest, "not a UCX descriptor");
  }
  if (version != kDescriptorVersion) {
    return Status(ErrorCode::kNotSupported, "UCX descriptor version " + std::to_string(version) +
                                                " (this server reads " +
                                                std::to_string(kDescriptorVersion) + ")");
  }
  UcxDescriptor d;
  LMC_RETURN_IF_ERROR(in.GetString(&d.worker_address, "worker_address", kMaxWorkerAddressBytes));
  LMC_RETURN_IF_ERROR(in.Get(&d.size, "pool size"));
  LMC_RETURN_IF_ERROR(in.Finish());
  if (d.worker_address.empty()) return in.Bad("worker_address", "is empty");
  if (d.size == 0) return in.Bad("pool size", "is 0");
  return d;
}

}  // namespace lmcache::fleet
