#include "protocol/device_ipc_wrapper.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/msgpack_cursor.h"
#include "protocol/pickle_reader.h"

namespace lmcache::protocol {
namespace {

using Index = PickleTree::Index;
using Kind = PickleTree::Kind;

constexpr std::uint64_t kMaxExtent = std::uint64_t{1} << 48;  // 256 TiB: no real tensor is larger
constexpr std::uint64_t kPast = kMaxExtent + 1;                 // what a larger extent reads as
constexpr std::string_view kMapMagic = "lmcache.cuda_ipc_wrapper";
constexpr std::uint8_t kPickleProto = 0x80;
// PyTorch's shareable handle: [version][type][payload] (CUDACachingAllocator).
constexpr std::uint8_t kHandleTypeCudaMalloc = 'c';
constexpr std::uint8_t kHandleTypeExpandable = 'e';
constexpr std::uint8_t kNewestHandleVersion = 3;  // 2 up to torch 2.12, 3 from 2.13

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

enum class WrapperClass : std::uint8_t { kCuda, kRaw, kVmm, kOther };

WrapperClass ClassOf(std::string_view name) {
  if (name == "CudaIPCWrapper") return WrapperClass::kCuda;
  if (name == "RawCudaIPCWrapper") return WrapperClass::kRaw;
  if (name == "VmmCudaIPCWrapper") return WrapperClass::kVmm;
  return WrapperClass::kOther;
}

bool AcceptGlobal(std::string_view module, std::string_view name) {
  if (module == "torch") return TorchDtypeSize(name).has_value();
  // The wrappers' module moved between releases: any lmcache module, by class name.
  if (module.starts_with("lmcache.")) return ClassOf(name) != WrapperClass::kOther;
  return module == "_codecs" && name == "encode";  // how protocol 2 writes bytes
}

Status Bad(std::string message) {
  return Status(ErrorCode::kMalformedRequest, "device IPC wrapper: " + std::move(message));
}

Status Unservable(std::string message) {
  return Status(ErrorCode::kNotSupported, "device IPC wrapper: " + std::move(message));
}

std::string Quoted(std::string_view name) {
  std::string out(1, '\'');  // built in steps: gcc 12 warns falsely on "'" + string
  out.append(name).push_back('\'');
  return out;
}

Result<std::int64_t> CheckNonNegative(std::string_view name, std::int64_t v) {
  if (v < 0 || static_cast<std::uint64_t>(v) > kMaxExtent) {
    return Bad("field " + Quoted(name) + " is " + std::to_string(v) + " (want 0 to 2^48)");
  }
  return v;
}

// PyTorch's _share_cuda_() tuple, as sent.
struct TorchHandleFields {
  std::string shareable;  // handle[1]
  std::int64_t storage_bytes = 0;
  std::int64_t storage_byte_offset = 0;
  std::string ref_counter_name;
  std::int64_t ref_counter_index = 0;
  std::string event;
  bool event_sync_required = false;
};

// What either wire form carries, before it is checked.
struct WrapperFields {
  WrapperClass cls = WrapperClass::kOther;
  std::string dtype;  // without "torch."
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;
  std::int64_t storage_offset = 0;
  std::string device_uuid;
  TorchHandleFields torch;  // kCuda
  std::string ipc_handle;   // kRaw: _ipc_handle_reserved
  std::int64_t alloc_offset = 0;
  std::int64_t nbytes = 0;
};

bool IsContiguous(const DeviceIpcWrapper& w) {
  std::int64_t expected = 1;
  for (std::size_t i = w.shape.size(); i-- > 0;) {
    if (w.shape[i] != 1 && w.stride[i] != expected) return false;
    expected *= w.shape[i];
  }
  return true;
}

Status CheckDims(const WrapperFields& f) {
  for (const auto* dims : {&f.shape, &f.stride}) {
    const char* name = dims == &f.shape ? "shape" : "stride";
    if (dims->empty() || dims->size() > kMaxTensorRank) {
      return Bad(std::string("field '") + name + "' has " + std::to_string(dims->size()) +
                 " dimensions (want 1 to " + std::to_string(kMaxTensorRank) + ")");
    }
    for (const std::int64_t d : *dims) LMC_RETURN_IF_ERROR(CheckNonNegative(name, d).status());
  }
  if (f.shape.size() != f.stride.size()) {
    return Bad("shape has " + std::to_string(f.shape.size()) + " dimensions and stride " +
               std::to_string(f.stride.size()));
  }
  for (std::size_t i = 0; i < f.shape.size(); ++i) {
    if (f.shape[i] == 0) return Bad("shape has a dimension of 0 (an empty KV cache)");
    if (f.stride[i] == 0 && f.shape[i] > 1) return Bad("stride 0 makes elements alias");
  }
  return Status::Ok();
}

// A refcounter file name is opened with shm_open at release: one path
// component of safe characters, nothing that reaches elsewhere.
Status CheckRefCounterName(std::string_view name) {
  const bool safe = name.size() >= 2 && name.size() <= 200 && name[0] == '/' &&
                    std::all_of(name.begin() + 1, name.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
                    }) &&
                    name != "/." && name != "/..";
  if (!safe) return Bad("handle[4] (the IPC refcounter's shm name) is not one safe file name");
  return Status::Ok();
}

Status ApplyTorchHandle(const TorchHandleFields& h, DeviceIpcWrapper* w) {
  LMC_RETURN_IF_ERROR(ParseShareableHandle(h.shareable, "handle[1]", w));
  LMC_ASSIGN_OR_RETURN(const std::int64_t size, CheckNonNegative("handle[2]", h.storage_bytes));
  LMC_ASSIGN_OR_RETURN(const std::int64_t offset,
                       CheckNonNegative("handle[3]", h.storage_byte_offset));
  w->storage_bytes = static_cast<std::uint64_t>(size);
  w->storage_byte_offset = static_cast<std::uint64_t>(offset);
  LMC_RETURN_IF_ERROR(CheckRefCounterName(h.ref_counter_name));
  if (h.ref_counter_index < 0 ||
      static_cast<std::uint64_t>(h.ref_counter_index) >= kTorchRefCounterSlots) {
    return Bad("handle[5] (the IPC refcounter's slot) is " + std::to_string(h.ref_counter_index) +
               " (want 0 to " + std::to_string(kTorchRefCounterSlots - 1) + ")");
  }
  w->ref_counter = TorchRefCounter{h.ref_counter_name, static_cast<std::uint64_t>(h.ref_counter_index)};
  if (h.event.size() != kCudaIpcEventBytes) {
    return Bad("handle[6] is " + std::to_string(h.event.size()) +
               " bytes, not 64 (a cudaIpcEventHandle_t)");
  }
  std::memcpy(w->event_handle.data(), h.event.data(), kCudaIpcEventBytes);
  w->event_sync_required = h.event_sync_required;
  return Status::Ok();
}

Status ApplyRawHandle(const WrapperFields& f, DeviceIpcWrapper* w) {
  if (f.ipc_handle.size() != kCudaIpcHandleBytes) {
    return Bad("'_ipc_handle_reserved' is " + std::to_string(f.ipc_handle.size()) +
               " bytes, not 64 (a cudaIpcMemHandle_t)");
  }
  std::memcpy(w->mem_handle.data(), f.ipc_handle.data(), kCudaIpcHandleBytes);
  LMC_ASSIGN_OR_RETURN(const std::int64_t offset, CheckNonNegative("_alloc_offset", f.alloc_offset));
  LMC_ASSIGN_OR_RETURN(const std::int64_t nbytes, CheckNonNegative("_nbytes", f.nbytes));
  w->storage_byte_offset = static_cast<std::uint64_t>(offset);
  w->storage_bytes = static_cast<std::uint64_t>(nbytes);
  if (!IsContiguous(*w)) return Bad("RawCudaIPCWrapper of a tensor that is not contiguous");
  return Status::Ok();
}

// Checks what either form carried and builds the wrapper.
Result<DeviceIpcWrapper> Finish(const WrapperFields& f) {
  if (f.cls == WrapperClass::kVmm) {
    return Unservable(
        "VmmCudaIPCWrapper (lmcache.mp.use_vmm_api) exports its memory as a file descriptor "
        "passed out of band, which this server does not import: run the engine without "
        "use_vmm_api (the default CudaIPCWrapper)");
  }
  DeviceIpcWrapper w;
  w.kind = f.cls == WrapperClass::kRaw ? IpcWrapperKind::kRawCuda : IpcWrapperKind::kTorchStorage;
  const auto size = TorchDtypeSize(f.dtype);
  if (!size) return Bad("field 'dtype' is torch." + f.dtype + ", not a torch dtype this server knows");
  w.dtype = f.dtype;
  w.element_size = *size;
  LMC_RETURN_IF_ERROR(CheckDims(f));
  w.shape = f.shape;
  w.stride = f.stride;
  LMC_ASSIGN_OR_RETURN(w.storage_offset, CheckNonNegative("storage_offset", f.storage_offset));
  if (f.device_uuid.empty() || f.device_uuid.size() > 128) {
    return Bad("field 'device_uuid' is empty or too long");
  }
  w.device_uuid = f.device_uuid;
  LMC_RETURN_IF_ERROR(w.kind == IpcWrapperKind::kRawCuda ? ApplyRawHandle(f, &w)
                                                         : ApplyTorchHandle(f.torch, &w));
  const std::uint64_t end = static_cast<std::uint64_t>(w.storage_offset) * w.element_size + w.span_bytes();
  if (w.span_bytes() > kMaxExtent || end > w.storage_bytes) {
    return Bad("the view (storage_offset " + std::to_string(w.storage_offset) + ", shape and stride) "
               "reaches byte " + std::to_string(end) + " of a storage of " +
               std::to_string(w.storage_bytes) + " bytes");
  }
  return w;
}

// ---- the pickle form -------------------------------------------------------

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
    if (!v) return Bad("field " + Quoted(name) + " is missing");
    return Typed(tree_.at(*v), name, want);
  }
  bool Has(std::string_view name) const { return tree_.DictGet(state_, name).has_value(); }
  Result<std::int64_t> Int(std::string_view name) const {
    LMC_ASSIGN_OR_RETURN(const PickleTree::Node* n, Field(name, Kind::kInt));
    return n->integer;
  }
  Result<std::vector<std::int64_t>> Dims(std::string_view name) const {
    LMC_ASSIGN_OR_RETURN(const PickleTree::Node* n, Field(name, Kind::kTuple));
    std::vector<std::int64_t> dims;
    for (Index i : n->items) {
      LMC_ASSIGN_OR_RETURN(const PickleTree::Node* d, Typed(tree_.at(i), name, Kind::kInt));
      dims.push_back(d->integer);
    }
    return dims;
  }
  static Result<const PickleTree::Node*> Typed(const PickleTree::Node& n, std::string_view name,
                                               Kind want) {
    if (n.kind != want) {
      return Bad("field " + Quoted(name) + " is a " + std::string(KindName(n.kind)) + ", not a " +
                 std::string(KindName(want)));
    }
    return &n;
  }
  const PickleTree& tree() const { return tree_; }

 private:
  const PickleTree& tree_;
  Index state_;
};

