// P2pOps: the owner side of the reference's cross-node operations
// (p2p-spec.md sections 4 and 5): p2p_lookup_and_lock (29),
// p2p_query_lookup_results (30) and p2p_unlock_objects (31), over
// fleet::PeerTasks.
//
// A lookup's keys are checked against its layouts before anything is
// locked: each key's object size is what its group's MemoryLayoutDesc says
// (an older peer's single layout_desc covers every key). Where the reference
// fails (groups with different numbers of keys: every key a miss; a group
// missing from group_layout_descs: no reply at all, so its requester waits
// out its deadline) every key of the lookup, or of that group, is a miss
// and the peer still gets its task id. A key the store would refuse (a
// model name with '@', a salt too long) is a miss too. Malformed frames are
// refused with the operation's declared failure value.
//
// The peer is the requester the connection speaks for, once it said so with
// p2p_hello (ours, by name; fleet/requester_lives.h): its connections share
// its tasks, and a new life of it (a new boot id at its URL) ends the old
// one's tasks once none of the old one's connections is open
// (ConnectionClosed). Else the peer is the connection: what a connection took
// before its hello (it reached this server, restarted, ahead of its
// requester's next probe) becomes its life's at the hello, and the tasks of
// a connection that closes without ever saying hello (a reference
// requester) end with it, since no other connection can reach them. A connection that did not
// prove the fleet key (anything but the fleet endpoint, RequestContext::
// fleet_member) gets a task of misses and locks nothing, and its unlocks
// release nothing, unless `serve_unauthenticated` (--p2p-allow-
// unauthenticated) opens the operations as the reference leaves them.
//
// Thread-safety: the handlers may run on any threads at once (PeerTasks
// serialises its table).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/chunk_log.h"
#include "fleet/peer_tasks.h"
#include "fleet/requester_lives.h"
#include "protocol/p2p_codec.h"
#include "server/op_table.h"
#include "store/object_table.h"

namespace lmcache::server {

// What p2p_chunk_events and p2p_chunk_listing read (issue 43): this
// server's chunk log (null: P2P off, both operations refused), its table
// and its pool's size (to estimate how many chunks L1 may hold).
struct P2pChunkSource {
  const fleet::ChunkLog* log = nullptr;
  const store::ObjectTable* table = nullptr;
  std::uint64_t pool_bytes = 0;
};

class P2pOps {
 public:
  P2pOps(fleet::PeerTasks* tasks, bool serve_unauthenticated, P2pChunkSource chunks = {})
      : tasks_(tasks), serve_unauthenticated_(serve_unauthenticated), chunks_(chunks) {}
  // Adds the three rows and p2p_hello (replacing nothing: AdminOps no
  // longer adds them).
  void AddTo(OpTable* table);
  // The transport saw `connection` close.
  void ConnectionClosed(std::string_view connection);

  // The keys PeerTasks gets for `keys` expected in `layouts`: the store's
  // key, and the object size the layout implies (fleet::kUnservable where
  // the key cannot be served: see above).
  static std::vector<fleet::RequestedObject> RequestedObjects(
      const std::vector<protocol::P2pObjectKey>& keys, const protocol::P2pLayouts& layouts);

 private:
  bool Trusted(const RequestContext& context) const {
    return context.fleet_member || serve_unauthenticated_;
  }

  // Who `context` speaks for, as PeerTasks knows it.
  std::string PeerOf(const RequestContext& context) const {
    return lives_.PeerOf(context.connection);
  }
  // The directory operations are a member's: refused to anyone else.
  Status MemberOnly(const RequestContext& context, std::string_view op) const;
  // p2p_chunk_events: the chunk log's records after `cursor`.
  Result<std::string> ChunkEvents(std::int64_t cursor, std::int64_t max_records) const;
  // p2p_chunk_listing: a page of our L1's chunk ids after the key `after`
  // encodes (empty: from the start).
  Result<std::string> ChunkListingPage(const std::string& after, std::int64_t limit) const;
  // Ends the tasks of the lives in `names` (ended by a newer life).
  void EndLives(const std::vector<std::string>& names);

  fleet::PeerTasks* const tasks_;
  const bool serve_unauthenticated_;
  const P2pChunkSource chunks_;
  fleet::RequesterLives lives_;
};

}  // namespace lmcache::server
