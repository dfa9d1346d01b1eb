#include "worker/instances.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "protocol/device_ipc_wrapper.h"

namespace lmcache::worker {

const char* ReleaseCauseName(ReleaseCause cause) {
  switch (cause) {
    case ReleaseCause::kUnregistered: return "unregistered";
    case ReleaseCause::kDisconnected: return "disconnected";
    case ReleaseCause::kReaped: return "reaped";
    case ReleaseCause::kReplaced: return "replaced";
  }
  return "unknown";
}

std::string ChunkLayout::Describe() const {
  std::string out;
  for (const ObjectPart& part : parts) {
    if (!out.empty()) out += " + ";
    out += "[";
    for (std::size_t i = 0; i < part.shape.size(); ++i) {
      if (i > 0) out += ", ";
      out += std::to_string(part.shape[i]);
    }
    out += "] " + part.dtype;
  }
  if (use_mla) out += " (MLA)";
  if (object_namespace != 0) out += " (layout " + std::to_string(object_namespace) + ")";
  return out;
}

Result<std::uint32_t> DtypeItemSize(const std::string& dtype) {
  // dtype_str may use torch's aliases; the sizes are the wire's one table.
  static const std::array<std::pair<std::string_view, std::string_view>, 6> kAliases = {{
      {"half", "float16"}, {"float", "float32"}, {"double", "float64"},
      {"short", "int16"},  {"int", "int32"},     {"long", "int64"},
  }};
  std::string_view name = dtype;
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& [alias, canonical] : kAliases) {
    if (name == alias) name = canonical;
  }
  if (const auto size = protocol::TorchDtypeSize(name)) return *size;
  return InvalidArgument("dtype_str '" + dtype + "' is not a supported torch dtype name");
}

Result<ChunkLayout> MakeChunkLayout(const EngineContext& p, std::int64_t chunk_size) {
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
  layout.parts = {{layout.shape, layout.dtype}};
  return layout;
}

namespace {

Status NotRegistered(std::int64_t instance_id) {
  return Status(ErrorCode::kNotRegistered,
                "instance " + std::to_string(instance_id) +
                    " is not registered (the server may have restarted or reaped it): "
                    "register the engine context again");
}

Status OtherConnection(std::int64_t instance_id) {
  return Status(ErrorCode::kPermissionDenied,
                "instance " + std::to_string(instance_id) +
                    " was registered from another connection; only that connection may act "
                    "for it (a restarted worker registers again)");
}

}  // namespace

InstanceRegistry::InstanceRegistry(const Clock* clock, std::size_t max_pending)
    : clock_(clock), max_pending_(max_pending) {}

RemovedInstance InstanceRegistry::RemoveLocked(std::map<std::int64_t, Instance>::iterator it) {
  Instance& instance = it->second;
  RemovedInstance removed;
  removed.info = std::move(instance.info);
  for (const auto& [transfer, write] : instance.pending_writes) {
    removed.writes.push_back(write.lease);
  }
  for (const auto& [transfer, leases] : instance.pending_reads) {
    removed.reads.insert(removed.reads.end(), leases.begin(), leases.end());
  }
  auto layout = layouts_.find({removed.info.model_name, removed.info.world_size});
  if (layout != layouts_.end() && --layout->second.refs <= 0) layouts_.erase(layout);
  instances_.erase(it);
  return removed;
}

Result<RegisterOutcome> InstanceRegistry::Register(const EngineContext& context,
                                                   const ChunkLayout& layout,
                                                   std::string_view connection) {
  MutexLock lock(&mu_);
  const TimeMs now = clock_->NowMs();
  RegisterOutcome outcome;
  if (auto it = instances_.find(context.instance_id); it != instances_.end()) {
    Instance& existing = it->second;
    if (existing.connection != connection) {
      // The same id from a new connection: a new process. The old one's
      // staged writes and reads are released by the caller at once.
      outcome.replaced = RemoveLocked(it);
    } else if (existing.info.model_name != context.model_name ||
               existing.info.world_size != context.world_size ||
               !existing.info.layout.SameGeometry(layout)) {
      return Status(ErrorCode::kLayoutMismatch,
                    "instance " + std::to_string(context.instance_id) + " is registered for " +
                        existing.info.model_name + " (world size " +
                        std::to_string(existing.info.world_size) + ", layout " +
                        existing.info.layout.Describe() + "); unregister it before registering " +
                        context.model_name + " with layout " + layout.Describe());
    } else {
      existing.last_seen_ms = now;
      outcome.info = existing.info;
      return outcome;
    }
  }
  const LayoutKey layout_key{context.model_name, context.world_size};
  if (auto it = layouts_.find(layout_key);
      it != layouts_.end() && it->second.refs > 0 && !it->second.layout.SameGeometry(layout)) {
    return Status(ErrorCode::kLayoutMismatch,
                  "model " + context.model_name + " with world size " +
                      std::to_string(context.world_size) + " is already served with layout " +
                      it->second.layout.Describe() + " by another instance; refusing " +
                      layout.Describe() + " (use another model name for another geometry)");
  }
  LayoutRef& ref = layouts_[layout_key];
  if (ref.refs == 0) ref.layout = layout;
  ref.refs += 1;
  Instance instance;
  instance.info = {context.instance_id, next_registration_.fetch_add(1), context.model_name,
                   context.world_size, layout};
  instance.connection = std::string(connection);
  instance.last_seen_ms = now;
  outcome.info = instance.info;
  outcome.is_new = true;
  instances_.emplace(context.instance_id, std::move(instance));
  return outcome;
}

