#include "tier/resp/resp_adapter.h"

#include <hiredis/hiredis.h>

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "common/blake3.h"
#include "common/mask_secrets.h"
#include "tier/object_format.h"

namespace lmcache::tier {

struct RespAdapter::Node {
  explicit Node(RespEndpoint e)
      : endpoint(std::move(e)), condition("resp L2 node " + endpoint.Name()) {}
  const RespEndpoint endpoint;
  ConditionLog condition;
  Mutex mu;
  std::vector<RespConnection> idle LMC_GUARDED_BY(mu);
  TimeMs retry_at LMC_GUARDED_BY(mu) = 0;  // a failed node is not tried before this
};

namespace {

// Redirections one command may follow before it fails (a slot migrating
// while we look is one MOVED or ASK; more means the cluster is reconfiguring).
constexpr int kMaxRedirections = 5;

RespCommand Command(std::initializer_list<std::string_view> args) {
  RespCommand c;
  for (const std::string_view a : args) c.args[c.argc++] = a;
  return c;
}

// "host:port" of one CLUSTER SLOTS node entry [host, port, id, ...]; an empty
// or "?" host means "the node you asked", whose host we know.
std::string NodeName(const redisReply& entry, const RespEndpoint& asked) {
  if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 2 ||
      entry.element[1]->type != REDIS_REPLY_INTEGER) {
    return {};
  }
  std::string host(ReplyText(*entry.element[0]));
  if (host.empty() || host == "?") host = asked.host;
  RespEndpoint e;
  e.host = host;
  e.port = static_cast<int>(entry.element[1]->integer);
  return e.Name();
}

Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply& reply,
                                                 const RespEndpoint& asked) {
  if (reply.type != REDIS_REPLY_ARRAY) {
    return Status(ErrorCode::kMalformedRequest, "CLUSTER SLOTS did not answer an array");
  }
  std::vector<SlotRange> ranges;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& r = *reply.element[i];
    if (r.type != REDIS_REPLY_ARRAY || r.elements < 3 ||
        r.element[0]->type != REDIS_REPLY_INTEGER || r.element[1]->type != REDIS_REPLY_INTEGER) {
      return Status(ErrorCode::kMalformedRequest, "CLUSTER SLOTS entry is not [first, last, node]");
    }
    const long long first = r.element[0]->integer;
    const long long last = r.element[1]->integer;
    if (first < 0 || last >= kClusterSlots || first > last) {
      return Status(ErrorCode::kMalformedRequest, "CLUSTER SLOTS range out of bounds");
    }
    SlotRange range{static_cast<std::uint16_t>(first), static_cast<std::uint16_t>(last),
                    NodeName(*r.element[2], asked)};
    if (range.endpoint.empty()) {
      return Status(ErrorCode::kMalformedRequest, "CLUSTER SLOTS node entry is not [host, port]");
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

// What the adapter is called in its stats, conditions and logs: its URLs,
// their passwords masked (the description is a /metrics label).
std::string Describe(const RespAdapterConfig& config) {
  std::string d = "resp:";
  for (std::size_t i = 0; i < config.urls.size(); ++i) {
    d += (i ? "," : "") + MaskSecrets(config.urls[i]);  // each URL whole, before joining
  }
  return d;
}

}  // namespace

std::string RespObjectKey(const std::string& prefix, const store::ObjectKey& key) {
  char rank[16];
  std::snprintf(rank, sizeof(rank), "0x%08llx",
                static_cast<unsigned long long>(static_cast<std::uint64_t>(key.kv_rank)));
  char group[16];
  std::snprintf(group, sizeof(group), "%x", static_cast<unsigned>(key.object_group_id));
  std::string out =
      prefix + "{" + ToHex(key.chunk_hash) + "}@" + key.model_name + "@" + rank + "@" + group;
  if (!key.cache_salt.empty()) out += "@" + key.cache_salt;
  if (key.layout_namespace != 0) out += "@L" + std::to_string(key.layout_namespace);
  if (!key.tags.empty()) out += "@@T" + key.tags;  // as the fs adapter's file names
  return out;
}

Result<std::unique_ptr<RespAdapter>> RespAdapter::Create(const RespAdapterConfig& config) {
  if (config.urls.empty()) return InvalidConfig("the resp adapter needs at least one url");
  if (config.key_prefix.find_first_of("{}") != std::string::npos) {
    return InvalidConfig("the resp adapter's key_prefix must not contain '{' or '}' (hash tags)");
  }
  std::vector<RespEndpoint> seeds;
  for (const std::string& url : config.urls) {
    RespCredentials ignored;
    LMC_ASSIGN_OR_RETURN(RespEndpoint e, ParseRespUrl(url, &ignored));
    seeds.push_back(std::move(e));
  }
  std::unique_ptr<RespAdapter> adapter(new RespAdapter(config, std::move(seeds)));
  adapter->EnsureTopology();
  return adapter;
}

RespAdapter::RespAdapter(const RespAdapterConfig& config, std::vector<RespEndpoint> seeds)
    : config_(config),
      seeds_(std::move(seeds)),
      description_(Describe(config)),
      clock_(&SteadyClock::Instance()),
      condition_("resp L2 " + description_) {}

RespAdapter::~RespAdapter() = default;

bool RespAdapter::cluster() const {
  MutexLock lock(&topology_mu_);
  return cluster_;
}

RespAdapter::Counters RespAdapter::counters() const {
  return {redirections_.load(), refreshes_.load(), transport_failures_.load()};
}

RespAdapter::Node* RespAdapter::NodeNamed(const std::string& name) {
  auto it = nodes_.find(name);
  if (it != nodes_.end()) return it->second.get();
  RespEndpoint endpoint;
  if (name.starts_with("unix:")) {
    endpoint.unix_path = name.substr(5);
  } else {
    auto parsed = ParseRespUrl(name, nullptr);
    if (!parsed.ok()) return nullptr;
    endpoint = *parsed;
  }
  auto node = std::make_unique<Node>(std::move(endpoint));
  Node* raw = node.get();
  nodes_.emplace(name, std::move(node));
  return raw;
}

void RespAdapter::EnsureTopology() {
  {
    MutexLock lock(&topology_mu_);
    if (topology_known_ || clock_->NowMs() < next_refresh_) return;
    // Told it is standalone: no CLUSTER SLOTS (a cluster node would answer
    // it and be taken for a cluster); every command goes to the first url.
    if (config_.mode == RespMode::kStandalone) {
      topology_known_ = true;
      cluster_ = false;
      return;
    }
  }
  RefreshTopology(/*force=*/true);
}

void RespAdapter::RefreshTopology(bool force) {
  std::vector<std::pair<Node*, RespEndpoint>> candidates;
  {
    MutexLock lock(&topology_mu_);
    const TimeMs now = clock_->NowMs();
    if (!force && now < next_refresh_) return;
    // At most one refresh per 100 ms: a burst of MOVED replies is one change.
    next_refresh_ = now + (topology_known_ ? 100 : config_.retry_interval.count());
    if (topology_known_ && !cluster_) return;
    for (const RespEndpoint& seed : seeds_) candidates.emplace_back(NodeNamed(seed.Name()), seed);
    for (const auto& [name, node] : nodes_) {
      bool seen = false;
      for (const auto& c : candidates) seen |= c.first == node.get();
      if (!seen) candidates.emplace_back(node.get(), node->endpoint);
    }
  }
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  Status last = Status(ErrorCode::kUnavailable, "no node answered");
  for (auto& [node, endpoint] : candidates) {
    auto connection = Acquire(node);
    if (!connection.ok()) {
      last = connection.status();
      continue;
    }
    const RespCommand slots = Command({"CLUSTER", "SLOTS"});
    auto replies = connection->Pipeline(std::span(&slots, 1));
    if (!replies.ok()) {
      NodeFailed(node, replies.status());
      last = replies.status();
      continue;
    }
    const redisReply& reply = *(*replies)[0];
    Release(node, std::move(*connection));
    MutexLock lock(&topology_mu_);
    if (IsErrorReply(reply) && config_.mode != RespMode::kCluster) {
      // "ERR This instance has cluster support disabled": standalone.
      if (!topology_known_) {
        spdlog::info("resp L2: {} is a standalone server", endpoint.Name());
      }
      topology_known_ = true;
      cluster_ = false;
      condition_.Ok();
      return;
    }
    auto ranges = IsErrorReply(reply)
                      ? Result<std::vector<SlotRange>>(Status(
                            ErrorCode::kInvalidConfig,
                            "mode is cluster but " + endpoint.Name() +
                                " answered CLUSTER SLOTS with: " + std::string(ReplyText(reply))))
                      : ParseClusterSlots(reply, endpoint);
    auto map = ranges.ok() ? SlotMap::FromRanges(*ranges) : Result<SlotMap>(ranges.status());
    if (!map.ok()) {
      last = map.status();
      continue;
    }
    if (!topology_known_ || !cluster_) {
      spdlog::info("resp L2: cluster of {} masters found through {}, {} of {} slots served",
                   map->endpoints().size(), endpoint.Name(), map->served_slots(), kClusterSlots);
    }
    slots_ = std::move(*map);
    for (const std::string& name : slots_.endpoints()) NodeNamed(name);
    topology_known_ = true;
    cluster_ = true;
    condition_.Ok();
    return;
  }
  condition_.Fail("topology unknown", last.message());
}

RespAdapter::Node* RespAdapter::Route(Op* op) {
  MutexLock lock(&topology_mu_);
  if (!topology_known_) {
    op->error = Status(ErrorCode::kUnavailable, "resp L2: no node reachable yet");
    return nullptr;
  }
  if (!cluster_) return NodeNamed(seeds_.front().Name());
  if (!op->ask_endpoint.empty()) return NodeNamed(op->ask_endpoint);
  const std::uint16_t slot = KeySlot(op->key);
  const auto node = slots_.NodeOf(slot);
  if (!node) {
    op->error =
        Status(ErrorCode::kUnavailable, "resp L2: no master serves slot " + std::to_string(slot));
    return nullptr;
  }
  return NodeNamed(slots_.endpoints()[*node]);
}

Result<RespConnection> RespAdapter::Acquire(Node* node) {
  {
    MutexLock lock(&node->mu);
    if (!node->idle.empty()) {
      RespConnection c = std::move(node->idle.back());
      node->idle.pop_back();
      return c;
    }
    if (clock_->NowMs() < node->retry_at) {
      return Status(ErrorCode::kUnavailable, node->endpoint.Name() + " is down (retried every " +
                                                 std::to_string(config_.retry_interval.count()) +
                                                 " ms)");
    }
  }
  auto connection = RespConnection::Open(node->endpoint, config_.credentials, config_.timeouts);
  if (!connection.ok()) NodeFailed(node, connection.status());
  return connection;
}

void RespAdapter::Release(Node* node, RespConnection connection) {
  if (connection.broken()) return;
  node->condition.Ok();
  MutexLock lock(&node->mu);
  // Keep as many idle connections as threads use at once; the rest close.
  if (node->idle.size() < 8) node->idle.push_back(std::move(connection));
}

void RespAdapter::NodeFailed(Node* node, const Status& why) {
  transport_failures_.fetch_add(1, std::memory_order_relaxed);
  node->condition.Fail("unreachable", why.message());
  MutexLock lock(&node->mu);
  node->idle.clear();  // connections to a failed node are suspect
  node->retry_at = clock_->NowMs() + config_.retry_interval.count();
}

bool RespAdapter::Redirected(Op* op, std::string_view error, bool* refresh) {
  const auto redirect = ParseRedirection(error);
  if (!redirect) return false;
  redirections_.fetch_add(1, std::memory_order_relaxed);
  if (redirect->ask) {
    op->ask_endpoint = redirect->endpoint;
  } else {
    MutexLock lock(&topology_mu_);
    slots_.Move(redirect->slot, redirect->endpoint);
    NodeNamed(redirect->endpoint);
    *refresh = true;
  }
  return true;
}

bool RespAdapter::RunPipeline(RespConnection& connection, std::span<Op* const> ops,
                              bool* refresh) {
  std::vector<RespCommand> commands;
  std::vector<Op*> answered_by;  // the op each reply answers; nullptr for ASKING
  for (Op* op : ops) {
    if (!op->ask_endpoint.empty()) {
      commands.push_back(Command({"ASKING"}));
      answered_by.push_back(nullptr);
    }
    commands.push_back(op->command);
    answered_by.push_back(op);
  }
  auto fail = [&ops](const Status& status) {
    for (Op* op : ops) {
      op->error = status;
      op->done = true;
    }
    return false;
  };
  // Bulk replies go where their op's sink says.
  auto file = [this, refresh](Op* op, bool error, std::string_view text) {
    op->ask_endpoint.clear();
    if (error && Redirected(op, text, refresh)) return;  // not done: sent again
    op->done = true;
  };
  if (ops.front()->sink) {
    const BulkSink sink = [&answered_by](std::size_t index, std::uint64_t length,
                                         std::span<const std::byte> head) {
      Op* op = answered_by[index];
      return op != nullptr ? op->sink(length, head) : BulkPlacement{};
    };
    auto replies = connection.PipelineStreamed(commands, sink);
    if (!replies.ok()) return fail(replies.status());
    for (std::size_t r = 0; r < replies->size(); ++r) {
      Op* op = answered_by[r];
      if (op == nullptr) continue;
      op->streamed = std::move((*replies)[r]);
      file(op, op->streamed.kind == StreamedReply::Kind::kError, op->streamed.text);
    }
    return true;
  }
  auto replies = connection.Pipeline(commands);
  if (!replies.ok()) return fail(replies.status());
  for (std::size_t r = 0; r < replies->size(); ++r) {
    Op* op = answered_by[r];
    if (op == nullptr) continue;
    op->reply = std::move((*replies)[r]);
    file(op, IsErrorReply(*op->reply), ReplyText(*op->reply));
  }
  return true;
}

bool RespAdapter::RunOnNode(Node* node, std::vector<Op*>& ops) {
  auto connection = Acquire(node);
  // A node that cannot be reached may have failed over or left the cluster:
  // ask the others who serves its slots now (rate-limited by the caller).
  bool refresh = !connection.ok();
  const std::size_t depth = std::max<std::size_t>(1, config_.max_in_flight);
  for (std::size_t begin = 0; begin < ops.size(); begin += depth) {
    const std::span<Op* const> slice(ops.data() + begin, std::min(ops.size(), begin + depth) - begin);
    if (!connection.ok()) {
      for (Op* op : slice) {
        op->error = connection.status();
        op->done = true;
      }
      continue;
    }
    if (!RunPipeline(*connection, slice, &refresh)) {
      NodeFailed(node, slice.front()->error);
      connection = slice.front()->error;  // the later slices fail at once too
      refresh = true;
    }
  }
  if (connection.ok()) Release(node, std::move(*connection));
  return refresh;
}

void RespAdapter::Execute(std::span<Op> ops) {
  EnsureTopology();
  for (int round = 0; round <= kMaxRedirections; ++round) {
    std::unordered_map<Node*, std::vector<Op*>> by_node;
    for (Op& op : ops) {
      if (op.done) continue;
      Node* node = Route(&op);
      if (node == nullptr) {
        op.done = true;
        continue;
      }
      by_node[node].push_back(&op);
    }
    if (by_node.empty()) return;
    bool refresh = false;
    for (auto& [node, node_ops] : by_node) refresh |= RunOnNode(node, node_ops);
    if (refresh) RefreshTopology(/*force=*/false);
  }
  for (Op& op : ops) {
    if (op.done) continue;
    op.error =
        Status(ErrorCode::kUnavailable, "resp L2: more than " + std::to_string(kMaxRedirections) +
                                            " redirections (the cluster is reconfiguring)");
    op.done = true;
  }
}

std::vector<Status> RespAdapter::StoreNow(std::span<const L2Write> objects) {
  std::vector<Status> results;
  results.reserve(objects.size());
  const std::string ttl = std::to_string(config_.ttl_seconds);
  const std::size_t slice = std::max<std::uint32_t>(1, config_.max_in_flight);
  // In slices of max_in_flight: the pipeline a node gets at once (the values
  // are sent from L1 as they lie, under the store controller's read lease).
  for (std::size_t begin = 0; begin < objects.size(); begin += slice) {
    const std::size_t end = std::min(objects.size(), begin + slice);
    std::vector<std::string> keys, headers;
    std::vector<Op> ops(end - begin);
    keys.reserve(ops.size());
    headers.reserve(ops.size());
    for (std::size_t i = begin; i < end; ++i) {
      const L2Write& object = objects[i];
      keys.push_back(RespObjectKey(config_.key_prefix, *object.key));
      headers.push_back(EncodeObjectHeader(*object.key, object.bytes, 8, object.encoding));
      Op& op = ops[i - begin];
      op.key = keys.back();
      op.command = config_.ttl_seconds == 0
                       ? Command({"SET", keys.back(), headers.back()})
                       : Command({"SET", keys.back(), headers.back(), "EX", ttl});
      // The value is header + payload; the payload is sent from L1 as it lies.
      op.command.continued = 2;
      op.command.continuation = std::string_view(
          reinterpret_cast<const char*>(object.bytes.data()), object.bytes.size());
    }
    Execute(ops);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      Op& op = ops[i];
      Status status = op.error;
      if (status.ok() && (op.reply == nullptr || IsErrorReply(*op.reply))) {
        status = Status(ErrorCode::kIoError,
                        "SET refused: " + std::string(op.reply ? ReplyText(*op.reply) : ""));
      }
      if (status.ok()) {
        counters_.stored_objects.fetch_add(1, std::memory_order_relaxed);
        counters_.stored_bytes.fetch_add(objects[begin + i].bytes.size(),
                                         std::memory_order_relaxed);
      } else {
        counters_.store_failures.fetch_add(1, std::memory_order_relaxed);
      }
      results.push_back(std::move(status));
    }
  }
  return results;
}

