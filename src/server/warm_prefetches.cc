#include "server/warm_prefetches.h"

#include <spdlog/spdlog.h>

#include "server/service_state.h"
#include "store/object_key.h"
#include "worker/key_rules.h"

namespace lmcache::server {
namespace {

// Owners of the warm loads' locks: internal ids far above the prefetcher's own.
constexpr std::uint64_t kWarmOwnerBase = std::uint64_t{1} << 62;

Status Validate(const WarmRequest& request) {
  LMC_RETURN_IF_ERROR(store::ValidateModelName(request.model_name));
  LMC_RETURN_IF_ERROR(store::ValidateCacheSalt(request.cache_salt));
  LMC_RETURN_IF_ERROR(store::ValidateTags(request.tags));
  if (request.world_size < 1 || request.world_size > 255) {
    return InvalidArgument("world_size must be in [1, 255]");
  }
  if (request.token_ids.size() > WarmPrefetches::kMaxTokens) {
    return InvalidArgument("at most " + std::to_string(WarmPrefetches::kMaxTokens) +
                           " token_ids per prefetch");
  }
  return Status::Ok();
}

}  // namespace

WarmPrefetches::WarmPrefetches(const Deps& deps) : deps_(deps) {}

WarmPrefetches::~WarmPrefetches() {
  if (deps_.prefetcher == nullptr) return;
  std::vector<tier::PrefetchHandle> loading;
  {
    MutexLock lock(&state_->mu);
    for (const auto& [id, entry] : state_->entries) {
      if (!entry.progress.done) loading.push_back(entry.handle);
    }
  }
  // What they locked is released by the prefetcher, now or when it lands.
  for (const tier::PrefetchHandle handle : loading) deps_.prefetcher->Cancel(handle);
}

std::size_t WarmPrefetches::ResidentPrefix(const std::vector<store::ObjectKey>& keys,
                                           std::size_t ranks) const {
  std::size_t chunks = 0;
  for (std::size_t first = 0; first + ranks <= keys.size(); first += ranks, ++chunks) {
    for (std::size_t r = 0; r < ranks; ++r) {
      const auto info = deps_.table.Find(keys[first + r]);
      if (!info || info->state != store::ObjectState::kResident) return chunks;
    }
  }
  return chunks;
}

void WarmPrefetches::FinishLocked(State& state, const std::string& id, Entry& entry) {
  entry.progress.done = true;
  state.unread.push_back(id);
  while (state.unread.size() > kMaxUnread) {
    state.entries.erase(state.unread.front());
    state.unread.pop_front();
  }
}

Result<WarmSubmitted> WarmPrefetches::Submit(const WarmRequest& request) {
  LMC_RETURN_IF_ERROR(Validate(request));
  const std::optional<worker::ChunkLayout> layout =
      deps_.instances.LayoutOf(request.model_name, request.world_size);
  if (!layout) {
    return Status(ErrorCode::kWrongState,
                  "no instance of model '" + request.model_name + "' with world size " +
                      std::to_string(request.world_size) +
                      " is registered: the object layout to load into is not known yet");
  }
  const auto chunk = static_cast<std::size_t>(layout->chunk_size);
  const std::size_t chunks = request.token_ids.size() / chunk;
  if (chunks == 0) {
    return InvalidArgument("token_ids hold no full chunk of " + std::to_string(chunk) + " tokens");
  }
  const std::vector<store::ChunkHash> hashes =
      deps_.hasher.Hashes(request.token_ids, chunk, chunks);
  const std::vector<std::int64_t> ranks = worker::AllRanks(request.world_size);
  const std::string tags = store::CanonicalTags(request.tags);
  std::vector<store::ObjectKey> keys = worker::ExpandKeys(
      hashes, request.model_name, request.cache_salt, tags, ranks, layout->object_namespace);

  Entry entry;
  entry.ranks = ranks.size();
  entry.prefix_chunks = ResidentPrefix(keys, ranks.size());
  entry.progress.total_keys = keys.size();
  WarmSubmitted submitted{NewBootId(), chunks, false};
  const bool nothing_to_load = entry.prefix_chunks == chunks || deps_.prefetcher == nullptr;
  std::uint64_t owner_id = 0;
  {
    MutexLock lock(&state_->mu);
    if (nothing_to_load) {
      entry.progress.found_keys = entry.prefix_chunks * entry.ranks;
      Entry& kept = state_->entries[submitted.request_id] = entry;
      FinishLocked(*state_, submitted.request_id, kept);
      submitted.noop = true;
      return submitted;
    }
    if (state_->pending >= kMaxPending) {
      return Status(ErrorCode::kResourceExhausted,
                    std::to_string(kMaxPending) +
                        " prefetches are loading already: read their results "
                        "(GET /cache/prefetches/{id}) and try again");
    }
    state_->pending += 1;
    owner_id = kWarmOwnerBase + state_->next_id++;
  }
  if (deps_.token_bindings != nullptr) {
    // What lands is announced with its tokens (a load names only hashes).
    deps_.token_bindings->Bind(request.model_name, hashes, entry.prefix_chunks, request.token_ids,
                               chunk);
  }
  tier::PrefetchRequest prefetch;
  prefetch.keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(entry.prefix_chunks * entry.ranks),
                       keys.end());
  prefetch.ranks = entry.ranks;
  prefetch.readers = 1;
  prefetch.owner = store::Owner::Internal(owner_id);
  prefetch.object_bytes = layout->object_bytes;
  entry.handle = deps_.prefetcher->Submit(std::move(prefetch));
  {
    MutexLock lock(&state_->mu);
    state_->entries[submitted.request_id] = entry;
  }
  // Outside the mutex: it may report at once, on this thread.
  deps_.prefetcher->NotifyWhenLanded(
      entry.handle, [weak = std::weak_ptr<State>(state_), table = &deps_.table,
                     prefetcher = deps_.prefetcher, id = submitted.request_id] {
        Landed(weak, table, prefetcher, id);
      });
  spdlog::info("warm prefetch {}: {} chunks of model '{}', {} in L1 already, the rest loading",
               submitted.request_id, chunks, request.model_name, entry.prefix_chunks);
  return submitted;
}

