#include "tier/serde_adapter.h"

#include <vector>

#include "tier/object_format.h"

namespace lmcache::tier {

void ElementTypeDirectory::Bind(Lookup lookup) {
  MutexLock lock(&mu_);
  lookup_ = std::move(lookup);
}

ElementType ElementTypeDirectory::Find(const store::ObjectKey& key,
                                       std::uint64_t object_bytes) const {
  // Called under our lock, so that Bind(nullptr) returns only once no call
  // runs: what it reads can then go. The lookup's own lock is a leaf.
  MutexLock lock(&mu_);
  return lookup_ ? lookup_(key, object_bytes) : ElementType::kUnknown;
}

struct SerdeAdapter::Prepared {
  L2Write write;
  std::unique_ptr<std::byte[]> buffer;  // the encoded payload; null when raw
};

SerdeAdapter::SerdeAdapter(std::unique_ptr<L2Adapter> inner, SerdeConfig config,
                           const ElementTypeDirectory* element_types)
    : ForwardingAdapter(std::move(inner)), config_(config), element_types_(element_types) {}

SerdeAdapter::Prepared SerdeAdapter::Prepare(const L2Write& object) {
  Prepared prepared{object, nullptr};
  const std::uint64_t raw_bytes = object.bytes.size();
  const ElementType element = element_types_ != nullptr
                                  ? element_types_->Find(*object.key, raw_bytes)
                                  : ElementType::kUnknown;
  auto encoded_bytes = EncodedBytes(config_.codec, element, raw_bytes);
  if (!encoded_bytes.ok() || !EncodingSaves(*object.key, raw_bytes, *encoded_bytes)) {
    counters_.serde_raw_objects.fetch_add(1, std::memory_order_relaxed);
    return prepared;
  }
  prepared.buffer = std::make_unique_for_overwrite<std::byte[]>(*encoded_bytes);
  const std::span<std::byte> out(prepared.buffer.get(), *encoded_bytes);
  if (!EncodePayload(config_.codec, element, object.bytes, out).ok()) {  // sizes agree: cannot fail
    counters_.serde_raw_objects.fetch_add(1, std::memory_order_relaxed);
    prepared.buffer.reset();
    return prepared;
  }
  prepared.write.bytes = out;
  prepared.write.encoding = {config_.codec, element, raw_bytes};
  counters_.serde_encoded_objects.fetch_add(1, std::memory_order_relaxed);
  counters_.serde_encoded_object_bytes.fetch_add(raw_bytes, std::memory_order_relaxed);
  counters_.serde_encoded_bytes.fetch_add(*encoded_bytes, std::memory_order_relaxed);
  return prepared;
}

void SerdeAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  // The encoded buffers live until the inner store has completed.
  struct Batch {
    std::vector<std::unique_ptr<std::byte[]>> buffers;
    std::vector<L2Write> writes;
  };
  auto batch = std::make_shared<Batch>();
  batch->writes.reserve(objects.size());
  for (const L2Write& object : objects) {
    Prepared prepared = Prepare(object);
    batch->writes.push_back(prepared.write);
    if (prepared.buffer) batch->buffers.push_back(std::move(prepared.buffer));
  }
  inner().SubmitStore(batch->writes, [batch, done = std::move(done)](std::vector<Status> results) {
    done(std::move(results));
  });
}

L2AdapterStats SerdeAdapter::Stats() const {
  L2AdapterStats s = ForwardingAdapter::Stats();
  counters_.CopyTo(&s);
  s.serde = PayloadCodecName(config_.codec);
  return s;
}

}  // namespace lmcache::tier
