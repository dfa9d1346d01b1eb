#include "protocol/device_ipc_wrapper.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "protocol/pickle_reader.h"

namespace lmcache::protocol {
namespace {

using Index = PickleTree::Index;
using Kind = PickleTree::Kind;

constexpr std::string_view kIpcModule = "lmcache.v1.platform.cuda.ipc_wrapper";
constexpr std::string_view kOldIpcModule = "lmcache.v1.multiprocess.custom_types";
constexpr std::uint64_t kMaxExtent = std::uint64_t{1} << 48;  // 256 TiB: no real tensor is larger
constexpr std::uint64_t kPast = kMaxExtent + 1;                 // what a larger extent reads as

struct DtypeRow {
  std::string_view name;
  std::uint32_t size;
};
// torch.<dtype> pickles as a global of its canonical name.
constexpr DtypeRow kDtypes[] = {
    {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8},
    {"int8", 1},    {"uint8", 1},    {"int16", 2},   {"int32", 4},
    {"int64", 8},   {"bool", 1},     {"float8_e4m3fn", 1}, {"float8_e5m2", 1},
    {"float8_e4m3fnuz", 1}, {"float8_e5m2fnuz", 1},
};

bool AcceptGlobal(std::string_view module, std::string_view name) {
  if (module == "torch") return TorchDtypeSize(name).has_value();
  if (module == kIpcModule) return name == "CudaIPCWrapper" || name == "RawCudaIPCWrapper";
  if (module == kOldIpcModule) return name == "CudaIPCWrapper";
  return module == "_codecs" && name == "encode";  // how protocol 2 writes bytes
}

Status Bad(std::string message) {
  return Status(ErrorCode::kMalformedRequest, "device IPC wrapper: " + std::move(message));
}

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kObject: return "object";
  }
  return "?";
}

// Reads the fields of one wrapper's state dict, each checked for its type.
class StateReader {
 public:
  StateReader(const PickleTree& tree, Index state) : tree_(tree), state_(state) {}

  Result<const PickleTree::Node*> Field(std::string_view name, Kind want) const {
    const auto v = tree_.DictGet(state_, name);
    if (!v) return Bad("field '" + std::string(name) + "' is missing");
    const PickleTree::Node& n = tree_.at(*v);
    if (n.kind != want) {
      return Bad("field '" + std::string(name) + "' is a " + std::string(KindName(n.kind)) +
                 ", not a " + std::string(KindName(want)));
    }
    return &n;
  }
  Result<std::int64_t> NonNegative(std::string_view name) const {
    LMC_ASSIGN_OR_RETURN(const PickleTree::Node* n, Field(name, Kind::kInt));
    return CheckNonNegative(name, n->integer);
  }
  static Result<std::int64_t> CheckNonNegative(std::string_view name, std::int64_t v) {
    if (v < 0 || static_cast<std::uint64_t>(v) > kMaxExtent) {
      return Bad("field '" + std::string(name) + "' is " + std::to_string(v) +
                 " (want 0 to 2^48)");
    }
    return v;
  }
  Result<std::vector<std::int64_t>> Dims(std::string_view name) const {
    LMC_ASSIGN_OR_RETURN(const PickleTree::Node* n, Field(name, Kind::kTuple));
    if (n->items.empty() || n->items.size() > kMaxTensorRank) {
      return Bad("field '" + std::string(name) + "' has " + std::to_string(n->items.size()) +
                 " dimensions (want 1 to " + std::to_string(kMaxTensorRank) + ")");
    }
    std::vector<std::int64_t> dims;
    for (Index i : n->items) {
      const PickleTree::Node& d = tree_.at(i);
      if (d.kind != Kind::kInt) return Bad("field '" + std::string(name) + "' holds a non-int");
      LMC_ASSIGN_OR_RETURN(const std::int64_t v, CheckNonNegative(name, d.integer));
      dims.push_back(v);
    }
    return dims;
  }
  Result<std::array<std::uint8_t, kCudaIpcHandleBytes>> Handle(const PickleTree::Node& n,
                                                               std::string_view name) const {
    if (n.kind != Kind::kBytes || n.text.size() != kCudaIpcHandleBytes) {
      std::string message(1, '\'');  // built in steps: gcc 12 warns falsely on "'" + string
      message.append(name).append("' is not 64 bytes (a cudaIpcMemHandle_t)");
      return Bad(std::move(message));
    }
    std::array<std::uint8_t, kCudaIpcHandleBytes> h{};
    std::memcpy(h.data(), n.text.data(), h.size());
    return h;
  }
  const PickleTree& tree() const { return tree_; }

 private:
  const PickleTree& tree_;
  Index state_;
};

Status ReadCommon(const StateReader& r, DeviceIpcWrapper* w) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* dtype, r.Field("dtype", Kind::kGlobal));
  w->dtype = dtype->text.substr(dtype->text.find('.') + 1);
  if (dtype->text.rfind("torch.", 0) != 0 || !TorchDtypeSize(w->dtype)) {
    return Bad("field 'dtype' is " + dtype->text + ", not a torch dtype");
  }
  w->element_size = *TorchDtypeSize(w->dtype);
  LMC_ASSIGN_OR_RETURN(w->shape, r.Dims("shape"));
  LMC_ASSIGN_OR_RETURN(w->stride, r.Dims("stride"));
  if (w->shape.size() != w->stride.size()) {
    return Bad("shape has " + std::to_string(w->shape.size()) + " dimensions and stride " +
               std::to_string(w->stride.size()));
  }
  for (std::size_t i = 0; i < w->shape.size(); ++i) {
    if (w->shape[i] == 0) return Bad("shape has a dimension of 0 (an empty KV cache)");
    if (w->stride[i] == 0 && w->shape[i] > 1) return Bad("stride 0 makes elements alias");
  }
  LMC_ASSIGN_OR_RETURN(w->storage_offset, r.NonNegative("storage_offset"));
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* uuid, r.Field("device_uuid", Kind::kStr));
  if (uuid->text.empty() || uuid->text.size() > 128) return Bad("field 'device_uuid' is empty or too long");
  w->device_uuid = uuid->text;
  return Status::Ok();
}