std::vector<bool> RespAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  std::vector<std::string> names;
  names.reserve(keys.size());
  std::vector<Op> ops(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    names.push_back(RespObjectKey(config_.key_prefix, keys[i]));
    ops[i].key = names.back();
    ops[i].command = Command({"EXISTS", names.back()});
  }
  Execute(ops);
  std::vector<bool> held(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    held[i] = ops[i].error.ok() && ops[i].reply != nullptr &&
              ops[i].reply->type == REDIS_REPLY_INTEGER && ops[i].reply->integer == 1;
  }
  return held;
}

void RespAdapter::Unlock(std::span<const store::ObjectKey>) {}

std::vector<L2LoadOutcome> RespAdapter::LoadNow(std::span<const L2Read> reads) {
  std::vector<L2LoadOutcome> outcomes;
  outcomes.reserve(reads.size());
  const std::size_t slice = std::max<std::uint32_t>(1, config_.max_in_flight);
  for (std::size_t begin = 0; begin < reads.size(); begin += slice) {
    const std::size_t end = std::min(reads.size(), begin + slice);
    std::vector<std::string> names;
    names.reserve(end - begin);
    std::vector<Op> ops(end - begin);
    // What each reply's head said, seen by the sink before the payload lands.
    std::vector<std::optional<ObjectHeader>> headers(end - begin);
    // The payload's checksum, taken piece by piece as it arrives.
    std::vector<std::unique_ptr<PayloadChecksummer>> sums(end - begin);
    std::vector<L2LoadOutcome> unplaced(end - begin, L2LoadOutcome::kCorrupt);
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t at = i - begin;
      names.push_back(RespObjectKey(config_.key_prefix, *reads[i].key));
      Op& op = ops[at];
      op.key = names.back();
      op.command = Command({"GET", names.back()});
      // The payload goes straight into its L1 slot when the value is what a
      // SET of ours wrote for an object of this size.
      op.sink = [&read = reads[i], &header = headers[at], &sum = sums[at], &why = unplaced[at]](
                    std::uint64_t length, std::span<const std::byte> head) -> BulkPlacement {
        header.reset();
        auto parsed = ParseObjectHeader(head);
        if (!parsed.ok() && parsed.status().code() == ErrorCode::kNotSupported) {
          why = L2LoadOutcome::kMissing;  // a newer server's encoding: kept, not served
          return {};
        }
        if (!parsed.ok() || parsed->header_bytes + parsed->payload_bytes != length) {
          why = L2LoadOutcome::kCorrupt;  // truncated or padded: not what a SET wrote
          return {};
        }
        // Another server of the fleet registered this model with another
        // geometry: its object is intact but not ours to load (or delete).
        if (parsed->object_bytes() != read.out.size()) {
          why = L2LoadOutcome::kMissing;
          return {};
        }
        const std::uint64_t skip = parsed->header_bytes;
        // An encoded payload lands at the start of the object's buffer.
        const std::span<std::byte> payload = read.out.first(parsed->payload_bytes);
        header = std::move(parsed).value();
        sum = std::make_unique<PayloadChecksummer>();  // afresh: a redirected op is read again
        return {payload, skip,
                [summer = sum.get()](std::span<const std::byte> piece) { summer->Add(piece); }};
      };
    }
    Execute(ops);
    std::vector<Op> deletes;
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t at = i - begin;
      const L2LoadOutcome outcome = Verify(ops[at], reads[i], headers[at], sums[at].get(), unplaced[at]);
      if (outcome == L2LoadOutcome::kCorrupt) {
        corrupt_log_.Log(spdlog::level::warn, "resp L2: {} failed its check; deleted", names[at]);
        Op& del = deletes.emplace_back();
        del.key = names[at];
        del.command = Command({"DEL", names[at]});
      }
      counters_.CountLoad(outcome, reads[i].out.size());
      outcomes.push_back(outcome);
    }
    if (!deletes.empty()) Execute(deletes);
  }
  return outcomes;
}

