// LastCopyBias: the evictor's view of which of our L1 objects the fleet
// also holds elsewhere (issue 43, section 3: the fleet's last copy is
// evicted last). An object is expendable when a peer in step with our
// directory may hold its chunk and is that chunk's keeper
// (PeerDirectory::KeptElsewhere); the evictor then evicts it before older
// objects that no peer keeps (store/evictor.h bounds how far).
//
// What it costs to be wrong: a false positive of a peer's filter (about
// 1.2e-4 per peer asked) or an eviction on the peer not read yet (up to a
// --p2p-directory-poll) lets a last copy go a little early, as plain LRU
// would have; a stale or unknown peer counts as holding nothing, so the
// bias falls back to LRU while the directory is out of step.
//
// Thread-safety: Expendable from any thread; the directory must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fleet/peer_directory.h"
#include "store/evictor.h"

namespace lmcache::fleet {

class LastCopyBias final : public store::EvictionBias {
 public:
  // `own_incarnation`: our chunk log's, as the peers' directories know us.
  LastCopyBias(const PeerDirectory* directory, std::uint64_t own_incarnation)
      : directory_(directory), own_incarnation_(own_incarnation) {}

  std::vector<bool> Expendable(std::span<const store::ObjectKey> keys) const override;

 private:
  const PeerDirectory* const directory_;
  const std::uint64_t own_incarnation_;
};

}  // namespace lmcache::fleet
