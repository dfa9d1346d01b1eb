#include "tier/s3/s3_adapter.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>

#include "tier/indexed_adapter.h"
#include "tier/object_format.h"
#include "tier/s3/s3_object_name.h"
#include "tier/s3/s3_object_receiver.h"
#include "tier/s3/s3_xml.h"

namespace lmcache::tier {
namespace {

// A size an object of ours can have in the bucket (the gateway's word for it
// goes into the index's byte counts).
bool PlausibleSize(std::uint64_t bytes) {
  constexpr std::uint64_t kLargest = 1ull << 40;
  return bytes > kHeaderFixedBytesV1 && bytes <= kLargest;
}

std::int64_t ListingClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A batch's results, filled by its calls' completions in any order; the
// last one hands them on.
template <typename Outcome, typename Done>
class S3Batch {
 public:
  S3Batch(std::size_t size, Outcome initial, Done done)
      : outcomes_(size, initial), remaining_(size), done_(std::move(done)) {}
  void Set(std::size_t i, Outcome outcome) {
    outcomes_[i] = std::move(outcome);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_(std::move(outcomes_));
  }

 private:
  std::vector<Outcome> outcomes_;
  std::atomic<std::size_t> remaining_;
  Done done_;
};

}  // namespace

struct S3Adapter::LookupState {
  std::vector<store::ObjectKey> keys;
  std::vector<std::uint8_t> held;  // bytes, not vector<bool>'s shared bits: see ContinueLookup
  std::size_t cursor = 0;  // keys before it are decided
  LookupDone done;
  std::atomic<std::size_t> pending{0};
  std::atomic<bool> window_missed{false};
};

struct S3Adapter::ListingState {
  std::int64_t started_ms = 0;
  std::uint64_t listed = 0;
  std::uint64_t foreign = 0;
  std::string last_token;  // a gateway that hands the same token again is not followed
};

Result<std::unique_ptr<S3Adapter>> S3Adapter::Create(const S3AdapterConfig& config) {
  std::unique_ptr<S3Adapter> adapter(new S3Adapter(config));
  LMC_ASSIGN_OR_RETURN(adapter->client_, S3Client::Create(config.client));
  auto listing = std::make_shared<ListingState>();
  listing->started_ms = ListingClockMs();
  adapter->ListPage(listing);
  return adapter;
}

S3Adapter::S3Adapter(const S3AdapterConfig& config)
    : config_(config),
      index_(config.max_capacity_bytes),
      condition_("s3 L2 " + config.client.bucket) {}

// The client stops first, while everything its completions touch (the
// index, the counters, client_ itself) is still there.
S3Adapter::~S3Adapter() { client_->Shutdown(); }

std::string S3Adapter::NameOf(const store::ObjectKey& key) const {
  return S3ObjectName(config_.key_prefix, key);
}

void S3Adapter::Note(const S3Response& response) {
  if (response.shut_down) return;  // the server is stopping, not the gateway failing
  if (!response.error.ok()) {
    if (response.error.code() == ErrorCode::kCorrupt) return;  // the object, not the gateway
    condition_.Fail("unreachable", response.error.message());
    return;
  }
  const long status = response.http_status;
  const S3Error error = ParseS3Error(response.body);
  const std::string code = error.code.empty() ? "HTTP " + std::to_string(status) : error.code;
  if (status == 401 || status == 403) {
    // A HEAD's refusal has no body to name the cause: it stays in the
    // condition a PUT or GET named, so the log says it once.
    const std::string current = condition_.current();
    condition_.Fail(error.code.empty() && current.starts_with("access refused")
                        ? current
                        : "access refused (" + code + ")",
                    error.message + " (check the credentials and the bucket's policy)");
  } else if (status >= 500) {
    condition_.Fail("failing", code);
  } else if ((status < 200 || status >= 300) && !(status == 404 && code != "NoSuchBucket")) {
    // Any refusal but a missing object (which is an answer): a wrong
    // region, a bucket that is not there, a redirect.
    condition_.Fail("refused (" + code + ")",
                    error.message + " (check the endpoint, the bucket and the region)");
  } else {
    condition_.Ok();
  }
}

void S3Adapter::Evicted(const store::ObjectKey& key, std::uint64_t bytes) {
  counters_.evicted_objects.fetch_add(1, std::memory_order_relaxed);
  counters_.evicted_bytes.fetch_add(bytes, std::memory_order_relaxed);
  DeleteObject(key);
  NotifyRemoved(key);
}

void S3Adapter::ObserveRemovals(RemovalObserver observer) {
  MutexLock lock(&observer_mu_);
  removal_observer_ = std::move(observer);
}

void S3Adapter::NotifyRemoved(const store::ObjectKey& key) {
  RemovalObserver observer;
  {
    MutexLock lock(&observer_mu_);
    observer = removal_observer_;
  }
  if (observer) observer(std::span(&key, 1));
}

void S3Adapter::DeleteObject(const store::ObjectKey& key) {
  S3Call call;
  call.method = S3Method::kDelete;
  call.object = NameOf(key);
  call.done = [this](S3Response response) { Note(response); };
  client_->Submit(std::move(call));
}

void S3Adapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  if (objects.empty()) return done({});
  auto batch =
      std::make_shared<S3Batch<Status, StoreDone>>(objects.size(), Status::Ok(), std::move(done));
  // The headers live until their PUTs complete: each call holds its own.
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const L2Write& object = objects[i];
    const store::ObjectKey& key = *object.key;
    if (index_.Contains(key)) {
      batch->Set(i, Status::Ok());
      continue;
    }
    auto header = std::make_shared<const std::string>(
        EncodeObjectHeader(key, object.bytes, 8, object.encoding));
    const std::uint64_t total = header->size() + object.bytes.size();
    const L2Index::Reservation reserved = index_.Reserve(
        key.cache_salt, total,
        [this](const store::ObjectKey& victim, std::uint64_t bytes) { Evicted(victim, bytes); });
    if (reserved != L2Index::Reservation::kReserved) {
      const bool over_quota = reserved == L2Index::Reservation::kOverQuota;
      (over_quota ? counters_.over_quota_stores : counters_.store_failures)
          .fetch_add(1, std::memory_order_relaxed);
      batch->Set(i,
                 Status(ErrorCode::kResourceExhausted,
                        over_quota ? "the tenant is at its quota" : "s3 L2 is at max_capacity_gb"));
      continue;
    }
    S3Call call;
    call.method = S3Method::kPut;
    call.object = NameOf(key);
    call.body = {std::as_bytes(std::span(*header)), object.bytes};
    call.done = [this, batch, i, header, key, total,
                 payload = object.bytes.size()](S3Response response) {
      Note(response);
      if (response.ok()) {
        index_.Commit(key, total);
        counters_.stored_objects.fetch_add(1, std::memory_order_relaxed);
        counters_.stored_bytes.fetch_add(payload, std::memory_order_relaxed);
        batch->Set(i, Status::Ok());
        return;
      }
      index_.Unreserve(key.cache_salt, total);
      counters_.store_failures.fetch_add(1, std::memory_order_relaxed);
      batch->Set(i, !response.error.ok()
                        ? response.error
                        : Status(ErrorCode::kIoError, "S3 PUT: HTTP " +
                                                          std::to_string(response.http_status) +
                                                          " " + ParseS3Error(response.body).code));
    };
    client_->Submit(std::move(call));
  }
}

