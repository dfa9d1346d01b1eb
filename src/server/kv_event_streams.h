// KvEventStreams: the subscribe_kv_events streams, the reference's push
// form of poll_kv_events (its KVEventModule.subscribe_kv_events, served over
// its MessagingStream transport: RpcSpec.streaming).
//
// A stream belongs to one client connection and is named there by its
// request's uid. It answers its first batch (a KVEventBatch, the poll's
// shape) at once, then holds one credit: the client's ack grants it, and the
// next batch goes out when it has one and the model's log has something new
// for it (records, or a loss), never an empty batch. A cancel, the
// connection's close, a newer subscription of the same worker instance (one
// stream per instance, as the reference) or the server's drain end it with
// the end marker; so does the first read after the channel turns out to be
// off (the reference ends a disabled stream after its status batch).
//
// Who sends: the opening batch goes out on the request's thread (the
// transport's loop: the row is inline); every later batch and every end is
// sent by this class's own thread ("kv-streams"), woken by the log's
// watcher on each append and by a control that changes a stream; so neither
// a store nor the transport's thread ever reads the log for a stream.
//
// Cost bound: at most `per_connection` streams per connection and `total`
// in all (301 RESOURCE_EXHAUSTED beyond); a stream holds its strings and
// sends at most one batch (at most 1024 records) per credit, so a client
// that stops acking costs nothing more.
//
// Thread-safety: every method from any thread. Lock order: a stream's own
// mutex, held while its batch is read and sent (the log's mutex, then the
// transport's outbox mutex, inside it), comes before mu_ (the index: Open
// indexes a new stream holding its mutex); mu_ is never held while a
// stream's mutex is taken. wake_mu_ is a leaf (the log's watcher takes it
// under the log's watcher mutex).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "server/dispatch_stats.h"
#include "stats/declare.h"
#include "common/mutex.h"
#include "events/kv_events.h"
#include "server/op_table.h"
#include "server/request.h"

namespace lmcache::server {

// subscribe_kv_events' arguments.
struct KvEventSubscription {
  std::int64_t instance_id = 0;
  std::string model_name;
  std::int64_t cursor = 0;
  std::int64_t max_events = 0;
};

struct KvEventStreamLimits {
  std::size_t per_connection = 16;
  std::size_t total = 1024;
};

class KvEventStreams {
 public:
  // The reference refuses max_events outside [1, 1024].
  static constexpr std::int64_t kMaxEventsPerBatch = 1024;

  // `events` may be null (no channel: every stream answers enabled = false
  // and ends); it must outlive this object. Starts the sending thread.
  explicit KvEventStreams(events::KvEvents* events, const KvEventStreamLimits& limits = {});
  ~KvEventStreams();  // Drain()
  KvEventStreams(const KvEventStreams&) = delete;
  KvEventStreams& operator=(const KvEventStreams&) = delete;

  // Opens `context`'s stream (a StreamHandler's `emit` and `respond`):
  // sends its first batch before it returns, or answers a failure through
  // `respond` (bad arguments, a limit, a uid already streaming, draining).
  void Open(const RequestContext& context, const KvEventSubscription& subscription, ReplyFn emit,
            const Respond& respond) LMC_EXCLUDES(mu_);
  // The client's control frame for its stream `uid`.
  void Control(std::string_view connection, std::string_view uid, StreamSignal signal)
      LMC_EXCLUDES(mu_);
  // The connection closed: its streams end (their end markers go nowhere,
  // but the transport releases the connection only once they are answered).
  void CloseConnection(std::string_view connection) LMC_EXCLUDES(mu_);
  // Ends every stream and opens none from now on; returns once none is
  // sending (the transport may stop after it). Idempotent.
  void Drain() LMC_EXCLUDES(mu_);

  KvEventStreamStats Stats() const LMC_EXCLUDES(mu_);

 private:
  struct Stream;
  using StreamKey = std::pair<std::string, std::string>;  // connection, uid

  // Indexes a new stream, or says why not; the stream it replaces (same
  // worker instance) in *replaced.
  Status Admit(const std::shared_ptr<Stream>& stream, std::shared_ptr<Stream>* replaced)
      LMC_REQUIRES(mu_);
  // Sends what each stream is owed: the next batch, or its end.
  void ServeAll() LMC_EXCLUDES(mu_);
  // True when the stream ended now (the caller drops it from the index).
  bool Serve(Stream& stream);
  events::KvEventPage Read(Stream& stream);
  void Forget(const std::shared_ptr<Stream>& stream) LMC_EXCLUDES(mu_);
  void Wake() LMC_EXCLUDES(wake_mu_);
  // The log's watcher: a Wake when a stream is open.
  void OnAppend() LMC_EXCLUDES(wake_mu_);
  void RunSender() LMC_EXCLUDES(wake_mu_);

  events::KvEvents* const events_;
  const KvEventStreamLimits limits_;

  mutable Mutex mu_;
  std::map<StreamKey, std::shared_ptr<Stream>> streams_ LMC_GUARDED_BY(mu_);
  std::unordered_map<std::int64_t, std::shared_ptr<Stream>> by_instance_ LMC_GUARDED_BY(mu_);
  bool draining_ LMC_GUARDED_BY(mu_) = false;
  KvEventStreamCounters counters_;  // opened, batches, stale controls
  // Streams open: a log append wakes the sender only when there are some.
  std::atomic<std::size_t> open_{0};

  // A wake is one atomic exchange while one is pending: a store storm
  // appends thousands of times a second, and the sender serves them at once.
  std::atomic<bool> wake_pending_{false};
  Mutex wake_mu_;
  CondVar wake_;
  bool stop_ LMC_GUARDED_BY(wake_mu_) = false;
  events::KvEventLog::WatchId watch_ = 0;
  std::thread sender_;
};

}  // namespace lmcache::server
