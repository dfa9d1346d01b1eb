#include "server/p2p_ops.h"

#include <algorithm>
#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/msgpack_codec.h"
#include "fleet/peer_info.h"
#include "fleet/peer_key_codec.h"
#include "protocol/wire_codec.h"

namespace lmcache::server {
namespace {

struct LookupArgs {
  std::vector<protocol::P2pKey> keys;
  protocol::P2pLayouts layouts;
};

Result<LookupArgs> DecodeLookup(Payloads p) {
  LookupArgs args;
  LMC_ASSIGN_OR_RETURN(args.keys, protocol::DecodeP2pKeys(p[0]));
  LMC_ASSIGN_OR_RETURN(args.layouts, protocol::DecodeP2pLayouts(p[1]));
  return args;
}

// The store's key, or nullopt where the store's rules refuse it.
std::optional<store::ObjectKey> StoreKey(const protocol::P2pKey& key) {
  if (key.object_group_id > INT32_MAX) return std::nullopt;
  store::ObjectKey out = fleet::FromPeerKey(key);
  if (!store::ValidateObjectKey(out).ok()) return std::nullopt;
  if (!out.tags.empty() && !store::ValidateCanonicalTags(out.tags).ok()) return std::nullopt;
  return out;
}

// An unlock's keys (a key no lock was taken for releases nothing).
Result<std::vector<store::ObjectKey>> DecodeUnlock(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const std::vector<protocol::P2pKey> keys, protocol::DecodeP2pKeys(p[0]));
  std::vector<store::ObjectKey> out;
  out.reserve(keys.size());
  for (const protocol::P2pKey& key : keys) out.push_back(fleet::FromPeerKey(key));
  return out;
}

struct UnlockTaskArgs {
  std::int64_t task = 0;
  std::vector<store::ObjectKey> keys;
};

Result<UnlockTaskArgs> DecodeUnlockTask(Payloads p) {
  UnlockTaskArgs args;
  LMC_ASSIGN_OR_RETURN(args.task, protocol::DecodeInt(p[0], "task_id"));
  LMC_ASSIGN_OR_RETURN(args.keys, DecodeUnlock(p.subspan(1)));
  return args;
}

// The object size each group's layout implies; nullopt for a layout we
// cannot size (an unknown dtype): its keys never match.
std::map<std::int64_t, std::optional<std::uint64_t>> GroupBytes(
    const protocol::P2pLayouts& layouts) {
  std::map<std::int64_t, std::optional<std::uint64_t>> bytes;
  for (const auto& [group, layout] : layouts.by_group) {
    Result<std::uint64_t> size = protocol::P2pLayoutBytes(layout);
    bytes[group] = size.ok() && *size > 0 ? std::optional(*size) : std::nullopt;
  }
  return bytes;
}

// The reference's rule: every group must have as many keys as the others.
bool GroupsEven(const std::vector<protocol::P2pKey>& keys) {
  std::map<std::int64_t, std::size_t> per_group;
  for (const protocol::P2pKey& key : keys) per_group[key.object_group_id] += 1;
  return std::all_of(per_group.begin(), per_group.end(), [&](const auto& entry) {
    return entry.second == per_group.begin()->second;
  });
}

}  // namespace

std::vector<fleet::PeerKey> P2pOps::PeerKeys(const std::vector<protocol::P2pKey>& keys,
                                             const protocol::P2pLayouts& layouts) {
  const auto bytes = GroupBytes(layouts);
  const bool even = GroupsEven(keys);
  std::vector<fleet::PeerKey> out;
  out.reserve(keys.size());
  for (const protocol::P2pKey& key : keys) {
    fleet::PeerKey peer_key;
    peer_key.expected_bytes = fleet::kUnservable;
    const auto size = bytes.find(layouts.single ? 0 : key.object_group_id);
    std::optional<store::ObjectKey> store_key = StoreKey(key);
    if (store_key) peer_key.key = std::move(*store_key);
    if (even && store_key && size != bytes.end() && size->second) {
      peer_key.expected_bytes = *size->second;
    }
    out.push_back(std::move(peer_key));
  }
  return out;
}

