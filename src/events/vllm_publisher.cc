#include "events/vllm_publisher.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/clock.h"
#include "common/logging.h"

namespace lmcache::events {
namespace {

constexpr std::string_view kModelPlaceholder = "{model}";

std::string SeqBytes(std::uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[static_cast<std::size_t>(i)] = static_cast<char>(seq & 0xff);
  return out;
}

std::optional<std::uint64_t> ParseSeq(const zmq::message_t& frame) {
  if (frame.size() != 8) return std::nullopt;
  const auto* bytes = static_cast<const std::uint8_t*>(frame.data());
  std::uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq = (seq << 8) | bytes[i];
  return seq;
}

std::string TopicFor(const std::string& pattern, std::string_view model) {
  std::string topic = pattern;
  if (const auto at = topic.find(kModelPlaceholder); at != std::string::npos) {
    topic.replace(at, kModelPlaceholder.size(), model);
  }
  return topic;
}

}  // namespace

VllmEventPublisher::VllmEventPublisher(const VllmPublisherConfig& config, KvEventLog* log)
    : config_(config), log_(log), context_(std::make_unique<zmq::context_t>(1)) {}

Result<std::unique_ptr<VllmEventPublisher>> VllmEventPublisher::Start(
    const VllmPublisherConfig& config, KvEventLog* log) {
  if (!log->enabled()) {
    return InvalidConfig("--kv-events-url needs the KV event log: --kv-event-log-size must be > 0");
  }
  std::unique_ptr<VllmEventPublisher> publisher(new VllmEventPublisher(config, log));
  LMC_ASSIGN_OR_RETURN(publisher->wake_, WakeFd::Create());
  LMC_RETURN_IF_ERROR(publisher->Bind());
  // From what the log records after this point (a router learns the rest
  // from a poll of the log, or from what it sees next).
  publisher->cursor_ = log->Stats().next_seq - 1;
  // One eventfd write per batch, not per append: a store storm appends
  // thousands of times a second, and the publisher reads them all at once.
  publisher->watch_ = log->Watch([p = publisher.get()] {
    if (p->wake_pending_.exchange(true)) return;
    p->wake_.Wake();
  });
  publisher->thread_ = std::thread([p = publisher.get()] { p->Run(); });
  return publisher;
}

Status VllmEventPublisher::Bind() {
  try {
    pub_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pub);
    pub_->set(zmq::sockopt::sndhwm, config_.high_water_mark);
    pub_->set(zmq::sockopt::linger, 0);
    pub_->bind(config_.endpoint);
    bound_endpoint_ = pub_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::kIoError,
                  "--kv-events-url: cannot bind " + config_.endpoint + ": " + e.what());
  }
  if (config_.replay_endpoint.empty()) return Status::Ok();
  try {
    replay_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::router);
    replay_->set(zmq::sockopt::linger, 0);
    replay_->set(zmq::sockopt::maxmsgsize, std::int64_t{1024});
    replay_->bind(config_.replay_endpoint);
    bound_replay_endpoint_ = replay_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::kIoError,
                  "--kv-events-replay-url: cannot bind " + config_.replay_endpoint + ": " + e.what());
  }
  return Status::Ok();
}

VllmEventPublisher::~VllmEventPublisher() {
  if (watch_ != 0) log_->Unwatch(watch_);
  stop_.store(true);
  wake_.Wake();
  if (thread_.joinable()) thread_.join();
}

void VllmEventPublisher::Run() {
  std::vector<zmq::pollitem_t> items;
  items.push_back({nullptr, wake_.fd(), ZMQ_POLLIN, 0});
  if (replay_) items.push_back({replay_->handle(), 0, ZMQ_POLLIN, 0});
  while (!stop_.load()) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) spdlog::error("KV events publisher: poll failed: {}", e.what());
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      wake_.Drain();
      wake_pending_.store(false);  // before the read: a later append wakes us again
    }
    PublishNew();
    if (replay_ && (items[1].revents & ZMQ_POLLIN)) AnswerReplay();
    // At most one batch per interval (vLLM's engines publish once per
    // scheduler step): under a store storm the records of the interval go
    // out as one message, so the thread costs the stores little CPU.
    if (!stop_.load()) std::this_thread::sleep_for(config_.min_interval);
  }
}

