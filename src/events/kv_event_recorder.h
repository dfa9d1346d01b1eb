// KvEventRecorder: turns what the object table and the L2 tier report into
// KV events (kv_event.h) in the log.
//
// It listens to the table (admitted: stored in "CPU"; evicted or deleted:
// removed) and to the L2 tier (written to an adapter: stored in "STORAGE";
// evicted or deleted by it: removed). As the reference does, a stored event
// covers one chunk (the KV ranks and object groups of a chunk collapse
// into it) and needs the chunk's token binding; a removed event lists one
// model's chunks of one callback. A clear adds a "cleared" event after its
// removals. Each event names its tenant by a keyed hash of the cache salt and
// the request tags (events/kv_event.h), never the salt or the tags.
//
// Thread-safety: the callbacks from any threads at once (see StoreListener
// and L2EventObserver); they do their grouping outside every lock and take
// only the log's and the bindings' mutexes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/blake3.h"
#include "events/event_stats.h"
#include "events/kv_event_log.h"
#include "events/token_bindings.h"
#include "store/chunk_sizes.h"
#include "store/listener.h"
#include "tier/l2_event_observer.h"

namespace lmcache::events {

class KvEventRecorder final : public store::StoreListener, public tier::L2EventObserver {
 public:
  // `log` and `bindings` must outlive the recorder.
  // `chunk_sizes`: each event's block size is its model's chunk size.
  KvEventRecorder(KvEventLog* log, TokenBindings* bindings, store::ChunkSizes chunk_sizes);

  void OnAdmitted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  store::AdmissionSource source) override;
  void OnEvicted(std::span<const store::ObjectKey> keys,
                 std::span<const std::uint64_t> bytes) override;
  void OnDeleted(std::span<const store::ObjectKey> keys,
                 std::span<const std::uint64_t> bytes) override;
  void OnL2Stored(const std::string& location, std::span<const store::ObjectKey> keys) override;
  void OnL2Removed(const std::string& location, std::span<const store::ObjectKey> keys) override;
  // After a clear's deletions: every medium dropped everything.
  void OnCleared();

  // The opaque tenant name of a cache salt and a key's request tags
  // (ObjectKey::tags): "" for neither. Tagged and untagged objects of one
  // chunk share its hash, so the tags must tell their events apart.
  std::string TenantOf(std::string_view cache_salt, std::string_view tags = {}) const;
  KvEventRecorderStats Stats() const;

 private:
  void RecordStored(std::string_view medium, const std::string& location,
                    std::span<const store::ObjectKey> keys);
  void RecordRemoved(std::string_view medium, const std::string& location,
                     std::span<const store::ObjectKey> keys);
  KvEvent Event(KvEventKind kind, std::string_view medium, const std::string& location,
                const store::ObjectKey& key) const;

  KvEventLog* const log_;
  TokenBindings* const bindings_;
  const store::ChunkSizes chunk_sizes_;
  Blake3Digest tenant_key_{};  // drawn at startup
  KvEventRecorderCounters counters_;
};

}  // namespace lmcache::events
