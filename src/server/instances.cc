#include "server/instances.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

namespace lmcache::server {

std::string ChunkLayout::Describe() const {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "] " + dtype + (use_mla ? " (MLA)" : "");
}

Result<std::uint32_t> DtypeItemSize(const std::string& dtype) {
  static const std::array<std::pair<const char*, std::uint32_t>, 20> kSizes = {{
      {"float16", 2},
      {"half", 2},
      {"bfloat16", 2},
      {"float32", 4},
      {"float", 4},
      {"float64", 8},
      {"double", 8},
      {"int8", 1},
      {"uint8", 1},
      {"int16", 2},
      {"short", 2},
      {"int32", 4},
      {"int", 4},
      {"int64", 8},
      {"long", 8},
      {"float8_e4m3fn", 1},
      {"float8_e5m2", 1},
      {"float8_e4m3fnuz", 1},
      {"float8_e5m2fnuz", 1},
      {"bool", 1},
  }};
  std::string name = dtype;
  if (name.starts_with("torch.")) name = name.substr(6);
  for (const auto& [known, size] : kSizes) {
    if (name == known) return size;
  }
  return InvalidArgument("dtype_str '" + dtype + "' is not a supported torch dtype name");
}

Result<ChunkLayout> MakeChunkLayout(const RegisterContextPayload& p, std::int64_t chunk_size) {
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
  if (p.num_layers <= 0 || p.num_layers > kMaxDim) {
    return InvalidArgument("num_layers must be in [1, 2^24], got " + std::to_string(p.num_layers));
  }
  if (p.hidden_dim_size <= 0 || p.hidden_dim_size > kMaxDim) {
    return InvalidArgument("hidden_dim_size must be in [1, 2^24], got " +
                           std::to_string(p.hidden_dim_size));
  }
  LMC_ASSIGN_OR_RETURN(const std::uint32_t item_size, DtypeItemSize(p.dtype_str));
  ChunkLayout layout;
  layout.num_layers = p.num_layers;
  layout.hidden_dim = p.hidden_dim_size;
  layout.chunk_size = chunk_size;
  layout.dtype = p.dtype_str.starts_with("torch.") ? p.dtype_str.substr(6) : p.dtype_str;
  layout.use_mla = p.use_mla;
  if (p.use_mla) {
    layout.shape = {p.num_layers, chunk_size, p.hidden_dim_size};
  } else {
    layout.shape = {2, p.num_layers, chunk_size, p.hidden_dim_size};
  }
  // Sizes are bounded above (2^24 each, chunk size bounded by the config), so
  // the product fits in 64 bits only if checked: do it in long double.
  long double bytes = item_size;
  for (const std::int64_t dim : layout.shape) bytes *= static_cast<long double>(dim);
  if (bytes > static_cast<long double>(std::numeric_limits<std::uint64_t>::max() / 2)) {
    return InvalidArgument("the chunk layout " + layout.Describe() + " is too large");
  }
  layout.object_bytes = static_cast<std::uint64_t>(bytes);
  return layout;
}

InstanceRegistry::InstanceRegistry(const Clock* clock) : clock_(clock) {}

Result<bool> InstanceRegistry::Register(const RegisterContextPayload& payload,
                                        const ChunkLayout& layout) {
  MutexLock lock(&mu_);
  const TimeMs now = clock_->NowMs();
  const LayoutKey layout_key{payload.model_name, payload.world_size};
  if (auto it = instances_.find(payload.instance_id); it != instances_.end()) {
    Instance& existing = it->second;
    if (existing.info.model_name != payload.model_name ||
        existing.info.world_size != payload.world_size ||
        !existing.info.layout.SameGeometry(layout)) {
      return Status(ErrorCode::kLayoutMismatch,
                    "instance " + std::to_string(payload.instance_id) + " is registered for " +
                        existing.info.model_name + " (world size " +
                        std::to_string(existing.info.world_size) + ", layout " +
                        existing.info.layout.Describe() + "); unregister it before registering " +
                        payload.model_name + " with layout " + layout.Describe());
    }
    existing.last_seen_ms = now;
    return false;
  }
  if (auto it = layouts_.find(layout_key);
      it != layouts_.end() && it->second.refs > 0 && !it->second.layout.SameGeometry(layout)) {
    return Status(ErrorCode::kLayoutMismatch,
                  "model " + payload.model_name + " with world size " +
                      std::to_string(payload.world_size) + " is already served with layout " +
                      it->second.layout.Describe() + " by another instance; refusing " +
                      layout.Describe() + " (use another model name for another geometry)");
  }
  LayoutRef& ref = layouts_[layout_key];
  if (ref.refs == 0) ref.layout = layout;
  ref.refs += 1;
  Instance instance;
  instance.info = {payload.instance_id, payload.model_name, payload.world_size, layout};
  instance.last_seen_ms = now;
  instances_.emplace(payload.instance_id, std::move(instance));
  return true;
}

std::optional<RemovedInstance> InstanceRegistry::Unregister(std::int64_t instance_id) {
  MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return std::nullopt;
  RemovedInstance removed{std::move(it->second.info), std::move(it->second.pending_writes),
                          std::move(it->second.pending_reads)};
  instances_.erase(it);
  auto layout = layouts_.find({removed.info.model_name, removed.info.world_size});
  if (layout != layouts_.end() && --layout->second.refs <= 0) layouts_.erase(layout);
  return removed;
}

Result<InstanceInfo> InstanceRegistry::Touch(std::int64_t instance_id) {
  MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) {
    return Status(ErrorCode::kNotRegistered,
                  "instance " + std::to_string(instance_id) +
                      " is not registered (the server may have restarted or reaped it): "
                      "register the engine context again");
  }
  it->second.last_seen_ms = clock_->NowMs();
  it->second.heard_since_registration = true;
  return it->second.info;
}

