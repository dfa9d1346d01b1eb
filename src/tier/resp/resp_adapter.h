// RespAdapter: an L2 tier in Redis or Valkey, standalone or Cluster
// (`{"type":"resp","url":[...],...}`), so the servers of a fleet share one
// cache: what any node stored, every node loads.
//
// One object is one key holding header + payload (object_format.h), written
// by one SET: the SET is the commit point, so a reader sees the whole object
// or nothing. A loaded value is verified against the key it was asked for
// (length, XXH3 of header and payload); one that fails is a miss, is deleted
// and counted, never bytes handed to a worker. Keys are
//   <key_prefix>{<chunk hash, hex>}@<model>@<kv_rank 0x%08x>@<group hex>[@<cache_salt>]
// so tenants (salt), models and ranks never collide, and the hash tag puts
// every rank of one chunk in one slot.
//
// Cluster mode discovers the slot map with CLUSTER SLOTS from any known node,
// routes each command by its key's slot, follows MOVED (updating the map, then
// refreshing it) and ASK (ASKING, this command only) redirections, and batches
// pipelined per node. A node that cannot be reached fails its commands at
// once and is not retried before `retry_interval_ms`, so a dead master costs
// misses, not timeouts, on every request; the condition is logged once per
// node when it goes down and once when it is back. Redis evicts by itself
// (maxmemory-policy allkeys-lru), so LookupAndLock cannot lock: a load may miss
// what the lookup saw, and the prefetch then serves the shorter prefix.
//
// Thread-safety: internally synchronised; any number of threads may call it.
// Lock order: topology_mu_ before a Node's mu (never held across I/O).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/condition_log.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "tier/l2_adapter.h"
#include "tier/object_format.h"
#include "tier/resp/resp_cluster.h"
#include "tier/resp/resp_connection.h"

namespace lmcache::tier {

enum class RespMode { kAuto, kStandalone, kCluster };

struct RespAdapterConfig {
  std::vector<std::string> urls;  // seed nodes (cluster) or the server (standalone)
  RespCredentials credentials;
  RespMode mode = RespMode::kAuto;  // auto: CLUSTER SLOTS tells
  std::string key_prefix = "lmcache:";
  std::uint32_t ttl_seconds = 0;      // 0 = keys do not expire (Redis evicts by LRU)
  std::uint32_t max_in_flight = 16;   // commands pipelined to one node at once
  RespTimeouts timeouts;
  std::chrono::milliseconds retry_interval{1000};  // a failed node is retried after this
};

// The Redis key of `key` under `prefix`.
std::string RespObjectKey(const std::string& prefix, const store::ObjectKey& key);

class RespAdapter final : public BlockingL2Adapter {
 public:
  // Checks the URLs and tries to learn the topology; an unreachable Redis is
  // logged, not fatal (the server serves from L1 and retries).
  static Result<std::unique_ptr<RespAdapter>> Create(const RespAdapterConfig& config);
  ~RespAdapter() override;

  std::vector<Status> StoreNow(std::span<const L2Write> objects) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void Unlock(std::span<const store::ObjectKey> keys) override;
  std::vector<L2LoadOutcome> LoadNow(std::span<const L2Read> reads) override;
  L2AdapterStats Stats() const override;

  struct Counters {
    std::uint64_t redirections = 0;
    std::uint64_t topology_refreshes = 0;
    std::uint64_t transport_failures = 0;
  };
  Counters counters() const;
  bool cluster() const;

  // One command for one key, routed by the key's slot; the result is its reply
  // or why there is none. Public for the tests of routing and redirection.
  // With a `sink`, the op's reply is read by a RespReplyStream into
  // `streamed` (a bulk string's bytes go where the sink says); without one,
  // hiredis parses it into `reply`. The ops of one Execute are all of one kind.
  struct Op {
    RespCommand command;
    std::string_view key;
    RespReply reply;
    std::function<BulkPlacement(std::uint64_t length, std::span<const std::byte> head)> sink;
    StreamedReply streamed;
    Status error;
    bool done = false;
    std::string ask_endpoint;  // set by an ASK redirection
  };
  void Execute(std::span<Op> ops);

 private:
  struct Node;
  explicit RespAdapter(const RespAdapterConfig& config, std::vector<RespEndpoint> seeds);

  // Learns standalone vs cluster and the slot map when not known yet, at most
  // once per retry interval.
  void EnsureTopology() LMC_EXCLUDES(topology_mu_);
  void RefreshTopology(bool force) LMC_EXCLUDES(topology_mu_);
  Node* NodeNamed(const std::string& name) LMC_REQUIRES(topology_mu_);
  // The node an op goes to now; nullptr (and op->error) when none serves it.
  Node* Route(Op* op) LMC_EXCLUDES(topology_mu_);
  // Runs the ops of one node in pipelines of max_in_flight; true when a
  // redirection or a transport failure calls for a topology refresh.
  bool RunOnNode(Node* node, std::vector<Op*>& ops);
  // Sends one pipeline of `ops` (with ASKING before those redirected by ASK)
  // and files each reply with its op; false when the transport failed (every
  // op then carries the error). Sets *refresh on a MOVED redirection.
  bool RunPipeline(RespConnection& connection, std::span<Op* const> ops, bool* refresh);
  // A MOVED or ASK in `error`: records it and returns true (the op goes again).
  bool Redirected(Op* op, std::string_view error, bool* refresh);
  Result<RespConnection> Acquire(Node* node);
  void Release(Node* node, RespConnection connection);
  void NodeFailed(Node* node, const Status& why);
  // What a GET's streamed reply means for `read`, whose payload the sink
  // placed (and `sum` checksummed as it arrived) when `header`, parsed by
  // the sink, matched it; `unplaced` says what a value it refused was.
  static L2LoadOutcome Verify(const Op& op, const L2Read& read,
                              const std::optional<ObjectHeader>& header,
                              const PayloadChecksummer* sum, L2LoadOutcome unplaced);

  const RespAdapterConfig config_;
  const std::vector<RespEndpoint> seeds_;
  const std::string description_;
  const Clock* clock_;
  L2Counters counters_;
  ConditionLog condition_;
  RateLimitedLog corrupt_log_{std::chrono::seconds(10)};
  std::atomic<std::uint64_t> redirections_{0};
  std::atomic<std::uint64_t> refreshes_{0};
  std::atomic<std::uint64_t> transport_failures_{0};

  mutable Mutex topology_mu_;
  bool topology_known_ LMC_GUARDED_BY(topology_mu_) = false;
  bool cluster_ LMC_GUARDED_BY(topology_mu_) = false;
  TimeMs next_refresh_ LMC_GUARDED_BY(topology_mu_) = 0;
  SlotMap slots_ LMC_GUARDED_BY(topology_mu_);
  // By name; never erased, so a Node* stays valid for the adapter's life.
  std::map<std::string, std::unique_ptr<Node>> nodes_ LMC_GUARDED_BY(topology_mu_);
};

}  // namespace lmcache::tier
