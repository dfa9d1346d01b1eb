#include "server/kv_event_streams.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "events/kv_event_codec.h"

namespace lmcache::server {

struct KvEventStreams::Stream {
  std::string connection;
  std::string uid;
  std::int64_t instance_id = 0;
  std::string model_name;
  std::size_t max_events = 0;
  ReplyFn emit;

  Mutex mu;  // held while a batch of this stream is read and sent
  std::uint64_t cursor LMC_GUARDED_BY(mu) = 0;
  bool credit LMC_GUARDED_BY(mu) = false;
  bool end_requested LMC_GUARDED_BY(mu) = false;
  bool ended LMC_GUARDED_BY(mu) = false;

  void EndLocked() LMC_REQUIRES(mu) {
    ended = true;
    emit(ReplyFrames{{}, std::nullopt, ReplyKind::kStreamEnd});
  }
};

KvEventStreams::KvEventStreams(events::KvEvents* events, const KvEventStreamLimits& limits)
    : events_(events), limits_(limits) {
  if (events_ != nullptr && events_->enabled())
    watch_ = events_->log().Watch([this] { OnAppend(); });
  sender_ = std::thread([this] { RunSender(); });
}

KvEventStreams::~KvEventStreams() { Drain(); }

void KvEventStreams::Open(const RequestContext& context, const KvEventSubscription& subscription,
                          ReplyFn emit, const Respond& respond) {
  if (subscription.cursor < 0 || subscription.max_events < 1 ||
      subscription.max_events > kMaxEventsPerBatch) {
    respond(InvalidArgument("cursor must be >= 0 and max_events in [1, 1024], got cursor " +
                            std::to_string(subscription.cursor) + " and max_events " +
                            std::to_string(subscription.max_events)));
    return;
  }
  if (context.connection_closed) {  // OnClosing has passed: nothing would ever end it
    respond(
        Status(ErrorCode::kUnavailable, "the connection closed before the subscription was read"));
    return;
  }
  auto stream = std::make_shared<Stream>();
  stream->connection = std::string(context.connection);
  stream->uid = std::string(context.uid);
  stream->instance_id = subscription.instance_id;
  stream->model_name = subscription.model_name;
  stream->max_events = static_cast<std::size_t>(subscription.max_events);
  stream->emit = std::move(emit);
  Status refused;
  std::shared_ptr<Stream> replaced;
  {
    MutexLock hold(&stream->mu);  // nothing else sends on it before its first batch
    stream->cursor = static_cast<std::uint64_t>(subscription.cursor);
    {
      MutexLock lock(&mu_);
      refused = Admit(stream, &replaced);
    }
    if (refused.ok()) {
      if (events_ != nullptr) events_->StartRecording();  // the first reader: from now on
      // The status batch, at once (the reference's first read): it tells the
      // client whether the channel is on and which incarnation it reads.
      const events::KvEventPage page = Read(*stream);
      stream->cursor = page.next_cursor;
      counters_.batches.fetch_add(1, std::memory_order_relaxed);
      stream->emit(
          ReplyFrames{events::EncodeKvEventPage(page), std::nullopt, ReplyKind::kStreamItem});
    }
  }
  if (!refused.ok()) {  // answered with no lock held, as a Respond must be
    respond(refused);
    return;
  }
  if (replaced) {
    {
      MutexLock other(&replaced->mu);
      replaced->end_requested = true;
    }
    Wake();
  }
}

Status KvEventStreams::Admit(const std::shared_ptr<Stream>& stream,
                             std::shared_ptr<Stream>* replaced) {
  const StreamKey key{stream->connection, stream->uid};
  std::size_t of_connection = 0;
  for (auto it = streams_.lower_bound({stream->connection, {}});
       it != streams_.end() && it->first.first == stream->connection; ++it) {
    ++of_connection;
  }
  if (draining_) return Status(ErrorCode::kUnavailable, "the server is stopping");
  if (streams_.contains(key)) {
    return InvalidArgument("this connection already streams under this request uid");
  }
  if (of_connection >= limits_.per_connection || streams_.size() >= limits_.total) {
    return Status(ErrorCode::kResourceExhausted,
                  "too many KV event streams open (" + std::to_string(of_connection) +
                      " of this connection, at most " + std::to_string(limits_.per_connection) +
                      "; " + std::to_string(streams_.size()) + " in all, at most " +
                      std::to_string(limits_.total) + ")");
  }
  // One stream per worker instance: a newer subscription replaces the older.
  if (auto it = by_instance_.find(stream->instance_id); it != by_instance_.end()) {
    *replaced = it->second;
  }
  streams_.emplace(key, stream);
  by_instance_[stream->instance_id] = stream;
  counters_.opened.fetch_add(1, std::memory_order_relaxed);
  open_.store(streams_.size(), std::memory_order_relaxed);
  return Status::Ok();
}

void KvEventStreams::Control(std::string_view connection, std::string_view uid,
                             StreamSignal signal) {
  std::shared_ptr<Stream> stream;
  {
    MutexLock lock(&mu_);
    auto it = streams_.find(StreamKey{std::string(connection), std::string(uid)});
    if (it == streams_.end()) {
      counters_.stale_controls.fetch_add(1, std::memory_order_relaxed);  // it ended (an ack racing its end marker), or it never was
      return;
    }
    stream = it->second;
  }
  {
    MutexLock lock(&stream->mu);
    if (signal == StreamSignal::kAck) {
      stream->credit = true;
    } else {
      stream->end_requested = true;
    }
  }
  Wake();
}

void KvEventStreams::CloseConnection(std::string_view connection) {
  std::vector<std::shared_ptr<Stream>> closing;
  {
    MutexLock lock(&mu_);
    const std::string name(connection);
    for (auto it = streams_.lower_bound({name, {}});
         it != streams_.end() && it->first.first == name; ++it) {
      closing.push_back(it->second);
    }
  }
  if (closing.empty()) return;
  for (const auto& stream : closing) {
    MutexLock lock(&stream->mu);
    stream->end_requested = true;
  }
  Wake();
}

void KvEventStreams::Drain() {
  std::map<StreamKey, std::shared_ptr<Stream>> all;
  {
    MutexLock lock(&mu_);
    draining_ = true;
    all.swap(streams_);
    by_instance_.clear();
    open_.store(0, std::memory_order_relaxed);
  }
  for (auto& [key, stream] : all) {
    MutexLock lock(&stream->mu);  // waits for a batch the sender is sending
    if (!stream->ended) stream->EndLocked();
  }
  if (watch_ != 0) {
    events_->log().Unwatch(watch_);
    watch_ = 0;
  }
  {
    MutexLock lock(&wake_mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (sender_.joinable() && sender_.get_id() != std::this_thread::get_id()) sender_.join();
}

KvEventStreamStats KvEventStreams::Stats() const {
  KvEventStreamStats stats;
  counters_.CopyTo(&stats);
  MutexLock lock(&mu_);
  stats.open = streams_.size();
  return stats;
}

void KvEventStreams::OnAppend() {
  if (open_.load(std::memory_order_relaxed) != 0) Wake();
}

void KvEventStreams::Wake() {
  if (wake_pending_.exchange(true)) return;  // the sender has yet to see the last one
  // Under the mutex, so the sender is either before its check or waiting.
  { MutexLock lock(&wake_mu_); }
  wake_.NotifyOne();
}

void KvEventStreams::RunSender() {
  while (true) {
    {
      MutexLock lock(&wake_mu_);
      while (!wake_pending_.load() && !stop_) wake_.Wait(&lock);
      if (stop_) return;
    }
    wake_pending_.store(false);  // what lands from now on wakes it again
    ServeAll();
  }
}

void KvEventStreams::ServeAll() {
  std::vector<std::shared_ptr<Stream>> all;
  {
    MutexLock lock(&mu_);
    all.reserve(streams_.size());
    for (const auto& [key, stream] : streams_) all.push_back(stream);
  }
  for (const auto& stream : all) {
    if (Serve(*stream)) Forget(stream);
  }
}

bool KvEventStreams::Serve(Stream& stream) {
  MutexLock lock(&stream.mu);
  if (stream.ended) return false;  // Drain ended it
  if (stream.end_requested) {
    stream.EndLocked();
    return true;
  }
  if (!stream.credit) return false;
  const events::KvEventPage page = Read(stream);
  stream.cursor = page.next_cursor;
  if (!page.enabled) {  // nothing will ever come: the reference ends it here
    stream.EndLocked();
    return true;
  }
  if (page.events.empty() && !page.lost) return false;  // other models' records only
  stream.credit = false;
  counters_.batches.fetch_add(1, std::memory_order_relaxed);
  stream.emit(ReplyFrames{events::EncodeKvEventPage(page), std::nullopt, ReplyKind::kStreamItem});
  return false;
}

events::KvEventPage KvEventStreams::Read(Stream& stream) {
  stream.mu.AssertHeld();
  if (events_ == nullptr) return {};  // enabled = false, incarnation 0
  return events_->log().ReadAfter(stream.model_name, stream.cursor, stream.max_events);
}

void KvEventStreams::Forget(const std::shared_ptr<Stream>& stream) {
  MutexLock lock(&mu_);
  if (auto it = streams_.find({stream->connection, stream->uid});
      it != streams_.end() && it->second == stream) {
    streams_.erase(it);
  }
  open_.store(streams_.size(), std::memory_order_relaxed);
  if (auto it = by_instance_.find(stream->instance_id);
      it != by_instance_.end() && it->second == stream) {
    by_instance_.erase(it);
  }
}

LMC_STATS_ROWS(KvEventStreamStatRows, KvEventStreamStats, LMC_KV_EVENT_STREAM_STATS)

}  // namespace lmcache::server
