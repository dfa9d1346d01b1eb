#include "server/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>

#include "common/version.h"
#include "server/gpu_ops.h"
#include "server/transfer_ops.h"

namespace lmcache::server {
namespace {

// Every transfer mode this server knows, in the order server_info lists
// them: a new mode is its op family and one row here.
struct ModeRow {
  std::string_view name;
  std::unique_ptr<TransferMode> (*make)(const TransferDeps& deps, bool serving);
};
constexpr ModeRow kTransferModes[] = {
    {"engine_driven",
     [](const TransferDeps& deps, bool serving) -> std::unique_ptr<TransferMode> {
       return std::make_unique<TransferOps>(deps, serving);
     }},
    {"lmcache_driven",
     [](const TransferDeps& deps, bool serving) -> std::unique_ptr<TransferMode> {
       return std::make_unique<GpuOps>(deps, serving);
     }},
};

std::vector<std::unique_ptr<TransferMode>> MakeModes(ServiceState* s, const std::string& setting) {
  const TransferDeps deps{s->config(),        s->boot_id(),       s->l1().segment(),
                          s->table(),         s->instances(),     s->instance_rules(),
                          s->leases(),        {&s->parked(), &s->table(), &s->clock()}};
  std::vector<std::unique_ptr<TransferMode>> modes;
  for (const ModeRow& row : kTransferModes) modes.push_back(row.make(deps, ModeServes(setting, row.name)));
  return modes;
}

LookupOps::Deps LookupDeps(ServiceState* s) {
  return {s->config(), s->clock(),  s->table(),   s->sessions(), s->leases(),
          s->parked(), s->instances(), s->hasher(), s->counters(), s->prefetcher(),
          s->token_bindings()};
}

AdminOps::Deps AdminDeps(ServiceState* s) {
  return {s->config(),    s->boot_id(),  s->l1().segment(), s->table(),
          s->instances(), s->counters(), s->events(),         s->kv_streams()};
}

std::vector<std::string> Features(const std::vector<std::unique_ptr<TransferMode>>& modes) {
  std::vector<std::string> features;
  for (const auto& mode : modes) {
    if (!mode->serving()) continue;
    for (std::string& f : mode->features()) features.push_back(std::move(f));
  }
  return features;
}

}  // namespace

Service::Service(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
                 tier::Prefetcher* prefetcher, events::KvEvents* events,
                 const fleet::ChunkLog* chunk_log)
    : state_(l1, clock, config, prefetcher, events),
      modes_(MakeModes(&state_, config.transfer_mode)),
      lookup_ops_(LookupDeps(&state_)),
      admin_ops_(AdminDeps(&state_), [this] { return EncodeStatsMsgpack(Snapshot()); }, Features(modes_)),
      p2p_ops_(&state_.peer_tasks(), config.p2p_serve_unauthenticated,
               {chunk_log, &l1->table(), l1->segment().size()}),
      warm_({state_.table(), state_.instances(), state_.hasher(), state_.prefetcher(),
             state_.token_bindings()}),
      started_(std::chrono::steady_clock::now()),
      // A quarter of the reap timeout (as the reference), at most 5 s so sessions expire promptly.
      maintenance_("maintenance",
                   std::chrono::milliseconds(config.worker_reap_timeout_ms > 0
                                                 ? std::min<TimeMs>(
                                                       config.worker_reap_timeout_ms / 4, 5000)
                                                 : 5000),
                   [this] { RunMaintenance(); }) {
  for (const auto& mode : modes_) {
    mode->AddTo(&table_);
    TransferMode* m = mode.get();
    state_.instance_rules().AddListener(
        [m](std::uint64_t registration) { m->OnRegistrationGone(registration); });
  }
  lookup_ops_.AddTo(&table_);
  admin_ops_.AddTo(&table_);
  p2p_ops_.AddTo(&table_);
  AdminOps::AddUnsupported(&table_);
  row_stats_ = std::make_unique<RowStats[]>(table_.rows().size());
  AddOwnStatsSources();
}

Service::~Service() {
  StopMaintenance();
  // Parked requests answer through this object's rows and op families,
  // which go before state_ (whose destructor would drain them too late).
  AnswerParked();
}

Result<RequestRoute> Service::Route(std::string_view operation_frame) const {
  LMC_ASSIGN_OR_RETURN(const OpRow* row, table_.Resolve(operation_frame));
  return RequestRoute{row->spec.pool, row->spec.max_request_bytes, row->index};
}

ReplyFrames Service::Frames(const OpRow& row, const OpResult& result) {
  if (result.ok()) return {result.value(), std::nullopt};
  return {result.failure_value().value_or(EncodeFailureValue(row.spec, result.status())),
          protocol::EncodeErrorMap(result.status())};
}

ReplyFrames Service::Refuse(const RequestRoute* route, const Status& status) {
  state_.counters().refused_requests.fetch_add(1, std::memory_order_relaxed);
  if (route == nullptr) return {msgpk::Encoder().Nil().Take(), protocol::EncodeErrorMap(status)};
  const OpRow& row = table_.rows()[route->row];
  row_stats_[row.index].counters.requests.fetch_add(1, std::memory_order_relaxed);
  row_stats_[row.index].counters.errors.fetch_add(1, std::memory_order_relaxed);
  return Frames(row, status);
}

void Service::Handle(const RequestRoute& route, const RequestContext& context, Payloads payloads,
                     ReplyFn done) {
  const OpRow& row = table_.rows()[route.row];
  RowStats& stats = row_stats_[row.index];
  stats.counters.requests.fetch_add(1, std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  auto responded = std::make_shared<std::atomic<bool>>(false);
  auto record_latency = [&stats, start] { stats.latency.RecordSince(start); };
  // Shared by a stream's items and its final reply.
  auto shared_done = std::make_shared<ReplyFn>(std::move(done));
  Respond respond = [this, &row, &stats, record_latency, responded,
                     shared_done](OpResult result) {
    if (responded->exchange(true)) return;  // a handler answers once
    if (!result.ok()) {
      stats.counters.errors.fetch_add(1, std::memory_order_relaxed);
      spdlog::debug("{} failed: {}", row.spec.name, result.status().ToString());
    }
    record_latency();
    (*shared_done)(Frames(row, result));
  };
  if (payloads.size() < row.spec.min_payloads || payloads.size() > row.spec.max_payloads) {
    const OpSpec& spec = row.spec;
    respond(Status(ErrorCode::kMalformedRequest,
                   std::string(spec.name) + " takes " + std::to_string(spec.min_payloads) +
                       (spec.min_payloads == spec.max_payloads
                            ? ""
                            : " to " + std::to_string(spec.max_payloads)) +
                       " payload frame(s), got " + std::to_string(payloads.size())));
    return;
  }
  try {
    const NoWaitScope no_wait;  // a handler that must wait parks (docs/threading.md)
    if (row.stream) {
      // A stream's latency is its life, from the request to its end.
      ReplyFn emit = [record_latency, responded, shared_done](ReplyFrames frames) {
        if (frames.kind == ReplyKind::kStreamItem) {
          if (!responded->load()) (*shared_done)(std::move(frames));
          return;
        }
        if (responded->exchange(true)) return;
        record_latency();
        (*shared_done)(std::move(frames));
      };
      row.stream(context, payloads, std::move(emit), respond);
      return;
    }
    row.handle(context, payloads, respond);
  } catch (const std::exception& e) {
    // Handlers report failures as Status; an exception here is a bug, but it
    // must cost one request, not the server.
    spdlog::error("{}: unexpected exception: {}", row.spec.name, e.what());
    respond(Internal(std::string(row.spec.name) + " failed: " + e.what()));
  }
}

void Service::OnClosing(std::string_view connection) {
  state_.parked().CloseConnection(connection);
  state_.kv_streams().CloseConnection(connection);
}

void Service::OnStreamControl(std::string_view connection, std::string_view uid,
                              StreamSignal signal) {
  state_.kv_streams().Control(connection, uid, signal);
}

void Service::OnDisconnect(std::string_view connection) {
  for (const worker::RemovedInstance& removed : state_.instances().RemoveConnection(connection)) {
    state_.instance_rules().ReleaseInstance(removed, worker::ReleaseCause::kDisconnected);
  }
  // A scheduler that went away will not free its lookups' locks: release them.
  state_.leases().ReleaseConnectionLookups(connection);
  p2p_ops_.ConnectionClosed(connection);
}

Reply Service::Call(std::string_view op, Payloads payloads, const RequestContext& context) {
  const OpRow* row = table_.FindByName(op);
  if (row == nullptr) {
    return {Status(ErrorCode::kUnknownOperation, "unknown operation '" + std::string(op) + "'"),
            {}};
  }
  if (row->stream) {  // its items need a transport to go to
    return {Status(ErrorCode::kNotSupported,
                   std::string(op) + " is a stream: it is served over the transport only"),
            {}};
  }
  std::promise<ReplyFrames> promise;
  std::future<ReplyFrames> future = promise.get_future();
  Handle({row->spec.pool, row->spec.max_request_bytes, row->index}, context, payloads,
         [&promise](ReplyFrames frames) { promise.set_value(std::move(frames)); });
  ReplyFrames frames = future.get();
  if (frames.error) return {protocol::DecodeErrorMap(*frames.error), std::move(frames.value)};
  return {Status::Ok(), std::move(frames.value)};
}

void Service::RunMaintenance() {
  const ServiceConfig& config = state_.config();
  if (config.worker_reap_timeout_ms > 0) {
    for (const std::int64_t id : state_.instances().Silent(config.worker_reap_timeout_ms,
                                                           config.worker_registration_grace_ms)) {
      if (auto removed = state_.instances().Remove(id)) {
        state_.instance_rules().ReleaseInstance(*removed, worker::ReleaseCause::kReaped);
      }
    }
  }
  if (const std::size_t expired = state_.sessions().ExpireIdle(); expired > 0) {
    spdlog::debug("expired {} idle sessions", expired);
  }
  if (const std::size_t ended = state_.peer_tasks().Reap(); ended > 0) {
    spdlog::debug("ended {} peers' lookups (unqueried past --p2p-lookup-timeout, or past the "
                  "read TTL)", ended);
  }
}

std::optional<std::string> Service::TransferProblem() const {
  for (const auto& mode : modes_) {
    if (auto problem = mode->Problem()) return problem;
  }
  return std::nullopt;
}

std::vector<worker::CarriedRegistration> Service::CarriedRegistrations() {
  return state_.instances().Carry([this](std::uint64_t registration) {
    return std::any_of(modes_.begin(), modes_.end(), [registration](const auto& mode) {
      return mode->BoundToProcess(registration);
    });
  });
}

std::size_t Service::AdoptRegistrations(const std::vector<worker::CarriedRegistration>& carried) {
  std::size_t adopted = 0;
  for (const worker::CarriedRegistration& registration : carried) {
    if (Status status = state_.instances().Adopt(registration); !status.ok()) {
      spdlog::warn("takeover: registration of instance {} not carried: {}",
                   registration.instance_id, status.message());
      continue;
    }
    adopted += 1;
  }
  return adopted;
}

// The service's own parts of a snapshot: its store, workers, sessions,
// parked requests, KV event channel, peers' lookups and transfer modes.
void Service::AddOwnStatsSources() {
  ServiceState* state = &state_;
  stats_sources_.Add("l1", [state](StatsSnapshot* s) {
    s->allocator = state->l1().allocator().Stats();
    s->table = state->table().Stats();
    s->flow = state->l1().flow();
    s->prefault = state->l1().prefault();
    s->evictor = state->l1().evictor().Stats();
    s->quota = state->table().tenants().Stats();
    if (store::SlotJournal* journal = state->table().journal(); journal != nullptr) {
      s->journal = journal->Stats();
    }
  });
  stats_sources_.Add("kv_events", [state](StatsSnapshot* s) {
    if (events::KvEvents* events = state->events(); events != nullptr) {
      s->kv_events.log = events->log().Stats();
      s->kv_events.recorder = events->recorder().Stats();
    }
    s->kv_events.streams = state->kv_streams().Stats();
  });
  stats_sources_.Add("workers", [state](StatsSnapshot* s) {
    s->sessions = state->sessions().size();
    s->session_bytes = state->sessions().bytes();
    s->sessions_dropped_for_memory = state->sessions().dropped_for_memory();
    s->parked = state->parked().Stats();
    s->instances = state->instances().Counts();
    s->released_instances = state->instance_rules().ReleasedCounts();
    s->hash_cache = state->hasher().Stats();
    state->counters().CopyTo(s);
  });
  stats_sources_.Add("p2p", [state](StatsSnapshot* s) { s->p2p_served = state->peer_tasks().Stats(); });
  stats_sources_.Add("transfer_modes", [this](StatsSnapshot* s) {
    for (const auto& mode : modes_) mode->AddStats(s);
  });
}

StatsSnapshot Service::Snapshot() {
  StatsSnapshot s;
  s.version = kVersion;
  s.boot_id = state_.boot_id();
  s.uptime_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  stats_sources_.Fill(&s);
  for (const OpRow& row : table_.rows()) {
    OperationStats& operation = s.operations.emplace_back();
    operation.name = row.spec.name;
    row_stats_[row.index].counters.CopyTo(&operation);
    operation.latency = row_stats_[row.index].latency.Take();
  }
  return s;
}

ServerStatus Service::CollectStatus() {
  ServerStatus status;
  status.stats = Snapshot();
  status.pool_name = state_.l1().segment().name();
  status.chunk_sizes = state_.config().chunk_sizes;
  status.instances = state_.instances().List();
  const std::string& instance_id = state_.config().instance_id;
  status.instance_id = instance_id.empty() ? state_.boot_id() : instance_id;
  status.eviction_policy = std::string(state_.l1().eviction_policy());
  status.eviction_trigger_watermark = state_.l1().evictor().config().trigger_watermark;
  const ServiceConfig& config = state_.config();
  status.p2p = {!config.p2p_advertise_url.empty(), config.p2p_advertise_url,
                config.p2p_key_fingerprint, config.p2p_serve_unauthenticated, {}, {}};
  if (p2p_etcd_) {
    for (fleet::EtcdView& etcd : p2p_etcd_()) {
      status.p2p.etcd.push_back({std::move(etcd.prefix), std::move(etcd.endpoints), etcd.reachable,
                                 etcd.registered, std::move(etcd.last_error), etcd.peers});
    }
  }
  if (p2p_peers_) {
    const TimeMs now = state_.clock().NowMs();
    for (const fleet::PeerView& peer : p2p_peers_()) {
      status.p2p.peers.push_back(
          {peer.url, fleet::PeerStateName(peer.state), peer.reason, peer.boot_id, peer.lives,
           peer.last_answer_ms < 0 ? -1.0 : static_cast<double>(now - peer.last_answer_ms) / 1000,
           peer.rtt_ms, peer.loaded_bytes, peer.load_batches, peer.load_failures, peer.load_gbps,
           peer.chunk_sizes_differ});
    }
  }
  return status;
}

fleet::PeerInfo Service::OwnPeerInfo() const {
  return server::OwnPeerInfo(state_.config(), state_.boot_id());
}

}  // namespace lmcache::server