Result<TorchHandleFields> ReadPickledHandle(const StateReader& r) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* handle, r.Field("handle", Kind::kTuple));
  if (handle->items.size() != 8) {
    return Bad("field 'handle' has " + std::to_string(handle->items.size()) +
               " items (PyTorch's _share_cuda_() tuple has 8)");
  }
  const auto item = [&](std::size_t i, Kind want) {
    return StateReader::Typed(r.tree().at(handle->items[i]), "handle[" + std::to_string(i) + "]", want);
  };
  if (r.tree().at(handle->items[1]).kind == Kind::kNone) {
    return Bad("field 'handle' is the share of an empty storage (handle[1] is None)");
  }
  TorchHandleFields h;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* shareable, item(1, Kind::kBytes));
  h.shareable = shareable->text;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* size, item(2, Kind::kInt));
  h.storage_bytes = size->integer;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* offset, item(3, Kind::kInt));
  h.storage_byte_offset = offset->integer;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* ref_name, item(4, Kind::kBytes));
  h.ref_counter_name = ref_name->text;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* ref_index, item(5, Kind::kInt));
  h.ref_counter_index = ref_index->integer;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* event, item(6, Kind::kBytes));
  h.event = event->text;
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* sync, item(7, Kind::kBool));
  h.event_sync_required = sync->integer != 0;
  return h;
}