void WarmPrefetches::Landed(const std::weak_ptr<State>& weak, store::ObjectTable* table,
                            tier::Prefetcher* prefetcher, const std::string& id) {
  const std::shared_ptr<State> state = weak.lock();
  if (!state) return;  // gone: its destructor cancelled the load
  tier::PrefetchHandle handle = 0;
  {
    MutexLock lock(&state->mu);
    auto it = state->entries.find(id);
    if (it == state->entries.end() || it->second.progress.done) return;
    handle = it->second.handle;
  }
  const std::optional<tier::PrefetchResult> result = prefetcher->Poll(handle);
  // Warm: retained in L1, not locked for anyone.
  if (result && result->lease != store::kNoLease) table->ReleaseRead(result->lease);
  MutexLock lock(&state->mu);
  auto it = state->entries.find(id);
  if (it == state->entries.end() || it->second.progress.done) return;
  Entry& entry = it->second;
  entry.progress.found_keys = (entry.prefix_chunks + (result ? result->chunks : 0)) * entry.ranks;
  state->pending -= 1;
  FinishLocked(*state, id, entry);
}

std::optional<WarmProgress> WarmPrefetches::Take(const std::string& request_id) {
  MutexLock lock(&state_->mu);
  auto it = state_->entries.find(request_id);
  if (it == state_->entries.end()) return std::nullopt;
  const WarmProgress progress = it->second.progress;
  if (progress.done) {
    state_->entries.erase(it);
    std::erase(state_->unread, request_id);
  }
  return progress;
}

}  // namespace lmcache::server
