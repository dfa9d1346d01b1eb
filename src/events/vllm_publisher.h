// VllmEventPublisher: publishes the KV event log over ZeroMQ in vLLM's
// KV-events wire format (vllm/distributed/kv_events.py, ZmqEventPublisher),
// so a router that consumes vLLM's events (Dynamo's, llm-d's, vLLM's own
// subscriber) consumes ours with no new code.
//
// * PUB socket (`endpoint`, --kv-events-url; bound): each message is
//   [topic, seq (8 bytes, big-endian, from 0, +1 per message), payload (one
//   KVEventBatch, kv_event_codec.h)]. A topic containing "{model}" is
//   expanded per model (llm-d reads "kv@<pod>@<model>"), so one batch holds
//   one model's events; without it, a batch holds every model's.
// * Replay ROUTER socket (`replay_endpoint`, optional; bound): a client
//   sends [b"", start_seq (8 bytes)] (a REQ socket adds the empty frame)
//   and gets [b"", topic, seq, payload] for every buffered message from
//   start_seq on, then [b"", b"", 0xff x 8, b""] (vLLM after its PR #45177).
// * When the log dropped records this publisher had not sent (it fell
//   behind the log's bounds), it publishes AllBlocksCleared: routers forget
//   what this node held rather than keep announcements it cannot withdraw.
//   A subscriber that falls behind the socket's high-water mark loses
//   messages at ZeroMQ and sees a gap in seq (how vLLM's consumers detect
//   loss and replay).
//
// Publishing runs on the publisher's own thread, woken by the log's
// watcher (one eventfd write per batch), at most one batch per
// `min_interval`: a store never waits for a subscriber, and a storm of
// stores costs one message per interval, not one per store.
//
// Thread-safety: Create/destructor on the controlling thread; Stats from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "events/event_stats.h"
#include "common/wake_fd.h"
#include "events/kv_event_codec.h"
#include "events/kv_event_log.h"
#include "lmcache/status.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace lmcache::events {

struct VllmPublisherConfig {
  std::string endpoint;         // tcp://*:5557, ipc:///path
  std::string replay_endpoint;  // "" for none
  std::string topic;            // "" (vLLM's default); may contain {model}
  std::size_t replay_buffer = 10000;  // messages kept for replay (vLLM's buffer_steps)
  int high_water_mark = 100000;       // vLLM's hwm
  std::size_t max_events_per_batch = 1024;
  std::chrono::microseconds min_interval{5000};  // between batches
  VllmBatchOptions batch;
};

class VllmEventPublisher {
 public:
  // Binds the sockets and starts publishing what the log records from now on.
  static Result<std::unique_ptr<VllmEventPublisher>> Start(const VllmPublisherConfig& config,
                                                           KvEventLog* log);
  ~VllmEventPublisher();
  VllmEventPublisher(const VllmEventPublisher&) = delete;
  VllmEventPublisher& operator=(const VllmEventPublisher&) = delete;

  const std::string& endpoint() const { return bound_endpoint_; }
  const std::string& replay_endpoint() const { return bound_replay_endpoint_; }
  VllmPublisherStats Stats() const;

 private:
  VllmEventPublisher(const VllmPublisherConfig& config, KvEventLog* log);
  Status Bind();
  void Run();
  void PublishNew();
  void Send(const std::string& topic, std::string payload);
  void AnswerReplay();

  const VllmPublisherConfig config_;
  KvEventLog* const log_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> pub_;
  std::unique_ptr<zmq::socket_t> replay_;
  std::string bound_endpoint_;
  std::string bound_replay_endpoint_;
  WakeFd wake_;  // the log appended, or stop
  KvEventLog::WatchId watch_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> wake_pending_{false};  // an eventfd write is outstanding
  std::thread thread_;

  // The publisher thread's.
  std::uint64_t cursor_ = 0;
  std::uint64_t next_seq_ = 0;
  std::vector<std::string> models_seen_;
  std::deque<std::pair<std::uint64_t, std::pair<std::string, std::string>>> buffer_;  // seq, topic, payload

  VllmPublisherCounters counters_;
};

}  // namespace lmcache::events