Result<InstanceInfo> InstanceRegistry::Authorize(std::int64_t instance_id,
                                                 std::string_view connection) {
  MutexLock lock(&mu_);
  LMC_ASSIGN_OR_RETURN(auto it, HeldByLocked(instance_id, connection));
  it->second.last_seen_ms = clock_->NowMs();
  it->second.heard_since_registration = true;
  return it->second.info;
}

Result<std::map<std::int64_t, InstanceRegistry::Instance>::iterator> InstanceRegistry::HeldByLocked(
    std::int64_t instance_id, std::string_view connection) {
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return NotRegistered(instance_id);
  // Carried across a takeover: the worker's first request comes on a new
  // connection (its socket reconnected to this process).
  if (it->second.connection.empty() && !connection.empty()) it->second.connection = connection;
  if (it->second.connection != connection) return OtherConnection(instance_id);
  return it;
}

std::vector<CarriedRegistration> InstanceRegistry::Carry(
    const std::function<bool(std::uint64_t registration)>& bound) const {
  std::vector<CarriedRegistration> out;
  for (const InstanceInfo& info : List()) {
    if (bound && bound(info.registration)) continue;
    out.push_back({info.instance_id, info.model_name, info.world_size, info.layout});
  }
  return out;
}

Status InstanceRegistry::Adopt(const CarriedRegistration& carried) {
  MutexLock lock(&mu_);
  if (instances_.contains(carried.instance_id)) {
    return InvalidArgument("instance " + std::to_string(carried.instance_id) + " carried twice");
  }
  const LayoutKey layout_key{carried.model_name, carried.world_size};
  LayoutRef& ref = layouts_[layout_key];
  if (ref.refs > 0 && !ref.layout.SameGeometry(carried.layout)) {
    return Status(ErrorCode::kLayoutMismatch, "carried instance " +
                                                  std::to_string(carried.instance_id) +
                                                  " contradicts the layout of " + carried.model_name);
  }
  if (ref.refs == 0) ref.layout = carried.layout;
  ref.refs += 1;
  Instance instance;
  instance.info = {carried.instance_id, next_registration_.fetch_add(1), carried.model_name,
                   carried.world_size, carried.layout};
  instance.last_seen_ms = clock_->NowMs();
  instances_.emplace(carried.instance_id, std::move(instance));
  return Status::Ok();
}

bool InstanceRegistry::Heartbeat(std::int64_t instance_id, std::string_view connection) {
  return Authorize(instance_id, connection).ok();
}

Result<RemovedInstance> InstanceRegistry::Unregister(std::int64_t instance_id,
                                                     std::string_view connection) {
  MutexLock lock(&mu_);
  LMC_ASSIGN_OR_RETURN(auto it, HeldByLocked(instance_id, connection));
  return RemoveLocked(it);
}

std::optional<RemovedInstance> InstanceRegistry::Remove(std::int64_t instance_id) {
  MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return std::nullopt;
  return RemoveLocked(it);
}

std::vector<RemovedInstance> InstanceRegistry::RemoveConnection(std::string_view connection) {
  MutexLock lock(&mu_);
  std::vector<RemovedInstance> removed;
  for (auto it = instances_.begin(); it != instances_.end();) {
    auto next = std::next(it);
    if (it->second.connection == connection) removed.push_back(RemoveLocked(it));
    it = next;
  }
  return removed;
}

