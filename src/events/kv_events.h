// KvEvents: the KV event channel assembled: the log, the token bindings and
// the recorder that fills the log. Recording starts with the first reader
// (or at startup with `record_from_start`): a server whose events nobody
// reads pays nothing for them on its stores. The composition root (main) builds it,
// adds the recorder to the object table's listeners and to the L2 tier's
// observers, and hands it to the service (poll_kv_events,
// subscribe_kv_events, the stores' token bindings) and to the vLLM
// publisher.
//
// Thread-safety: as its parts.
#pragma once

#include <cstdint>

#include "events/kv_event_log.h"
#include "events/kv_event_recorder.h"
#include "events/token_bindings.h"

namespace lmcache::events {

struct KvEventsConfig {
  KvEventLogConfig log;                        // log.max_events 0: disabled
  std::size_t token_binding_bytes = 64u << 20;  // tokens of recently stored chunks
  // Record from startup (a publisher is configured), or only from the
  // first poll on: until someone reads events, stores pay nothing for them.
  bool record_from_start = false;
};

class KvEvents {
 public:
  KvEvents(const KvEventsConfig& config, store::ChunkSizes chunk_sizes,
           std::uint64_t incarnation = 0)
      : log_(config.log, incarnation),
        bindings_(config.log.max_events > 0 ? config.token_binding_bytes : 0),
        recorder_(&log_, &bindings_, std::move(chunk_sizes)) {
    if (!config.record_from_start) {
      log_.SetRecording(false);
      bindings_.SetActive(false);
    }
  }

  bool enabled() const { return log_.enabled(); }
  // Called by every reader (a poll, the publisher): from now on what the
  // cache admits and loses is recorded. Idempotent.
  void StartRecording() {
    bindings_.SetActive(true);
    log_.SetRecording(true);
  }
  KvEventLog& log() { return log_; }
  TokenBindings& bindings() { return bindings_; }
  KvEventRecorder& recorder() { return recorder_; }

 private:
  KvEventLog log_;
  TokenBindings bindings_;
  KvEventRecorder recorder_;
};

}  // namespace lmcache::events