void VllmEventPublisher::PublishNew() {
  const bool per_model = config_.topic.find(kModelPlaceholder) != std::string::npos;
  while (true) {
    const KvEventPage page = log_->ReadAfter(std::nullopt, cursor_, config_.max_events_per_batch);
    const double now = WallClockSeconds();
    if (page.lost) {
      // What we had not sent is gone: withdraw everything this node announced.
      KvEvent cleared;
      cleared.kind = KvEventKind::kCleared;
      const KvEvent* one[] = {&cleared};
      const std::string payload = EncodeVllmBatch(one, now, config_.batch);
      if (!per_model) Send(config_.topic, payload);
      for (const std::string& model : models_seen_) {
        if (per_model) Send(TopicFor(config_.topic, model), payload);
      }
      counters_.clears_for_loss.fetch_add(1, std::memory_order_relaxed);
    }
    cursor_ = page.next_cursor;
    if (page.events.empty()) return;
    counters_.events.fetch_add(page.events.size(), std::memory_order_relaxed);
    for (const KvEvent& event : page.events) {
      if (event.kind != KvEventKind::kCleared &&
          std::find(models_seen_.begin(), models_seen_.end(), event.model_name) == models_seen_.end()) {
        models_seen_.push_back(event.model_name);
      }
    }
    if (!per_model) {
      std::vector<const KvEvent*> all;
      for (const KvEvent& event : page.events) all.push_back(&event);
      Send(config_.topic, EncodeVllmBatch(all, now, config_.batch));
    } else {
      for (const std::string& model : models_seen_) {
        std::vector<const KvEvent*> mine;
        for (const KvEvent& event : page.events) {
          if (event.kind == KvEventKind::kCleared || event.model_name == model) mine.push_back(&event);
        }
        if (!mine.empty()) Send(TopicFor(config_.topic, model), EncodeVllmBatch(mine, now, config_.batch));
      }
    }
    if (page.events.size() < config_.max_events_per_batch) return;
  }
}

void VllmEventPublisher::Send(const std::string& topic, std::string payload) {
  static RateLimitedLog failed_log(std::chrono::seconds(10));
  const std::uint64_t seq = next_seq_++;
  const std::string seq_bytes = SeqBytes(seq);
  try {
    // PUB never blocks: past the high-water mark ZeroMQ drops the message
    // for that subscriber, which then sees a gap in seq.
    pub_->send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub_->send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    pub_->send(zmq::buffer(payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    failed_log.Warn("KV events publisher: send failed: {}", e.what());
  }
  counters_.messages.fetch_add(1, std::memory_order_relaxed);
  if (replay_) {
    buffer_.emplace_back(seq, std::make_pair(topic, std::move(payload)));
    while (buffer_.size() > config_.replay_buffer) buffer_.pop_front();
  }
}

void VllmEventPublisher::AnswerReplay() {
  static RateLimitedLog bad_log(std::chrono::seconds(10));
  for (int n = 0; n < 64; ++n) {
    std::vector<zmq::message_t> frames;
    try {
      if (!zmq::recv_multipart(*replay_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        return;
      }
    } catch (const zmq::error_t& e) {
      bad_log.Warn("KV events replay: receive failed: {}", e.what());
      return;
    }
    // [identity, b"", start_seq]
    const std::optional<std::uint64_t> start =
        frames.size() == 3 && frames[1].size() == 0 ? ParseSeq(frames[2]) : std::nullopt;
    if (!start) {
      bad_log.Warn("KV events replay: ignored a request that is not [b\"\", 8-byte seq]");
      continue;
    }
    counters_.replays.fetch_add(1, std::memory_order_relaxed);
    const std::string identity = frames[0].to_string();
    auto send = [&](std::string_view topic, std::string_view seq, std::string_view payload) {
      zmq::multipart_t reply;
      reply.addstr(identity);
      reply.addstr("");
      reply.addstr(std::string(topic));
      reply.addstr(std::string(seq));
      reply.addstr(std::string(payload));
      reply.send(*replay_, static_cast<int>(zmq::send_flags::dontwait));
    };
    try {
      for (const auto& [seq, message] : buffer_) {
        if (seq >= *start) send(message.first, SeqBytes(seq), message.second);
      }
      send("", std::string(8, '\xff'), "");
    } catch (const zmq::error_t& e) {
      bad_log.Warn("KV events replay: reply failed: {}", e.what());
    }
  }
}

VllmPublisherStats VllmEventPublisher::Stats() const {
  VllmPublisherStats stats;
  counters_.CopyTo(&stats);
  return stats;
}

LMC_STATS_ROWS(VllmPublisherStatRows, VllmPublisherStats, LMC_VLLM_PUBLISHER_STATS)

}  // namespace lmcache::events
