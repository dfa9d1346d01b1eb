// SerdeAdapter: an L2 adapter's `serde` block (the reference's
// SerdeL2AdapterWrapper): objects are stored encoded (payload_codec.h), and
// the L1 copy stays as it was.
//
// Encoding runs on the thread that submits the store, which is always a
// store controller worker, never a request thread. Each encoded object gets a
// buffer, held until the inner adapter's store has completed (so a batch
// costs at most its encodings' bound more: half its bytes under fp8 from
// 16-bit elements). Buffers are kept for the next batch, up to 64 MiB: fresh
// ones cost more in page faults than the encoding (serde_bench). What cannot be encoded is stored
// raw, and counted: an object whose element type no registration told (a server that has not met
// its model's workers since a restart; a layout whose parts mix dtypes), and one too small for the
// encoding to save more than its header.
//
// Loads need no wrapper: the header of an object says how it was stored,
// and every adapter decodes what it reads (object_format.h). So a tier
// whose serde was changed, or removed, still serves what it holds.
//
// Thread-safety: as the wrapped adapter; the counters are atomics, and the
// element type directory is internally synchronised.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "store/object_key.h"
#include "tier/forwarding_adapter.h"
#include "tier/payload_codec.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

// The element type of an object's tensor, as the server's registrations
// know it. Built before the adapters; the server binds its lookup once the
// registrations exist (until then, and where it does not know, kUnknown),
// and unbinds it (Bind(nullptr)) before they go: that returns once no Find
// is still in the lookup.
class ElementTypeDirectory {
 public:
  using Lookup = std::function<ElementType(const store::ObjectKey&, std::uint64_t object_bytes)>;

  void Bind(Lookup lookup) LMC_EXCLUDES(mu_);
  ElementType Find(const store::ObjectKey& key, std::uint64_t object_bytes) const LMC_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  Lookup lookup_ LMC_GUARDED_BY(mu_);
};

// The `serde` block of an adapter's JSON: {"type": "fp8", "fp8_dtype": ...}.
struct SerdeConfig {
  PayloadCodec codec = PayloadCodec::kRaw;  // kRaw: no serde block
  bool operator==(const SerdeConfig&) const = default;
};

class SerdeAdapter final : public ForwardingAdapter {
 public:
  SerdeAdapter(std::unique_ptr<L2Adapter> inner, SerdeConfig config,
               const ElementTypeDirectory* element_types);

  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  L2AdapterStats Stats() const override;

 private:
  // The encode buffers kept between batches (shared with the batches in
  // flight, so a completion that comes late returns them safely).
  class BufferPool;
  struct Buffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size = 0;
  };
  // One write as the inner adapter gets it: encoded into `buffer`, or as given.
  struct Prepared {
    L2Write write;
    Buffer buffer;  // empty when the write goes as given
  };
  // The element type of each object a batch stores, asked once per model,
  // namespace and size (the directory takes the registrations' lock).
  class ElementTypes;
  Prepared Prepare(const L2Write& object, ElementTypes& element_types);

  const SerdeConfig config_;
  const ElementTypeDirectory* const element_types_;
  const std::shared_ptr<BufferPool> buffers_;
  LMC_STATS_COUNTERS(Counters, L2AdapterStats, LMC_L2_SERDE_COUNTED_STATS);
  Counters counters_;
};

}  // namespace lmcache::tier
