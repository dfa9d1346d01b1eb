// libFuzzer target: the pickle reader and the device IPC wrapper decoder
// (pickles, and the msgpack map form), which read the kv_cache bytes of
// register_kv_cache from any local client. Beyond "no crash, no sanitizer
// report, no hang": every tree that reads has in-range indices and bounded
// depth; every wrapper that decodes describes a view inside its storage,
// with matching ranks, a known element size and, from PyTorch's tuple, a
// refcounter slot in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "protocol/device_ipc_wrapper.h"
#include "protocol/pickle_reader.h"

namespace {

using namespace lmcache;
using namespace lmcache::protocol;

void Check(bool condition) {
  if (!condition) std::abort();
}

bool AcceptAll(std::string_view, std::string_view) { return true; }

void CheckTree(const PickleTree& tree, const PickleLimits& limits) {
  Check(tree.root() < tree.size() && tree.size() <= limits.max_nodes);
  for (std::size_t i = 0; i < tree.size(); ++i) {
    const PickleTree::Node& n = tree.at(static_cast<PickleTree::Index>(i));
    Check(n.depth <= limits.max_depth);
    for (PickleTree::Index child : n.items) Check(child < tree.size() && tree.at(child).depth < n.depth);
    if (n.state) Check(*n.state < tree.size() && tree.at(*n.state).depth < n.depth);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const PickleLimits limits;
  const Result<PickleTree> tree = ReadPickle(bytes, AcceptAll, limits);
  if (tree.ok()) {
    CheckTree(*tree, limits);
  } else {
    Check(tree.status().code() == ErrorCode::kMalformedRequest ||
          tree.status().code() == ErrorCode::kTooLarge);
  }
  const Result<DeviceIpcWrapper> w = DecodeDeviceIpcWrapper(bytes);
  if (!w.ok()) {
    Check(w.status().code() == ErrorCode::kMalformedRequest ||
          w.status().code() == ErrorCode::kTooLarge || w.status().code() == ErrorCode::kNotSupported);
    return 0;
  }
  // What decodes as a pickled wrapper reads as a pickle (the map form is msgpack).
  if (size > 0 && data[0] == 0x80) Check(tree.ok());
  Check(!w->ref_counter || (w->ref_counter->index < kTorchRefCounterSlots &&
                            w->ref_counter->shm_name.find('/', 1) == std::string::npos));
  Check(!w->shape.empty() && w->shape.size() == w->stride.size() &&
        w->shape.size() <= kMaxTensorRank);
  Check(TorchDtypeSize(w->dtype) == w->element_size);
  Check(static_cast<std::uint64_t>(w->storage_offset) * w->element_size + w->span_bytes() <=
        w->storage_bytes);
  return 0;
}
