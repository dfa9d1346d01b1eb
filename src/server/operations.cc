#include "server/operations.h"

#include <array>

namespace lmcache::server {
namespace {

using F = FailureValue;
using P = Pool;

// Payload counts follow the reference's positional frames (spec 3.1); a range
// allows optional trailing arguments of newer clients.
constexpr std::array kOps = {
    OpSpec{Op::kRegisterKvCache, "register_kv_cache", true, P::kInline, 7, 7, F::kNil},
    OpSpec{Op::kUnregisterKvCache, "unregister_kv_cache", true, P::kInline, 1, 1, F::kNil},
    OpSpec{Op::kRegisterQCache, "register_q_cache", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kUnregisterQCache, "unregister_q_cache", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kStoreQ, "store_q", true, P::kAffinity, 0, 16, F::kStoreRetrieveFailure},
    OpSpec{Op::kStore, "store", true, P::kAffinity, 4, 4, F::kStoreRetrieveFailure},
    OpSpec{Op::kRetrieve, "retrieve", true, P::kAffinity, 5, 5, F::kStoreRetrieveFailure},
    OpSpec{Op::kLookup, "lookup", true, P::kCpu, 1, 2, F::kNil},
    OpSpec{Op::kQueryPrefetchStatus, "query_prefetch_status", true, P::kCpu, 1, 1, F::kZero},
    OpSpec{Op::kWaitPrefetchStatus, "wait_prefetch_status", true, P::kCpu, 1, 2, F::kZero},
    OpSpec{Op::kQueryPrefetchLookupHits, "query_prefetch_lookup_hits", true, P::kCpu, 1, 1,
           F::kZero},
    OpSpec{Op::kFreeLookupLocks, "free_lookup_locks", true, P::kCpu, 1, 2, F::kNil},
    OpSpec{Op::kEndSession, "end_session", true, P::kCpu, 1, 2, F::kNil},
    OpSpec{Op::kRegisterEngineContext, "register_kv_cache_engine_driven_context", true, P::kInline,
           1, 1, F::kFailedRegistration},
    OpSpec{Op::kUnregisterEngineContext, "unregister_kv_cache_engine_driven_context", true,
           P::kInline, 1, 1, F::kNil},
    OpSpec{Op::kPrepareStore, "prepare_store", true, P::kAffinity, 2, 2, F::kEmptyPrepareStore},
    OpSpec{Op::kCommitStore, "commit_store", true, P::kAffinity, 2, 3, F::kFalse},
    OpSpec{Op::kPrepareRetrieve, "prepare_retrieve", true, P::kAffinity, 2, 2,
           F::kFailedPrepareRetrieve},
    OpSpec{Op::kCommitRetrieve, "commit_retrieve", true, P::kAffinity, 2, 2, F::kFalse},
    OpSpec{Op::kClear, "clear", true, P::kCpu, 0, 1, F::kNil},
    OpSpec{Op::kGetChunkSize, "get_chunk_size", true, P::kInline, 0, 0, F::kNil},
    // Inline (the reference uses its CPU pool): a liveness touch is cheaper than a thread hop.
    OpSpec{Op::kPing, "ping", true, P::kInline, 0, 1, F::kFalse},
    OpSpec{Op::kReportBlockAllocation, "report_block_allocation", true, P::kCpu, 3, 3, F::kNil},
    OpSpec{Op::kNoop, "noop", true, P::kInline, 0, 0, F::kNil},
    OpSpec{Op::kCbRegisterRope, "cb_register_rope", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kCbUnregisterRope, "cb_unregister_rope", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kCbRetrievePreComputed, "cb_retrieve_pre_computed", true, P::kInline, 0, 16,
           F::kNil},
    OpSpec{Op::kCbUnifiedLookup, "cb_unified_lookup", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kP2pLookupAndLock, "p2p_lookup_and_lock", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kP2pQueryLookupResults, "p2p_query_lookup_results", true, P::kInline, 0, 16,
           F::kNil},
    OpSpec{Op::kP2pUnlockObjects, "p2p_unlock_objects", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kGetExperimental, "get_experimental", true, P::kInline, 0, 0, F::kEmptyList},
    OpSpec{Op::kCbProtocolHandshake, "cb_protocol_handshake", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kPollKvEvents, "poll_kv_events", true, P::kInline, 0, 16, F::kNil},
    OpSpec{Op::kServerInfo, "server_info", false, P::kInline, 0, 0, F::kNil},
    OpSpec{Op::kStats, "stats", false, P::kCpu, 0, 0, F::kNil},
};

}  // namespace

std::optional<OpSpec> FindOpById(std::int64_t id) {
  for (const OpSpec& spec : kOps) {
    if (spec.frozen_id && static_cast<std::int64_t>(spec.op) == id) return spec;
  }
  return std::nullopt;
}

std::optional<OpSpec> FindOpByName(std::string_view name) {
  if (name == "finish_read") name = "commit_retrieve";
  for (const OpSpec& spec : kOps) {
    if (spec.name == name) return spec;
  }
  return std::nullopt;
}

const OpSpec& SpecOf(Op op) {
  for (const OpSpec& spec : kOps) {
    if (spec.op == op) return spec;
  }
  return kOps.front();  // unreachable: every Op has a row
}

}  // namespace lmcache::server