Status ReadTorchStorage(const StateReader& r, DeviceIpcWrapper* w) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* handle, r.Field("handle", Kind::kTuple));
  if (handle->items.size() < 4) {
    return Bad("field 'handle' has " + std::to_string(handle->items.size()) +
               " items (PyTorch's _share_cuda_() tuple has 8)");
  }
  LMC_ASSIGN_OR_RETURN(w->mem_handle, r.Handle(r.tree().at(handle->items[1]), "handle[1]"));
  for (const std::size_t i : {std::size_t{2}, std::size_t{3}}) {
    const PickleTree::Node& n = r.tree().at(handle->items[i]);
    if (n.kind != Kind::kInt) return Bad("handle[" + std::to_string(i) + "] is not an int");
    LMC_ASSIGN_OR_RETURN(const std::int64_t v,
                         StateReader::CheckNonNegative("handle[" + std::to_string(i) + "]", n.integer));
    (i == 2 ? w->storage_bytes : w->storage_byte_offset) = static_cast<std::uint64_t>(v);
  }
  return Status::Ok();
}

bool IsContiguous(const DeviceIpcWrapper& w) {
  std::int64_t expected = 1;
  for (std::size_t i = w.shape.size(); i-- > 0;) {
    if (w.shape[i] != 1 && w.stride[i] != expected) return false;
    expected *= w.shape[i];
  }
  return true;
}

Status ReadRawCuda(const StateReader& r, DeviceIpcWrapper* w) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* handle, r.Field("_ipc_handle_reserved", Kind::kBytes));
  LMC_ASSIGN_OR_RETURN(w->mem_handle, r.Handle(*handle, "_ipc_handle_reserved"));
  LMC_ASSIGN_OR_RETURN(const std::int64_t offset, r.NonNegative("_alloc_offset"));
  LMC_ASSIGN_OR_RETURN(const std::int64_t nbytes, r.NonNegative("_nbytes"));
  w->storage_byte_offset = static_cast<std::uint64_t>(offset);
  w->storage_bytes = static_cast<std::uint64_t>(nbytes);
  if (w->storage_offset != 0) return Bad("RawCudaIPCWrapper with a storage_offset other than 0");
  if (!IsContiguous(*w)) return Bad("RawCudaIPCWrapper of a tensor that is not contiguous");
  if (w->span_bytes() != w->storage_bytes) {
    return Bad("_nbytes is " + std::to_string(w->storage_bytes) + " but shape and dtype make " +
               std::to_string(w->span_bytes()));
  }
  return Status::Ok();
}

}  // namespace

std::optional<std::uint32_t> TorchDtypeSize(std::string_view name) {
  for (const DtypeRow& row : kDtypes) {
    if (row.name == name) return row.size;
  }
  return std::nullopt;
}

std::uint64_t DeviceIpcWrapper::span_bytes() const {
  // Saturates just past kMaxExtent, so no product or sum can overflow.
  const auto times = [](std::uint64_t a, std::uint64_t b) {
    return (b != 0 && a > kPast / b) ? kPast : std::min(kPast, a * b);
  };
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    last = std::min(kPast, last + times(static_cast<std::uint64_t>(shape[i] - 1),
                                        static_cast<std::uint64_t>(stride[i])));
  }
  return times(last + 1, element_size);
}

Result<DeviceIpcWrapper> DecodeDeviceIpcWrapper(std::string_view pickle) {
  LMC_ASSIGN_OR_RETURN(const PickleTree tree, ReadPickle(pickle, AcceptGlobal));
  const PickleTree::Node& root = tree.at(tree.root());
  if (root.kind != Kind::kObject) {
    return Bad("the pickle holds a " + std::string(KindName(root.kind)) + ", not a wrapper object");
  }
  const std::string& cls = tree.at(root.cls).text;
  DeviceIpcWrapper w;
  if (cls.ends_with(".CudaIPCWrapper")) {
    w.kind = IpcWrapperKind::kTorchStorage;
  } else if (cls.ends_with(".RawCudaIPCWrapper")) {
    w.kind = IpcWrapperKind::kRawCuda;
  } else {
    return Bad("the pickle holds a " + cls + ", not a CUDA IPC wrapper");
  }
  if (!root.items.empty()) return Bad(cls + " built with arguments (a wrapper pickles with none)");
  if (!root.state) return Bad(cls + " without its state (no BUILD)");
  const StateReader reader(tree, *root.state);
  LMC_RETURN_IF_ERROR(ReadCommon(reader, &w));
  LMC_RETURN_IF_ERROR(w.kind == IpcWrapperKind::kRawCuda ? ReadRawCuda(reader, &w)
                                                         : ReadTorchStorage(reader, &w));
  const std::uint64_t end = static_cast<std::uint64_t>(w.storage_offset) * w.element_size + w.span_bytes();
  if (w.span_bytes() > kMaxExtent || end > w.storage_bytes) {
    return Bad("the view (storage_offset " + std::to_string(w.storage_offset) + ", shape and stride) "
               "reaches byte " + std::to_string(end) + " of a storage of " +
               std::to_string(w.storage_bytes) + " bytes");
  }
  return w;
}

}  // namespace lmcache::protocol