Status ReadPickledCommon(const StateReader& r, WrapperFields* f) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* dtype, r.Field("dtype", Kind::kGlobal));
  if (!dtype->text.starts_with("torch.")) {
    return Bad("field 'dtype' is " + dtype->text + ", not a torch dtype");
  }
  f->dtype = dtype->text.substr(6);
  LMC_ASSIGN_OR_RETURN(f->shape, r.Dims("shape"));
  LMC_ASSIGN_OR_RETURN(f->stride, r.Dims("stride"));
  LMC_ASSIGN_OR_RETURN(f->storage_offset, r.Int("storage_offset"));
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* uuid, r.Field("device_uuid", Kind::kStr));
  f->device_uuid = uuid->text;
  return Status::Ok();
}

Status ReadPickledRaw(const StateReader& r, WrapperFields* f) {
  LMC_ASSIGN_OR_RETURN(const PickleTree::Node* handle, r.Field("_ipc_handle_reserved", Kind::kBytes));
  f->ipc_handle = handle->text;
  // The oldest RawCudaIPCWrapper has no _alloc_offset: its handle is of the tensor's own pointer.
  if (r.Has("_alloc_offset")) {
    LMC_ASSIGN_OR_RETURN(f->alloc_offset, r.Int("_alloc_offset"));
  }
  LMC_ASSIGN_OR_RETURN(f->nbytes, r.Int("_nbytes"));
  return Status::Ok();
}

