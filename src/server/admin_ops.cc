#include "server/admin_ops.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/version.h"
#include "events/kv_event_codec.h"
#include "fleet/peer_info.h"
#include "worker/token_hasher.h"

namespace lmcache::server {
namespace {

struct NoArgs {};
Result<NoArgs> DecodeNothing(Payloads) { return NoArgs{}; }

Result<std::optional<std::int64_t>> DecodePing(Payloads p) {
  // The scheduler pings with nil; older clients send no frame at all.
  if (p.empty()) return std::optional<std::int64_t>();
  return protocol::DecodeOptionalInt(p[0], "instance_id");
}

Result<bool> DecodeClear(Payloads p) {
  if (p.empty()) return false;
  LMC_ASSIGN_OR_RETURN(const std::optional<std::int64_t> force,
                       protocol::DecodeOptionalInt(p[0], "force"));
  return force.value_or(0) != 0;
}

// poll_kv_events' and subscribe_kv_events' arguments (the reference's
// KVEventModule): the reader's model, the last record it consumed, its page size.
struct KvEventQuery {
  std::string model_name;
  std::int64_t cursor = 0;
  std::int64_t max_events = 0;
};

// The reference refuses max_events outside [1, 1024] on its stream; a poll
// asking for more gets at most this many (a page may always be shorter).
constexpr std::int64_t kMaxEventsPerPage = 1024;
// How chunk keys are computed from tokens (worker/token_hasher.h).
constexpr std::string_view kHashAlgorithm = "blake3";

Result<KvEventQuery> ReadKvEventQuery(Payloads p) {
  KvEventQuery query;
  LMC_ASSIGN_OR_RETURN(query.model_name, protocol::DecodeString(p[0], "model_name"));
  LMC_ASSIGN_OR_RETURN(query.cursor, protocol::DecodeInt(p[1], "cursor"));
  LMC_ASSIGN_OR_RETURN(query.max_events, protocol::DecodeInt(p[2], "max_events"));
  if (query.cursor < 0 || query.max_events <= 0) {
    return InvalidArgument("cursor must be >= 0 and max_events >= 1, got cursor " +
                           std::to_string(query.cursor) + " and max_events " +
                           std::to_string(query.max_events));
  }
  return query;
}

// subscribe_kv_events' arguments: the worker instance, then a poll's.
Result<KvEventSubscription> ReadKvEventSubscription(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, protocol::DecodeInt(p[0], "instance_id"));
  LMC_ASSIGN_OR_RETURN(KvEventQuery query, ReadKvEventQuery(p.subspan(1)));
  return KvEventSubscription{instance_id, std::move(query.model_name), query.cursor,
                             query.max_events};
}

Handler Answer(std::string value) {
  return [value](const RequestContext&, Payloads, const Respond& respond) { respond(value); };
}

}  // namespace

bool MayRunDestructive(AdminAccess access, const RequestContext& context) {
  switch (access) {
    case AdminAccess::kAny: return true;
    case AdminAccess::kLocal: return context.local_peer;
    // Every local user (and every container in the host's network namespace)
    // reaches loopback tcp; only the server's user can open its ipc socket,
    // and only the admin token's bearer (or, with --http-admin-open, the
    // operator's choice) gets an HTTP request this far.
    case AdminAccess::kIpc: return context.transport != Transport::kTcp;
    case AdminAccess::kOff: return false;
  }
  return false;
}

