#include "server/p2p_ops.h"

#include <algorithm>
#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/msgpack_codec.h"
#include "fleet/chunk_feed_codec.h"
#include "fleet/p2p_object_key.h"
#include "fleet/peer_info.h"
#include "protocol/wire_codec.h"

namespace lmcache::server {
namespace {

struct LookupArgs {
  std::vector<protocol::P2pObjectKey> keys;
  protocol::P2pLayouts layouts;
};

Result<LookupArgs> DecodeLookup(Payloads p) {
  LookupArgs args;
  LMC_ASSIGN_OR_RETURN(args.keys, protocol::DecodeP2pKeys(p[0]));
  LMC_ASSIGN_OR_RETURN(args.layouts, protocol::DecodeP2pLayouts(p[1]));
  return args;
}

// The store's key, or nullopt where the store's rules refuse it.
std::optional<store::ObjectKey> StoreKey(const protocol::P2pObjectKey& key) {
  if (key.object_group_id > INT32_MAX) return std::nullopt;
  store::ObjectKey out = fleet::FromP2pObjectKey(key);
  if (!store::ValidateObjectKey(out).ok()) return std::nullopt;
  if (!out.tags.empty() && !store::ValidateCanonicalTags(out.tags).ok()) return std::nullopt;
  return out;
}

// An unlock's keys (a key no lock was taken for releases nothing).
Result<std::vector<store::ObjectKey>> DecodeUnlock(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const std::vector<protocol::P2pObjectKey> keys,
                       protocol::DecodeP2pKeys(p[0]));
  std::vector<store::ObjectKey> out;
  out.reserve(keys.size());
  for (const protocol::P2pObjectKey& key : keys) out.push_back(fleet::FromP2pObjectKey(key));
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
bool GroupsEven(const std::vector<protocol::P2pObjectKey>& keys) {
  std::map<std::int64_t, std::size_t> per_group;
  for (const protocol::P2pObjectKey& key : keys) per_group[key.object_group_id] += 1;
  return std::all_of(per_group.begin(), per_group.end(), [&](const auto& entry) {
    return entry.second == per_group.begin()->second;
  });
}

// p2p_chunk_events' arguments: the reader's cursor and page size.
struct ChunkEventsArgs {
  std::int64_t cursor = 0;
  std::int64_t max_records = 0;
};

Result<ChunkEventsArgs> DecodeChunkEvents(Payloads p) {
  ChunkEventsArgs args;
  LMC_ASSIGN_OR_RETURN(args.cursor, protocol::DecodeInt(p[0], "cursor"));
  LMC_ASSIGN_OR_RETURN(args.max_records, protocol::DecodeInt(p[1], "max_records"));
  if (args.cursor < 0 || args.max_records <= 0) {
    return InvalidArgument("cursor must be >= 0 and max_records >= 1");
  }
  return args;
}

struct ChunkListingArgs {
  std::string after;
  std::int64_t limit = 0;
};

Result<ChunkListingArgs> DecodeChunkListingArgs(Payloads p) {
  ChunkListingArgs args;
  LMC_ASSIGN_OR_RETURN(args.after, protocol::DecodeBytes(p[0], "after"));
  LMC_ASSIGN_OR_RETURN(args.limit, protocol::DecodeInt(p[1], "limit"));
  if (args.limit <= 0) return InvalidArgument("limit must be >= 1");
  return args;
}

// A page is at most this long, whatever the reader asks: its reply stays
// far inside a peer's reply bound (fleet/peer_rpc.h).
constexpr std::int64_t kMaxChunkRecords = 4096;
constexpr std::int64_t kMaxListedObjects = 65'536;
// Without resident objects to average, a chunk is taken as this large
// (the estimate only sizes a peer's filter; a short one grows).
constexpr std::uint64_t kAssumedObjectBytes = 1u << 20;

}  // namespace

Status P2pOps::MemberOnly(const RequestContext& context, std::string_view op) const {
  // What L1 holds is the fleet's to know, and a listing walks the table:
  // only a connection that proved the fleet key asks.
  if (Trusted(context)) return Status::Ok();
  return Status(ErrorCode::kPermissionDenied,
                std::string(op) + " is served to fleet members only (over the fleet endpoint)");
}

Result<std::string> P2pOps::ChunkEvents(std::int64_t cursor, std::int64_t max_records) const {
  if (chunks_.log == nullptr) {
    return Status(ErrorCode::kNotSupported, "p2p_chunk_events needs P2P on (--p2p-advertise-url)");
  }
  const fleet::ChunkPage page = chunks_.log->ReadAfter(
      static_cast<std::uint64_t>(cursor),
      static_cast<std::size_t>(std::min(max_records, kMaxChunkRecords)), fleet::ChunkFeedLimits{}.max_chunks);
  return fleet::EncodeChunkPage(page);
}

Result<std::string> P2pOps::ChunkListingPage(const std::string& after, std::int64_t limit) const {
  if (chunks_.log == nullptr || chunks_.table == nullptr) {
    return Status(ErrorCode::kNotSupported, "p2p_chunk_listing needs P2P on (--p2p-advertise-url)");
  }
  std::optional<store::ObjectKey> after_key;
  if (!after.empty()) {
    LMC_ASSIGN_OR_RETURN(const std::vector<protocol::P2pObjectKey> keys,
                         protocol::DecodeP2pKeys(after));
    if (keys.size() != 1) return InvalidArgument("after: not one key");
    after_key = fleet::FromP2pObjectKey(keys[0]);  // a position only: any key orders
  }
  fleet::ChunkListing listing;
  listing.incarnation = chunks_.log->incarnation();
  // Before the walk: what changes during it is in the log after this.
  listing.log_cursor = chunks_.log->last_seq();
  if (!after_key) {  // the first page: how many chunks L1 may hold
    const store::TableStats table = chunks_.table->Stats();
    const std::uint64_t object_bytes =
        table.resident_objects > 0 ? std::max<std::uint64_t>(1, table.resident_bytes / table.resident_objects)
                                   : kAssumedObjectBytes;
    listing.capacity_chunks = chunks_.pool_bytes / object_bytes;
  }
  const std::vector<store::ListedObject> listed = chunks_.table->ListResident(
      after_key ? &*after_key : nullptr,
      static_cast<std::size_t>(std::min(limit, kMaxListedObjects)), nullptr);
  std::vector<store::ObjectKey> keys;
  keys.reserve(listed.size());
  for (const store::ListedObject& object : listed) keys.push_back(object.key);
  listing.chunks = fleet::DistinctChunkIds(keys);
  if (!listed.empty() && listed.size() == static_cast<std::size_t>(std::min(limit, kMaxListedObjects))) {
    const protocol::P2pObjectKey last = fleet::ToP2pObjectKey(listed.back().key);
    listing.next = protocol::EncodeP2pKeys(std::span<const protocol::P2pObjectKey>(&last, 1));
  }
  return fleet::EncodeChunkListing(listing);
}

std::vector<fleet::RequestedObject> P2pOps::RequestedObjects(
    const std::vector<protocol::P2pObjectKey>& keys, const protocol::P2pLayouts& layouts) {
  const auto bytes = GroupBytes(layouts);
  const bool even = GroupsEven(keys);
  std::vector<fleet::RequestedObject> out;
  out.reserve(keys.size());
  for (const protocol::P2pObjectKey& key : keys) {
    fleet::RequestedObject peer_key;
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
  table->Add(
      {Op::kP2pLookupAndLock, "p2p_lookup_and_lock", true, P::kCpu, 2, 2, kMaxBytes, F::kZero},
      Bind(DecodeLookup, [this](const RequestContext& c, const LookupArgs& a) {
        const std::int64_t task =
            tasks_->Lookup(PeerOf(c), RequestedObjects(a.keys, a.layouts), Trusted(c));
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
  // Ours: a member's directory reads what our L1 gained and lost, and
  // lists it (issue 43). Inline: a page is a copy out of the log, a listing
  // page one pass over the shards, each locked on its own.
  table->Add({Op::kP2pChunkEvents, "p2p_chunk_events", false, P::kInline, 2, 2, 64, F::kNil},
             Bind(DecodeChunkEvents,
                  [this](const RequestContext& c, const ChunkEventsArgs& a) -> Result<std::string> {
               LMC_RETURN_IF_ERROR(MemberOnly(c, "p2p_chunk_events"));
               return ChunkEvents(a.cursor, a.max_records);
             }));
  table->Add({Op::kP2pChunkListing, "p2p_chunk_listing", false, P::kCpu, 2, 2, 64u << 10,
              F::kNil},
             Bind(DecodeChunkListingArgs,
                  [this](const RequestContext& c, const ChunkListingArgs& a) -> Result<std::string> {
               LMC_RETURN_IF_ERROR(MemberOnly(c, "p2p_chunk_listing"));
               return ChunkListingPage(a.after, a.limit);
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