std::optional<std::string> InstanceRegistry::ElementDtypeOf(const std::string& model,
                                                            std::uint32_t object_namespace,
                                                            std::uint64_t object_bytes) const {
  MutexLock lock(&mu_);
  std::optional<std::string> found;
  for (const auto& [key, ref] : layouts_) {
    const ChunkLayout& layout = ref.layout;
    if (key.first != model || layout.object_namespace != object_namespace ||
        layout.object_bytes != object_bytes) {
      continue;
    }
    for (const ObjectPart& part : layout.parts) {
      if (found && *found != part.dtype) return std::nullopt;
      found = part.dtype;
    }
  }
  return found;
}

std::optional<ChunkLayout> InstanceRegistry::LayoutOf(const std::string& model,
                                                      std::int64_t world_size) const {
  MutexLock lock(&mu_);
  auto it = layouts_.find({model, world_size});
  if (it == layouts_.end()) return std::nullopt;
  return it->second.layout;
}

InstanceRegistry::Instance* InstanceRegistry::CurrentLocked(const InstanceInfo& instance) {
  auto it = instances_.find(instance.instance_id);
  if (it == instances_.end() || it->second.info.registration != instance.registration) {
    return nullptr;
  }
  return &it->second;
}

Result<std::optional<PendingWrite>> InstanceRegistry::AddPendingWrite(
    const InstanceInfo& instance, const std::string& transfer, PendingWrite write) {
  MutexLock lock(&mu_);
  Instance* current = CurrentLocked(instance);
  if (current == nullptr) return NotRegistered(instance.instance_id);
  auto [it, inserted] = current->pending_writes.try_emplace(transfer, write);
  if (inserted) {
    if (current->pending_writes.size() > max_pending_) {
      current->pending_writes.erase(it);
      return Status(ErrorCode::kResourceExhausted,
                    "instance " + std::to_string(instance.instance_id) + " has " +
                        std::to_string(max_pending_) +
                        " prepare_store calls without commit_store; commit or abandon some");
    }
    return std::optional<PendingWrite>();
  }
  return std::optional<PendingWrite>(std::exchange(it->second, write));
}

std::optional<PendingWrite> InstanceRegistry::TakePendingWrite(const InstanceInfo& instance,
                                                               const std::string& transfer) {
  MutexLock lock(&mu_);
  Instance* current = CurrentLocked(instance);
  if (current == nullptr) return std::nullopt;
  auto it = current->pending_writes.find(transfer);
  if (it == current->pending_writes.end()) return std::nullopt;
  const PendingWrite write = it->second;
  current->pending_writes.erase(it);
  return write;
}

Status InstanceRegistry::AddPendingRead(const InstanceInfo& instance, const std::string& transfer,
                                        store::LeaseId lease) {
  MutexLock lock(&mu_);
  Instance* current = CurrentLocked(instance);
  if (current == nullptr) return NotRegistered(instance.instance_id);
  if (current->pending_read_count >= max_pending_) {
    return Status(ErrorCode::kResourceExhausted,
                  "instance " + std::to_string(instance.instance_id) + " has " +
                      std::to_string(max_pending_) +
                      " prepare_retrieve calls without commit_retrieve; commit some");
  }
  current->pending_reads[transfer].push_back(lease);
  current->pending_read_count += 1;
  return Status::Ok();
}

std::optional<store::LeaseId> InstanceRegistry::TakePendingRead(const InstanceInfo& instance,
                                                                const std::string& transfer) {
  MutexLock lock(&mu_);
  Instance* current = CurrentLocked(instance);
  if (current == nullptr) return std::nullopt;
  auto it = current->pending_reads.find(transfer);
  if (it == current->pending_reads.end()) return std::nullopt;
  const store::LeaseId lease = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) current->pending_reads.erase(it);
  current->pending_read_count -= 1;
  return lease;
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

std::vector<InstanceInfo> InstanceRegistry::List() const {
  MutexLock lock(&mu_);
  std::vector<InstanceInfo> out;
  for (const auto& [id, instance] : instances_) out.push_back(instance.info);
  return out;
}

RegistryCounts InstanceRegistry::Counts() const {
  MutexLock lock(&mu_);
  RegistryCounts counts;
  counts.instances = instances_.size();
  for (const auto& [id, instance] : instances_) {
    counts.pending_writes += instance.pending_writes.size();
    counts.pending_reads += instance.pending_read_count;
  }
  return counts;
}

LMC_STATS_ROWS(RegistryStatRows, RegistryCounts, LMC_INSTANCE_STATS)

}  // namespace lmcache::worker