std::optional<ChunkLayout> InstanceRegistry::LayoutOf(const std::string& model,
                                                      std::int64_t world_size) const {
  MutexLock lock(&mu_);
  auto it = layouts_.find({model, world_size});
  if (it == layouts_.end()) return std::nullopt;
  return it->second.layout;
}

namespace {

void AddPending(PendingMap& map, const std::string& transfer, std::vector<store::ObjectKey> keys) {
  std::vector<store::ObjectKey>& entry = map[transfer];
  for (auto& key : keys) {
    if (std::find(entry.begin(), entry.end(), key) == entry.end()) entry.push_back(std::move(key));
  }
}

std::optional<std::vector<store::ObjectKey>> TakePending(PendingMap& map,
                                                         const std::string& transfer) {
  auto it = map.find(transfer);
  if (it == map.end()) return std::nullopt;
  std::vector<store::ObjectKey> keys = std::move(it->second);
  map.erase(it);
  return keys;
}

}  // namespace

void InstanceRegistry::AddPendingWrite(std::int64_t instance_id, const std::string& transfer,
                                       std::vector<store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  if (auto it = instances_.find(instance_id); it != instances_.end()) {
    AddPending(it->second.pending_writes, transfer, std::move(keys));
  }
}

std::optional<std::vector<store::ObjectKey>> InstanceRegistry::TakePendingWrite(
    std::int64_t instance_id, const std::string& transfer) {
  MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return std::nullopt;
  return TakePending(it->second.pending_writes, transfer);
}

void InstanceRegistry::AddPendingRead(std::int64_t instance_id, const std::string& transfer,
                                      std::vector<store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  if (auto it = instances_.find(instance_id); it != instances_.end()) {
    // Reads are counted: a second prepare of the same range holds locks twice.
    std::vector<store::ObjectKey>& entry = it->second.pending_reads[transfer];
    entry.insert(entry.end(), keys.begin(), keys.end());
  }
}

std::optional<std::vector<store::ObjectKey>> InstanceRegistry::TakePendingRead(
    std::int64_t instance_id, const std::string& transfer) {
  MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return std::nullopt;
  return TakePending(it->second.pending_reads, transfer);
}

std::vector<std::int64_t> InstanceRegistry::Silent(TimeMs timeout_ms, TimeMs grace_ms) const {
  MutexLock lock(&mu_);
  const TimeMs now = clock_->NowMs();
  std::vector<std::int64_t> silent;
  for (const auto& [id, instance] : instances_) {
    const TimeMs limit = instance.heard_since_registration ? timeout_ms : grace_ms;
    if (now - instance.last_seen_ms > limit) silent.push_back(id);
  }
  return silent;
}

std::size_t InstanceRegistry::size() const {
  MutexLock lock(&mu_);
  return instances_.size();
}

std::size_t InstanceRegistry::pending_writes() const {
  MutexLock lock(&mu_);
  std::size_t n = 0;
  for (const auto& [id, instance] : instances_) n += instance.pending_writes.size();
  return n;
}

std::size_t InstanceRegistry::pending_reads() const {
  MutexLock lock(&mu_);
  std::size_t n = 0;
  for (const auto& [id, instance] : instances_) n += instance.pending_reads.size();
  return n;
}

}  // namespace lmcache::server