Result<DeviceIpcWrapper> DecodePickled(std::string_view pickle) {
  LMC_ASSIGN_OR_RETURN(const PickleTree tree, ReadPickle(pickle, AcceptGlobal));
  const PickleTree::Node& root = tree.at(tree.root());
  if (root.kind != Kind::kObject) {
    return Bad("the pickle holds a " + std::string(KindName(root.kind)) + ", not a wrapper object");
  }
  const std::string& cls = tree.at(root.cls).text;
  WrapperFields f;
  f.cls = ClassOf(std::string_view(cls).substr(cls.rfind('.') + 1));
  if (f.cls == WrapperClass::kOther) return Bad("the pickle holds a " + cls + ", not a CUDA IPC wrapper");
  if (!root.items.empty()) return Bad(cls + " built with arguments (a wrapper pickles with none)");
  if (!root.state) return Bad(cls + " without its state (no BUILD)");
  if (f.cls == WrapperClass::kVmm) return Finish(f);
  const StateReader reader(tree, *root.state);
  LMC_RETURN_IF_ERROR(ReadPickledCommon(reader, &f));
  if (f.cls == WrapperClass::kRaw) {
    LMC_RETURN_IF_ERROR(ReadPickledRaw(reader, &f));
  } else {
    LMC_ASSIGN_OR_RETURN(f.torch, ReadPickledHandle(reader));
  }
  return Finish(f);
}

// ---- the msgpack map form --------------------------------------------------

Result<std::vector<std::int64_t>> ReadIntArray(msgpk::MsgpackCursor& in, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader(what));
  if (n == 0 || n > kMaxTensorRank) {
    return Bad("field " + Quoted(what) + " has " + std::to_string(n) + " dimensions (want 1 to " +
               std::to_string(kMaxTensorRank) + ")");
  }
  std::vector<std::int64_t> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    LMC_ASSIGN_OR_RETURN(const std::int64_t v, in.ReadInt(what));
    out.push_back(v);
  }
  return out;
}

Result<TorchHandleFields> ReadMapHandle(msgpk::MsgpackCursor& in) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader("handle"));
  if (n != 8) return Bad("field 'handle' has " + std::to_string(n) + " items (PyTorch's _share_cuda_() tuple has 8)");
  TorchHandleFields h;
  LMC_RETURN_IF_ERROR(in.ReadInt("handle[0]").status());
  LMC_ASSIGN_OR_RETURN(const std::string_view shareable, in.ReadBytes("handle[1]"));
  h.shareable = std::string(shareable);
  LMC_ASSIGN_OR_RETURN(h.storage_bytes, in.ReadInt("handle[2]"));
  LMC_ASSIGN_OR_RETURN(h.storage_byte_offset, in.ReadInt("handle[3]"));
  LMC_ASSIGN_OR_RETURN(const std::string_view name, in.ReadBytes("handle[4]"));
  h.ref_counter_name = std::string(name);
  LMC_ASSIGN_OR_RETURN(h.ref_counter_index, in.ReadInt("handle[5]"));
  LMC_ASSIGN_OR_RETURN(const std::string_view event, in.ReadBytes("handle[6]"));
  h.event = std::string(event);
  LMC_ASSIGN_OR_RETURN(h.event_sync_required, in.ReadBool("handle[7]"));
  return h;
}