void AdminOps::AddTo(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  // Inline (the reference uses its CPU pool): a liveness touch is cheaper than a thread hop.
  table->Add({Op::kPing, "ping", true, P::kInline, 0, 1, 64, F::kFalse},
             Bind(DecodePing, [this](const RequestContext& c, std::optional<std::int64_t> id) {
               return Ping(c, id);
             }));
  table->Add({Op::kClear, "clear", true, P::kCpu, 0, 1, 64, F::kNil},
             Bind(DecodeClear, [this](const RequestContext& c, bool force) -> Result<std::string> {
               LMC_RETURN_IF_ERROR(Clear(c, force).status());  // the reference's clear answers None
               return msgpk::Encoder().Nil().Take();
             }));
  table->Add({Op::kClearCache, "clear_cache", false, P::kCpu, 0, 1, 64, F::kNil},
             Bind(DecodeClear, [this](const RequestContext& c, bool force) -> Result<std::string> {
               LMC_ASSIGN_OR_RETURN(const std::uint64_t cleared, Clear(c, force));
               msgpk::MapWriter m;
               m.Field("cleared_objects").Uint(cleared);
               return m.Take();
             }));
  table->Add({Op::kPollKvEvents, "poll_kv_events", true, P::kInline, 3, 3, 64u << 10,
              F::kKvEventsDisabled},
             Bind(ReadKvEventQuery, [this](const RequestContext&, const KvEventQuery& query) {
               return PollKvEvents(query.model_name, query.cursor, query.max_events);
             }));
  // A stream (the reference's RpcSpec.streaming): batches pushed as the log
  // grows, one per credit. Its failure value nil ends it at the client at
  // once (the client then polls).
  table->AddStream(
      {Op::kSubscribeKvEvents, "subscribe_kv_events", false, P::kInline, 4, 4, 64u << 10, F::kNil},
      [this](const RequestContext& context, Payloads payloads, ReplyFn emit,
             const Respond& respond) {
        auto subscription = ReadKvEventSubscription(payloads);
        if (!subscription.ok()) {
          respond(subscription.status());
          return;
        }
        deps_.kv_streams.Open(context, *subscription, std::move(emit), respond);
      });
  // Per endpoint: a --model-url endpoint answers its model's chunk size
  // (store/chunk_sizes.h); the client has no other way to ask.
  table->Add({Op::kGetChunkSize, "get_chunk_size", true, P::kInline, 0, 0, 0, F::kZero},
             [this](const RequestContext& context, Payloads, const Respond& respond) {
               respond(msgpk::Encoder()
                           .Int(deps_.config.chunk_sizes.Advertised(context.endpoint_model))
                           .Take());
             });
  table->Add({Op::kNoop, "noop", true, P::kInline, 0, 0, 0, F::kEmptyString},
             Answer(msgpk::Encoder().Str("OK").Take()));
  // The reference's experiment names: a client subscribes to KV events
  // (instead of polling) only where "kv_event_stream" is listed, which needs
  // the channel on.
  const bool streams_events = deps_.events != nullptr && deps_.events->enabled();
  table->Add({Op::kGetExperimental, "get_experimental", true, P::kInline, 0, 0, 0, F::kEmptyList},
             Answer(streams_events ? msgpk::Encoder().Array(1).Str("kv_event_stream").Take()
                                   : msgpk::Encoder().Array(0).Take()));
  table->Add({Op::kReportBlockAllocation, "report_block_allocation", true, P::kCpu, 1, 3, 4u << 20,
              F::kNil},
             [this](const RequestContext&, Payloads, const Respond& respond) {
               // Observability only (spec 3.1): counted, not decoded.
               deps_.counters.block_allocation_reports.fetch_add(1, std::memory_order_relaxed);
               respond(msgpk::Encoder().Nil().Take());
             });
  table->Add({Op::kServerInfo, "server_info", false, P::kInline, 0, 0, 0, F::kNil},
             Bind(DecodeNothing, [this](const RequestContext& context, NoArgs) {
               return ServerInfo(context);
             }));
  table->Add({Op::kStats, "stats", false, P::kCpu, 0, 0, 0, F::kNil},
             Bind(DecodeNothing, [this](const RequestContext&, NoArgs) -> Result<std::string> {
               return render_stats_();
             }));
}

void AdminOps::AddUnsupported(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  auto refuse = [](std::string message) -> Handler {
    return [message](const RequestContext&, Payloads, const Respond& respond) {
      respond(Status(ErrorCode::kNotSupported, message));
    };
  };
  const std::string scope =
      " is not supported by lmcache-server (CacheBlend, QStore and per-chunk store events are "
      "out of scope)";
  const std::size_t kMax = 24u << 20;
  const OpSpec rows[] = {
      {Op::kRegisterQCache, "register_q_cache", true, P::kInline, 0, 16, 4u << 20, F::kNil},
      {Op::kUnregisterQCache, "unregister_q_cache", true, P::kInline, 0, 16, 64, F::kNil},
      {Op::kStoreQ, "store_q", true, P::kAffinity, 0, 16, kMax, F::kEventFailure},
      {Op::kCbRegisterRope, "cb_register_rope", true, P::kInline, 0, 16, 1u << 20, F::kNil},
      {Op::kCbUnregisterRope, "cb_unregister_rope", true, P::kInline, 0, 16, 1u << 20, F::kNil},
      {Op::kCbRetrievePreComputed, "cb_retrieve_pre_computed", true, P::kInline, 0, 16, kMax,
       F::kEventFailure},
      {Op::kCbUnifiedLookup, "cb_unified_lookup", true, P::kInline, 0, 16, kMax, F::kNil},
      {Op::kCbProtocolHandshake, "cb_protocol_handshake", true, P::kInline, 0, 16, 1u << 20,
       F::kZeroFalse},
      // Sent by name by newer reference clients (the frozen table ends at 34).
      // Without a row, such a request got the unknown-operation nil, which
      // the client cannot decode as the declared tuple: its future never
      // resolved and it waited out its timeout (300 s in one connector).
      {Op::kStoreWithChunkEvents, "store_with_chunk_events", false, P::kAffinity, 0, 16, 48u << 20,
       F::kChunkEventsFailure},
      {Op::kReleaseChunkStoreEvents, "release_chunk_store_events", false, P::kInline, 0, 16,
       64u << 10, F::kNil},
  };
  for (const OpSpec& row : rows) {
    table->Add(row, refuse(std::string(row.name) + scope));
  }
}

