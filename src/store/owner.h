// Owner and LeaseId: who holds a lease on an L1 object, and which lease.
//
// Every lock in the object table belongs to one lease, and every lease to one
// owner. Owners come in three kinds, so an id of one kind can never be taken
// for another:
//   * kInstance: one registration of a worker (an instance id registered from
//     one connection); a re-registration from another connection is another
//     owner, so the dead process's leases can be dropped without touching the
//     new one's.
//   * kSession: one request session (a lookup's read locks, held for the
//     workers that will retrieve); unique per session object, never derived
//     from a client-chosen string.
//   * kInternal: the server's own work (L2 store and prefetch controllers).
//   * kDevice: the device copies the server runs for one GPU registration
//     (the CUDA-IPC path). Kept apart from kInstance on purpose: when the
//     registration goes, its copies may still be in flight, and their objects
//     are released only once the copies are done, never with the instance.
//   * kPeer: one lookup a peer server made (p2p_lookup_and_lock): its read
//     locks, released by that peer's unlock, by the task's reaper, or when
//     the peer is dropped, and in any case by the read TTL.
// A LeaseId names one acquisition (a prepare_retrieve, a lookup, a staged
// write); 0 is "no lease". Ids are unique for the life of the process.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace lmcache::store {

enum class OwnerKind : std::uint8_t {
  kInstance = 1,
  kSession = 2,
  kInternal = 3,
  kDevice = 4,
  kPeer = 5,
};

struct Owner {
  OwnerKind kind = OwnerKind::kInternal;
  std::uint64_t id = 0;

  static Owner Instance(std::uint64_t registration) { return {OwnerKind::kInstance, registration}; }
  static Owner Session(std::uint64_t session) { return {OwnerKind::kSession, session}; }
  static Owner Internal(std::uint64_t id) { return {OwnerKind::kInternal, id}; }
  static Owner Device(std::uint64_t registration) { return {OwnerKind::kDevice, registration}; }
  static Owner Peer(std::uint64_t task) { return {OwnerKind::kPeer, task}; }

  bool operator==(const Owner&) const = default;
  // "instance:12", "session:7", "internal:1", "device:12", "peer:3".
  std::string DebugString() const;
};

struct OwnerHash {
  std::size_t operator()(const Owner& owner) const noexcept {
    return std::hash<std::uint64_t>{}(owner.id * 8 + static_cast<std::uint64_t>(owner.kind));
  }
};

using LeaseId = std::uint64_t;
inline constexpr LeaseId kNoLease = 0;

}  // namespace lmcache::store