Result<DeviceIpcWrapper> DecodeMapForm(std::string_view body) {
  msgpk::MsgpackCursor in(body);
  WrapperFields f;
  bool magic = false;
  bool version = false;
  bool handle = false;
  LMC_RETURN_IF_ERROR(in.ReadFields("device IPC wrapper", [&](std::string_view name) -> Result<bool> {
    if (name == "magic") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("magic"));
      if (v != kMapMagic) return Bad("field 'magic' is " + Quoted(v) + ", not " + Quoted(kMapMagic));
      magic = true;
    } else if (name == "version") {
      LMC_ASSIGN_OR_RETURN(const std::int64_t v, in.ReadInt("version"));
      if (v != 1) return Bad("wire version " + std::to_string(v) + " of the wrapper map (this server reads 1)");
      version = true;
    } else if (name == "kind") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("kind"));
      if (v != "cuda" && v != "raw") return Bad("field 'kind' is " + Quoted(v) + " (want cuda or raw)");
      f.cls = v == "raw" ? WrapperClass::kRaw : WrapperClass::kCuda;
    } else if (name == "dtype") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("dtype"));
      f.dtype = std::string(v.starts_with("torch.") ? v.substr(6) : v);
    } else if (name == "shape" || name == "stride") {
      LMC_ASSIGN_OR_RETURN((name == "shape" ? f.shape : f.stride), ReadIntArray(in, name));
    } else if (name == "storage_offset") {
      LMC_ASSIGN_OR_RETURN(f.storage_offset, in.ReadInt("storage_offset"));
    } else if (name == "device_uuid") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("device_uuid"));
      f.device_uuid = std::string(v);
    } else if (name == "handle" && !in.NextIsNil()) {
      LMC_ASSIGN_OR_RETURN(f.torch, ReadMapHandle(in));
      handle = true;
    } else if (name == "ipc_handle_reserved") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadBytes("ipc_handle_reserved"));
      f.ipc_handle = std::string(v);
    } else if (name == "alloc_offset" || name == "nbytes") {
      LMC_ASSIGN_OR_RETURN((name == "nbytes" ? f.nbytes : f.alloc_offset), in.ReadInt(name));
    } else {
      return false;
    }
    return true;
  }));
  if (!in.AtEnd()) return Bad("trailing bytes after the wrapper map");
  if (!magic || !version) return Bad("neither a pickle nor a wrapper map (no magic and version)");
  if (f.cls == WrapperClass::kOther) return Bad("field 'kind' is missing");
  if (f.cls == WrapperClass::kCuda && !handle) return Bad("field 'handle' is missing");
  if (f.shape.empty() || f.stride.empty()) return Bad("field 'shape' or 'stride' is missing");
  if (f.device_uuid.empty()) return Bad("field 'device_uuid' is missing");
  return Finish(f);
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

Status ParseShareableHandle(std::string_view bytes, std::string_view what, DeviceIpcWrapper* out) {
  if (bytes.size() == kCudaIpcHandleBytes) {
    std::memcpy(out->mem_handle.data(), bytes.data(), kCudaIpcHandleBytes);
    out->handle_form = ShareableHandleForm::kRaw;
    return Status::Ok();
  }
  if (bytes.size() < 2) {
    return Bad(Quoted(what) + " is " + std::to_string(bytes.size()) +
               " bytes: neither a cudaIpcMemHandle_t (64) nor PyTorch's versioned handle");
  }
  const auto version = static_cast<std::uint8_t>(bytes[0]);
  const auto type = static_cast<std::uint8_t>(bytes[1]);
  if (type == kHandleTypeExpandable) {
    return Unservable(Quoted(what) + " is an expandable-segments handle (PyTorch type 'e'): the "
                      "engine runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, whose "
                      "memory cannot be opened with cudaIpcOpenMemHandle; start the engine "
                      "without expandable_segments");
  }
  if (type != kHandleTypeCudaMalloc && bytes.size() != 2 + kCudaIpcHandleBytes) {
    return Bad(Quoted(what) + " is " + std::to_string(bytes.size()) +
               " bytes: neither a cudaIpcMemHandle_t (64) nor PyTorch's versioned handle (66)");
  }
  if (type != kHandleTypeCudaMalloc) {
    return Bad(Quoted(what) + " is a PyTorch shareable handle of unknown type byte " +
               std::to_string(type) + " (known: 'c' cudaMalloc, 'e' expandable segments)");
  }
  if (version < 1 || version > kNewestHandleVersion) {
    return Unservable(Quoted(what) + " is a PyTorch shareable handle of version " +
                      std::to_string(version) + " (this server reads versions 1 to " +
                      std::to_string(kNewestHandleVersion) + ")");
  }
  if (bytes.size() != 2 + kCudaIpcHandleBytes) {
    return Bad(Quoted(what) + " is a PyTorch cudaMalloc handle of " + std::to_string(bytes.size()) +
               " bytes, not 66 (version, type, cudaIpcMemHandle_t)");
  }
  std::memcpy(out->mem_handle.data(), bytes.data() + 2, kCudaIpcHandleBytes);
  out->handle_form = ShareableHandleForm::kTorchCudaMalloc;
  out->handle_version = version;
  return Status::Ok();
}

Result<DeviceIpcWrapper> DecodeDeviceIpcWrapper(std::string_view body) {
  if (body.empty()) return Bad("the ext body is empty");
  if (static_cast<std::uint8_t>(body[0]) == kPickleProto) return DecodePickled(body);
  return DecodeMapForm(body);
}

}  // namespace lmcache::protocol