std::vector<bool> S3Adapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  std::promise<std::vector<bool>> answer;
  auto future = answer.get_future();
  SubmitLookup(keys, 0, [&answer](std::vector<bool> flags) { answer.set_value(std::move(flags)); });
  return future.get();
}

void S3Adapter::SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                             LookupDone done) {
  (void)object_bytes;  // a HEAD cannot tell an encoded object's L1 size; the load checks it
  // A gateway that refuses connections holds nothing a load could get: the
  // lookup says so at once, and the cascade's next tier serves the prefix.
  if (client_->down()) return done(std::vector<bool>(keys.size(), false));
  auto state = std::make_shared<LookupState>();
  state->keys.assign(keys.begin(), keys.end());
  const std::vector<bool> indexed = index_.LookupAndLock(keys);
  state->held.assign(indexed.begin(), indexed.end());
  state->done = std::move(done);
  ContinueLookup(state);
}

void S3Adapter::ContinueLookup(const std::shared_ptr<LookupState>& state) {
  std::vector<std::size_t> window;
  while (state->cursor < state->keys.size() && window.size() < kLookupWindow) {
    if (state->held[state->cursor] == 0) window.push_back(state->cursor);
    ++state->cursor;
  }
  if (window.empty()) {
    auto done = std::move(state->done);
    return done(std::vector<bool>(state->held.begin(), state->held.end()));
  }
  state->pending.store(window.size(), std::memory_order_relaxed);
  for (const std::size_t i : window) {
    S3Call call;
    call.method = S3Method::kHead;
    call.object = NameOf(state->keys[i]);
    call.done = [this, state, i](S3Response response) {
      Note(response);
      const store::ObjectKey& key = state->keys[i];
      bool held = false;
      if (response.ok() && PlausibleSize(response.content_length)) {
        // Another server's object (or one from before a restart the
        // listing has not reached): known from now on.
        if (!index_.Contains(key)) index_.AddExisting(key, response.content_length);
        held = index_.LookupAndLock(std::span(&key, 1))[0];
      }
      // Completions of one window may run on two threads (the client's, and
      // a caller's once the client is stopping): each writes its own byte.
      state->held[i] = held ? 1 : 0;
      if (!held) state->window_missed.store(true, std::memory_order_relaxed);
      if (state->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      if (state->window_missed.load(std::memory_order_relaxed)) {
        state->cursor = state->keys.size();  // the prefix ends in this window
      }
      ContinueLookup(state);
    };
    client_->Submit(std::move(call));
  }
}

void S3Adapter::Unlock(std::span<const store::ObjectKey> keys) { index_.Unlock(keys); }

void S3Adapter::SubmitLoad(std::span<const L2Read> reads, LoadDone done) {
  if (reads.empty()) return done({});
  auto batch = std::make_shared<S3Batch<L2LoadOutcome, LoadDone>>(
      reads.size(), L2LoadOutcome::kFailed, std::move(done));
  for (std::size_t i = 0; i < reads.size(); ++i) {
    const L2Read& read = reads[i];
    auto receiver = std::make_shared<S3ObjectReceiver>(read);
    S3Call call;
    call.method = S3Method::kGet;
    call.object = NameOf(*read.key);
    call.sink = [receiver](std::uint64_t offset, std::int64_t length,
                           std::span<const std::byte> piece) {
      return receiver->Accept(offset, length, piece);
    };
    call.done = [this, batch, i, receiver, read](S3Response response) {
      Note(response);
      const L2LoadOutcome outcome = receiver->Finish(response);
      const store::ObjectKey& key = *read.key;
      if (outcome == L2LoadOutcome::kCorrupt) {
        corrupt_log_.Log(spdlog::level::warn, "s3 L2: {} failed its check; deleted", NameOf(key));
        index_.Erase(key);
        DeleteObject(key);
        NotifyRemoved(key);
      } else if (outcome == L2LoadOutcome::kMissing && response.http_status == 404) {
        index_.Erase(key);  // gone from the bucket (another server, the lifecycle)
      }
      counters_.CountLoad(outcome, read.out.size());
      batch->Set(i, outcome);
    };
    client_->Submit(std::move(call));
  }
}

void S3Adapter::ListPage(const std::shared_ptr<ListingState>& state,
                         const std::string& continuation) {
  S3Call call;
  call.method = S3Method::kGet;
  call.query = {{"list-type", "2"}, {"max-keys", std::to_string(config_.list_page_objects)}};
  if (!config_.key_prefix.empty()) call.query.emplace_back("prefix", config_.key_prefix);
  if (!continuation.empty()) call.query.emplace_back("continuation-token", continuation);
  call.done = [this, state](S3Response response) {
    Note(response);
    if (response.shut_down) return FinishListing(state);
    if (!response.ok()) {
      spdlog::warn("s3 L2: listing {} stopped after {} objects: {}", client_->Location(),
                   state->listed,
                   response.error.ok() ? "HTTP " + std::to_string(response.http_status) + " " +
                                             ParseS3Error(response.body).code
                                       : response.error.message());
      return FinishListing(state);
    }
    auto page = ParseListObjectsV2(response.body);
    if (!page.ok()) {
      spdlog::warn("s3 L2: listing {}: {}", client_->Location(), page.status().message());
      return FinishListing(state);
    }
    // Oldest first within the page, so its least recently stored go first
    // (across pages, and beside stores running meanwhile, only roughly).
    std::sort(page->objects.begin(), page->objects.end(),
              [](const ListedS3Object& a, const ListedS3Object& b) {
                return a.last_modified_ms < b.last_modified_ms;
              });
    for (const ListedS3Object& object : page->objects) {
      // Others' objects count too: a prefix full of them is not walked forever.
      if (state->listed + state->foreign >= config_.max_listed_objects) break;
      const auto key = ParseS3ObjectName(config_.key_prefix, object.name);
      if (!key || !PlausibleSize(object.size_bytes)) {
        ++state->foreign;  // someone else's object under our prefix: left alone
        continue;
      }
      if (!index_.Contains(*key)) index_.AddExisting(*key, object.size_bytes);
      ++state->listed;
    }
    {
      MutexLock lock(&listed_mu_);
      listed_.objects = state->listed;
    }
    const bool more = page->truncated && !page->objects.empty() &&
                      page->next_continuation_token != state->last_token &&
                      state->listed + state->foreign < config_.max_listed_objects;
    if (more) {
      state->last_token = page->next_continuation_token;
      return ListPage(state, page->next_continuation_token);
    }
    FinishListing(state);
  };
  client_->Submit(std::move(call));
}

void S3Adapter::FinishListing(const std::shared_ptr<ListingState>& state) {
  const double seconds = static_cast<double>(ListingClockMs() - state->started_ms) / 1000.0;
  {
    MutexLock lock(&listed_mu_);
    listed_.seconds = seconds;
  }
  index_.TrimToCapacity(
      [this](const store::ObjectKey& victim, std::uint64_t bytes) { Evicted(victim, bytes); });
  spdlog::info("s3 L2: {} holds {} objects of ours ({} others' left alone), listed in {:.3f} s",
               client_->Location(), state->listed, state->foreign, seconds);
  listing_done_.store(true, std::memory_order_release);
}

void S3Adapter::EnforceQuotas(const store::TenantLedger* ledger) {
  EnforceIndexedQuotas(index_, ledger);
}

Result<std::vector<ListedL2Object>> S3Adapter::List(const store::ObjectKey* after,
                                                    std::size_t limit,
                                                    const KeyFilter& keep) const {
  return ListIndexed(index_, after, limit, keep);
}

Result<std::vector<L2Deletion>> S3Adapter::Delete(std::span<const store::ObjectKey> keys,
                                                  bool force) {
  return DeleteIndexed(index_, keys, force, [this](const store::ObjectKey& gone, std::uint64_t) {
    DeleteObject(gone);
    NotifyRemoved(gone);
  });
}

L2AdapterStats S3Adapter::Stats() const {
  L2AdapterStats s;
  counters_.CopyTo(&s);
  s.type = "s3";
  s.description = client_->Location() + " (region " + config_.client.region +
                  ", credentials from " + config_.credentials_source +
                  (config_.key_prefix.empty() ? "" : ", prefix " + config_.key_prefix) + ")";
  s.condition = condition_.current();
  s.objects = index_.objects();
  s.usage_bytes = index_.usage_bytes();
  s.capacity_bytes = index_.capacity_bytes();
  MutexLock lock(&listed_mu_);
  s.rebuilt_objects = listed_.objects;
  s.rebuild_seconds = listed_.seconds;
  return s;
}

}  // namespace lmcache::tier