L2LoadOutcome RespAdapter::Verify(const Op& op, const L2Read& read,
                                  const std::optional<ObjectHeader>& header,
                                  const PayloadChecksummer* sum, L2LoadOutcome unplaced) {
  if (!op.error.ok()) return L2LoadOutcome::kFailed;
  switch (op.streamed.kind) {
    case StreamedReply::Kind::kNil:
      return L2LoadOutcome::kMissing;
    case StreamedReply::Kind::kBulk:
      break;
    default:
      return L2LoadOutcome::kFailed;  // an error reply
  }
  if (!op.streamed.placed || !header || sum == nullptr) return unplaced;
  if (!VerifyObjectSummed(*header, *read.key, sum->bytes(), sum->Digest()).ok()) {
    return L2LoadOutcome::kCorrupt;
  }
  return DecodePayload(header->encoding, header->payload_bytes, read.out).ok()
             ? L2LoadOutcome::kLoaded
             : L2LoadOutcome::kCorrupt;
}

L2AdapterStats RespAdapter::Stats() const {
  L2AdapterStats s;
  counters_.CopyTo(&s);
  s.type = "resp";
  s.description = description_;
  std::string condition = condition_.current();
  MutexLock lock(&topology_mu_);
  for (const auto& [name, node] : nodes_) {
    const std::string c = node->condition.current();
    if (!c.empty()) condition += (condition.empty() ? "" : "; ") + name + " " + c;
  }
  s.condition = condition;
  return s;
}

}  // namespace lmcache::tier