void P2pOps::AddTo(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  constexpr std::size_t kMaxBytes = 64u << 20;
  table->Add({Op::kP2pLookupAndLock, "p2p_lookup_and_lock", true, P::kCpu, 2, 2, kMaxBytes,
              F::kZero},
             Bind(DecodeLookup, [this](const RequestContext& c, const LookupArgs& a) {
               const std::int64_t task = tasks_->Lookup(PeerOf(c),
                                                        PeerKeys(a.keys, a.layouts), Trusted(c));
               return Result<std::string>(msgpk::Encoder().Int(task).Take());
             }));
  table->Add({Op::kP2pQueryLookupResults, "p2p_query_lookup_results", true, P::kCpu, 1, 1, 64,
              F::kNil},
             Bind([](Payloads p) { return protocol::DecodeInt(p[0], "task_id"); },
                  [this](const RequestContext& c, std::int64_t task) {
                    auto addresses = tasks_->Results(PeerOf(c), task);
                    if (!addresses) return Result<std::string>(msgpk::Encoder().Nil().Take());
                    return Result<std::string>(protocol::EncodeP2pAddresses(*addresses));
                  }));
  table->Add({Op::kP2pUnlockObjects, "p2p_unlock_objects", true, P::kCpu, 1, 1, kMaxBytes,
              F::kNil},
             Bind(DecodeUnlock, [this](const RequestContext& c,
                                       const std::vector<store::ObjectKey>& keys) {
               if (Trusted(c)) tasks_->Unlock(PeerOf(c), keys);
               return Result<std::string>(msgpk::Encoder().Nil().Take());
             }));
  table->Add({Op::kP2pUnlockTask, "p2p_unlock_task", false, P::kCpu, 2, 2, kMaxBytes, F::kNil},
             Bind(DecodeUnlockTask, [this](const RequestContext& c, const UnlockTaskArgs& a) {
               if (Trusted(c)) tasks_->UnlockTask(PeerOf(c), a.task, a.keys);
               return Result<std::string>(msgpk::Encoder().Nil().Take());
             }));
  table->Add({Op::kP2pEndTask, "p2p_end_task", false, P::kCpu, 1, 1, 64, F::kNil},
             Bind([](Payloads p) { return protocol::DecodeInt(p[0], "task_id"); },
                  [this](const RequestContext& c, std::int64_t task) {
                    if (Trusted(c)) tasks_->EndOne(PeerOf(c), task);
                    return Result<std::string>(msgpk::Encoder().Nil().Take());
                  }));
  table->Add({Op::kP2pHello, "p2p_hello", false, P::kInline, 1, 1, 4096, F::kNil},
             Bind([](Payloads p) { return fleet::PeerHello::Decode(p[0]); },
                  [this](const RequestContext& c, const fleet::PeerHello& hello) {
                    // Only a member names a requester (a stranger could end a member's tasks).
                    if (!c.fleet_member) return Result<std::string>(msgpk::Encoder().Nil().Take());
                    const std::string before = PeerOf(c);
                    EndLives(lives_.Hello(c.connection, hello));
                    // What the connection took before it said who it speaks for
                    // (it came back to this server, restarted, ahead of its
                    // requester's next hello) is that requester's.
                    const std::string after = PeerOf(c);
                    if (before == c.connection && after != before) tasks_->Adopt(before, after);
                    return Result<std::string>(msgpk::Encoder().Nil().Take());
                  }));
}

void P2pOps::ConnectionClosed(std::string_view connection) {
  if (lives_.PeerOf(connection) == connection) {
    // Known by itself alone (it never said hello): nothing else can reach
    // its tasks now.
    tasks_->DropPeer(std::string(connection), fleet::PeerTasks::DropReason::kConnectionClosed);
    return;
  }
  EndLives(lives_.Closed(connection));
}

void P2pOps::EndLives(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::size_t ended = tasks_->DropPeer(name);
    spdlog::info("p2p: a requester's life ({}) ended: a newer one said hello and none of its "
                 "connections is open; its {} tasks here ended with their locks",
                 name, ended);
  }
}

}  // namespace lmcache::server