Result<std::string> AdminOps::Ping(const RequestContext& context,
                                   std::optional<std::int64_t> instance) {
  // The scheduler's ping (nil) is about the server: True. A worker's ping is
  // True while this connection holds its registration; False tells a newer
  // reference client to register again (after a restart, a reap, or a
  // reconnect that changed its connection).
  if (!instance) return msgpk::Encoder().Bool(true).Take();
  return msgpk::Encoder().Bool(deps_.instances.Heartbeat(*instance, context.connection)).Take();
}

Result<std::uint64_t> AdminOps::Clear(const RequestContext& context, bool force) {
  if (!MayRunDestructive(deps_.config.admin_access, context)) {
    return Status(ErrorCode::kPermissionDenied,
                  "clear is not allowed from this connection (--admin-ops: the default, ipc, "
                  "allows it only over an ipc endpoint (--url ipc:///PATH), whose 0600 mode "
                  "limits it to the server's user, or over HTTP with the admin token; off "
                  "refuses it everywhere)");
  }
  const std::uint64_t cleared = deps_.table.Clear(force);
  if (deps_.events != nullptr && deps_.events->enabled()) deps_.events->recorder().OnCleared();
  spdlog::warn(
      "clear(force={}) over {}: {} objects removed (locked ones retire when their "
      "leases end)",
      force, TransportName(context.transport), cleared);
  return cleared;
}

Result<std::string> AdminOps::PollKvEvents(const std::string& model_name, std::int64_t cursor,
                                           std::int64_t max_events) const {
  if (deps_.events == nullptr) {  // a test's service without the channel
    events::KvEventPage off;      // enabled = false, incarnation 0
    return events::EncodeKvEventPage(off);
  }
  // Disabled (--kv-event-log-size 0): enabled = false with this process's
  // incarnation, as the reference answers.
  deps_.events->StartRecording();  // the first reader: from now on
  return events::EncodeKvEventPage(deps_.events->log().ReadAfter(
      model_name, static_cast<std::uint64_t>(cursor),
      static_cast<std::size_t>(std::min(max_events, kMaxEventsPerPage))));
}

fleet::PeerInfo OwnPeerInfo(const ServiceConfig& config, const std::string& boot_id) {
  const worker::ChunkHash& none_hash = worker::NoneHash();
  return {
      .boot_id = boot_id,
      .chunk_size = config.chunk_sizes.default_size(),
      .model_chunk_sizes = config.chunk_sizes.overrides(),
      .hash_algorithm = std::string(kHashAlgorithm),
      .none_hash = std::string(reinterpret_cast<const char*>(none_hash.data()), none_hash.size()),
      .advertise_url = config.p2p_advertise_url,
      .key_fingerprint = config.p2p_key_fingerprint,
      .data_channel = config.p2p_data_channel};
}

Result<std::string> AdminOps::ServerInfo(const RequestContext& context) const {
  msgpk::MapWriter e;
  // The P2P handshake's content, for a connection that proved the fleet key.
  if (context.fleet_member && deps_.config.p2p_data_channel.size != 0) {
    const fleet::PeerInfo p2p = OwnPeerInfo(deps_.config, deps_.boot_id);
    p2p.Encode(e.Field(fleet::kPeerInfoField));
  }
  e.Field("version").Str(kVersion);
  e.Field("instance_id").Str(deps_.config.instance_id);
  e.Field("boot_id").Str(deps_.boot_id);
  e.Field("pid").Int(static_cast<std::int64_t>(getpid()));
  e.Field("shm_name").Str(deps_.pool.name());
  e.Field("pool_size").Uint(deps_.pool.size());
  e.Field("chunk_size").Int(deps_.config.chunk_sizes.Advertised(context.endpoint_model));
  if (!deps_.config.chunk_sizes.overrides().empty()) {
    msgpk::Encoder& sizes =
        e.Field("model_chunk_sizes")
            .Map(static_cast<std::uint32_t>(deps_.config.chunk_sizes.overrides().size()));
    for (const auto& [model, size] : deps_.config.chunk_sizes.overrides()) {
      sizes.Str(model).Int(size);
    }
  }
  e.Field("hash_algorithm").Str(kHashAlgorithm);
  msgpk::Encoder& features = e.Field("features").Array(static_cast<std::uint32_t>(features_.size()));
  for (const std::string& feature : features_) features.Str(feature);
  return e.Take();
}

}  // namespace lmcache::server
