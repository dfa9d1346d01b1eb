// lmcache/protocol.h: operation identifiers of the wire protocol.
//
// The integer ids 1-34 are the reference's frozen table (LMCache MP, spec 2.4):
// a request's operation frame carries the id as a msgpack integer, or the
// operation's snake_case name as a msgpack string. Operations added by
// lmcache-server (server_info, stats), and those newer reference clients send
// by name only (store_with_chunk_events, ...), have values here that are
// internal and never sent. Values never change once released.
// Thread-safety: constants only.
#pragma once

#include <cstdint>

namespace lmcache {

enum class Op : std::uint8_t {
  kRegisterKvCache = 1,
  kUnregisterKvCache = 2,
  kRegisterQCache = 3,
  kUnregisterQCache = 4,
  kStoreQ = 5,
  kStore = 6,
  kRetrieve = 7,
  kLookup = 8,
  kQueryPrefetchStatus = 9,
  kWaitPrefetchStatus = 10,
  kQueryPrefetchLookupHits = 11,
  kFreeLookupLocks = 12,
  kEndSession = 13,
  kRegisterEngineContext = 14,
  kUnregisterEngineContext = 15,
  kPrepareStore = 16,
  kCommitStore = 17,
  kPrepareRetrieve = 18,
  kCommitRetrieve = 19,
  kClear = 20,
  kGetChunkSize = 21,
  kPing = 22,
  kReportBlockAllocation = 23,
  kNoop = 24,
  kCbRegisterRope = 25,
  kCbUnregisterRope = 26,
  kCbRetrievePreComputed = 27,
  kCbUnifiedLookup = 28,
  kP2pLookupAndLock = 29,
  kP2pQueryLookupResults = 30,
  kP2pUnlockObjects = 31,
  kGetExperimental = 32,
  kCbProtocolHandshake = 33,
  kPollKvEvents = 34,
  // Ours: no integer id on the wire (sent by name only).
  kServerInfo = 100,
  kStats = 101,
  // The reference's, added after the frozen table: by name only.
  kStoreWithChunkEvents = 102,
  kReleaseChunkStoreEvents = 103,
  kSubscribeKvEvents = 104,
  // Ours, by name: clear that answers how many objects it removed (HTTP
  // POST /clear-cache runs it).
  kClearCache = 105,
  // The reference's engine-driven abort (a worker whose copy into its slots
  // failed): by name only.
  kAbortStore = 106,
  // Ours, by name: a fleet member says which requester (URL, boot id) its
  // connection speaks for, before each handshake (fleet/peer_info.h).
  kP2pHello = 107,
  // Ours, by name: a requester ends one lookup task of its own that it will
  // not use (its answer came too late or was unusable), with its locks.
  kP2pEndTask = 108,
  // Ours, by name: a requester releases locks one task of its own took
  // (p2p_unlock_objects by key cannot tell an owner's lives apart).
  kP2pUnlockTask = 109,
  // Ours, by name: a fleet member reads our chunk log (fleet/chunk_log.h),
  // and lists the chunks of our L1, to keep its directory of us in step.
  kP2pChunkEvents = 110,
  kP2pChunkListing = 111,
};

}  // namespace lmcache
