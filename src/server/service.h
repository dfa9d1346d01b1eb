// Service: the protocol's operations behind one RequestHandler.
//
// It owns the state the operations share (ServiceState), the operation
// families that define them (the transfer modes, transfer_mode.h: the
// shared-memory path and the CUDA-IPC path; lookup; admin), the op table
// they fill, and the per-operation statistics (requests, errors, latency),
// indexed by table row. The transport (RouterLoop) resolves and
// runs requests through the RequestHandler interface; tests and tools call
// operations in process with Call().
//
// Every request gets a reply: a failed operation answers its failure value
// (frame 3, the type a reference client decodes) and {code, message}
// (frame 4); a handler that throws costs one request, not the server.
//
// Thread-safety: Handle and Call may run on any number of threads at once.
// Start/StopMaintenance belong to the controlling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "lmcache/status.h"
#include "server/admin_ops.h"
#include "server/lookup_ops.h"
#include "server/op_table.h"
#include "fleet/membership.h"
#include "fleet/peer_info.h"
#include "server/p2p_ops.h"
#include "server/request.h"
#include "server/service_state.h"
#include "server/server_status.h"
#include "stats/sources.h"
#include "server/transfer_mode.h"
#include "server/warm_prefetches.h"

namespace lmcache::server {

// The outcome of an in-process call: OK with frame 3's value, or the error.
struct Reply {
  Status status;
  std::string value;
};

class Service final : public RequestHandler {
 public:
  // `l1`, `clock`, `prefetcher` (may be null: no L2) and `events` (may be
  // null: no KV events; otherwise its recorder already listens to the
  // table) must outlive the service.
  Service(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
          tier::Prefetcher* prefetcher = nullptr, events::KvEvents* events = nullptr,
          const fleet::ChunkLog* chunk_log = nullptr);
  ~Service() override;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // RequestHandler.
  Result<RequestRoute> Route(std::string_view operation_frame) const override;
  void Handle(const RequestRoute& route, const RequestContext& context, Payloads payloads,
              ReplyFn done) override;
  ReplyFrames Refuse(const RequestRoute* route, const Status& status) override;
  void OnStreamControl(std::string_view connection, std::string_view uid,
                       StreamSignal signal) override;
  void OnClosing(std::string_view connection) override;
  void OnDisconnect(std::string_view connection) override;
  // Answers every parked request and parks none from now on, and ends every
  // stream and opens none (the server stops: called before the transport
  // stops, so the answers go out).
  void AnswerParked() {
    state_.parked().Drain();
    state_.kv_streams().Drain();
  }

  // Runs the operation named `op` in process and waits for its reply.
  Reply Call(std::string_view op, Payloads payloads, const RequestContext& context);

  // Reaps silent instances and expires idle sessions (what the maintenance
  // thread runs every min(reap timeout / 4, 5 s)).
  void RunMaintenance();
  void StartMaintenance() { maintenance_.Start(); }
  void StopMaintenance() { maintenance_.Stop(); }
  const PeriodicThread& maintenance() const { return maintenance_; }

  // The subsystems outside the service that fill a part of its snapshot
  // (the transport, the L2 tier, the vLLM-format publisher, the restart
  // that opened the pool) register here; the service's own parts are
  // registered by its constructor.
  stats::Sources<StatsSnapshot>& stats_sources() { return stats_sources_; }
  // Warm restart (docs/architecture.md, "Restarts and upgrades"). The
  // engine-driven registrations a successor carries over (a CUDA-IPC
  // worker's device mappings cannot be: it registers again).
  std::vector<worker::CarriedRegistration> CarriedRegistrations();
  // Holds the predecessor's registrations for the workers' next requests;
  // returns how many were carried (a contradictory one is logged and left).
  std::size_t AdoptRegistrations(const std::vector<worker::CarriedRegistration>& carried);

  StatsSnapshot Snapshot();
  ServerStatus CollectStatus();
  // A transfer mode's fault that health reports (not ready), or nullopt.
  std::optional<std::string> TransferProblem() const;

  const OpTable& ops() const { return table_; }
  const std::string& boot_id() const { return state_.boot_id(); }
  ServiceState& state() { return state_; }
  // While draining (SIGTERM), new registrations are refused; registered
  // workers are served until they leave.
  void SetDraining(bool draining) { state_.instance_rules().set_draining(draining); }
  // Where /status reads the peers of --p2p-peers from (set once, before serving).
  void SetP2pEtcd(std::function<std::vector<fleet::EtcdView>()> etcd) {
    p2p_etcd_ = std::move(etcd);
  }
  void SetP2pPeers(std::function<std::vector<fleet::PeerView>()> peers) {
    p2p_peers_ = std::move(peers);
  }
  // This server's P2P handshake (what server_info tells fleet members).
  fleet::PeerInfo OwnPeerInfo() const;
  worker::InstanceRegistry& instances() { return state_.instances(); }
  worker::SessionManager& sessions() { return state_.sessions(); }
  store::ObjectTable& table() { return state_.table(); }
  // POST /cache/prefetches (warm_prefetches.h).
  WarmPrefetches& warm_prefetches() { return warm_; }

 private:
  struct RowStats {
    OperationCounters counters;
    LatencyHistogram latency;
  };
  void AddOwnStatsSources();
  ReplyFrames Frames(const OpRow& row, const OpResult& result);

  ServiceState state_;
  std::vector<std::unique_ptr<TransferMode>> modes_;  // before the table's handlers use them
  LookupOps lookup_ops_;
  AdminOps admin_ops_;
  P2pOps p2p_ops_;
  WarmPrefetches warm_;
  std::function<std::vector<fleet::PeerView>()> p2p_peers_;
  std::function<std::vector<fleet::EtcdView>()> p2p_etcd_;
  OpTable table_;
  std::unique_ptr<RowStats[]> row_stats_;
  const std::chrono::steady_clock::time_point started_;
  stats::Sources<StatsSnapshot> stats_sources_;

  PeriodicThread maintenance_;
};

}  // namespace lmcache::server
