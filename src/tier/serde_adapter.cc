#include "tier/serde_adapter.h"

#include <optional>
#include <string>
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

// Encode buffers kept for the next batch, at most this many bytes.
constexpr std::size_t kKeptBufferBytes = 64u << 20;

class SerdeAdapter::BufferPool {
 public:
  Buffer Take(std::size_t size) LMC_EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size >= size) {
          Buffer taken = std::move(*it);
          free_.erase(it);
          free_bytes_ -= taken.size;
          return taken;
        }
      }
    }
    return {std::make_unique_for_overwrite<std::byte[]>(size), size};
  }
  void GiveBack(Buffer buffer) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (free_bytes_ + buffer.size > kKeptBufferBytes) return;  // freed
    free_bytes_ += buffer.size;
    free_.push_back(std::move(buffer));
  }

 private:
  Mutex mu_;
  std::vector<Buffer> free_ LMC_GUARDED_BY(mu_);
  std::size_t free_bytes_ LMC_GUARDED_BY(mu_) = 0;
};

class SerdeAdapter::ElementTypes {
 public:
  explicit ElementTypes(const ElementTypeDirectory* directory) : directory_(directory) {}
  ElementType Of(const store::ObjectKey& key, std::uint64_t bytes) {
    if (directory_ == nullptr) return ElementType::kUnknown;
    if (!last_ || last_->model_name != key.model_name ||
        last_->layout_namespace != key.layout_namespace || last_->bytes != bytes) {
      last_ = Last{key.model_name, key.layout_namespace, bytes, directory_->Find(key, bytes)};
    }
    return last_->element;
  }

 private:
  struct Last {
    std::string model_name;
    std::uint32_t layout_namespace;
    std::uint64_t bytes;
    ElementType element;
  };
  const ElementTypeDirectory* directory_;
  std::optional<Last> last_;  // a batch is mostly one model's
};

SerdeAdapter::SerdeAdapter(std::unique_ptr<L2Adapter> inner, SerdeConfig config,
                           const ElementTypeDirectory* element_types)
    : ForwardingAdapter(std::move(inner)),
      config_(config),
      element_types_(element_types),
      buffers_(std::make_shared<BufferPool>()) {}

SerdeAdapter::Prepared SerdeAdapter::Prepare(const L2Write& object, ElementTypes& element_types) {
  Prepared prepared{object, {}};
  // Encoded already (a serde inside another): stored as it is.
  if (object.encoding.encoded()) return prepared;
  const std::uint64_t raw_bytes = object.bytes.size();
  const ElementType element = element_types.Of(*object.key, raw_bytes);
  auto bound = EncodedBytesBound(config_.codec, element, raw_bytes);
  // fp8's size is known before encoding: an object it cannot save on is
  // not encoded at all.
  if (!bound.ok() || (config_.codec != PayloadCodec::kLossless &&
                      !EncodingSaves(*object.key, raw_bytes, *bound))) {
    counters_.serde_raw_objects.fetch_add(1, std::memory_order_relaxed);
    return prepared;
  }
  Buffer buffer = buffers_->Take(*bound);
  auto encoded_bytes = EncodePayload(config_.codec, element, object.bytes,
                                     std::span<std::byte>(buffer.bytes.get(), *bound));
  if (!encoded_bytes.ok() || !EncodingSaves(*object.key, raw_bytes, *encoded_bytes)) {
    counters_.serde_raw_objects.fetch_add(1, std::memory_order_relaxed);
    buffers_->GiveBack(std::move(buffer));
    return prepared;
  }
  prepared.write.bytes = std::span<const std::byte>(buffer.bytes.get(), *encoded_bytes);
  prepared.write.encoding = {config_.codec, element, raw_bytes};
  prepared.buffer = std::move(buffer);
  counters_.serde_encoded_objects.fetch_add(1, std::memory_order_relaxed);
  counters_.serde_encoded_object_bytes.fetch_add(raw_bytes, std::memory_order_relaxed);
  counters_.serde_encoded_bytes.fetch_add(*encoded_bytes, std::memory_order_relaxed);
  return prepared;
}

void SerdeAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  // The encoded buffers live until the inner store has completed, then go
  // back to the pool for the next batch.
  struct Batch {
    explicit Batch(std::shared_ptr<BufferPool> pool) : buffers_to(std::move(pool)) {}
    ~Batch() {
      for (Buffer& b : buffers) buffers_to->GiveBack(std::move(b));
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    std::shared_ptr<BufferPool> buffers_to;
    std::vector<Buffer> buffers;
    std::vector<L2Write> writes;
  };
  auto batch = std::make_shared<Batch>(buffers_);
  batch->writes.reserve(objects.size());
  ElementTypes element_types(element_types_);
  for (const L2Write& object : objects) {
    Prepared prepared = Prepare(object, element_types);
    batch->writes.push_back(prepared.write);
    if (prepared.buffer.bytes) batch->buffers.push_back(std::move(prepared.buffer));
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
