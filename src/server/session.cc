#include "server/session.h"

#include <algorithm>

#include "server/token_hasher.h"

namespace lmcache::server {

std::vector<store::ChunkHash> Session::Hashes(const std::vector<std::uint32_t>& tokens,
                                              std::size_t chunk_size, std::size_t first,
                                              std::size_t last) {
  if (tokens != tokens_) {
    // Keep the hashes of full chunks both prompts share.
    const auto mismatch =
        std::mismatch(tokens.begin(), tokens.end(), tokens_.begin(), tokens_.end());
    const auto common = static_cast<std::size_t>(mismatch.first - tokens.begin());
    hashes_.resize(std::min(hashes_.size(), common / chunk_size));
    tokens_ = tokens;
  }
  last = std::min(last, tokens_.size() / chunk_size);
  if (hashes_.size() < last) {
    const std::size_t have = hashes_.size();
    const store::ChunkHash& prefix = have == 0 ? NoneHash() : hashes_.back();
    auto more = HashChunks(tokens_, chunk_size, have, last - have, prefix);
    hashes_.insert(hashes_.end(), more.begin(), more.end());
  }
  if (first >= last) return {};
  return {hashes_.begin() + static_cast<std::ptrdiff_t>(first),
          hashes_.begin() + static_cast<std::ptrdiff_t>(last)};
}

SessionManager::SessionManager(const Clock* clock, TimeMs idle_ttl_ms, std::size_t max_sessions)
    : clock_(clock), idle_ttl_ms_(idle_ttl_ms), max_sessions_(max_sessions) {}

std::shared_ptr<Session> SessionManager::GetOrCreate(const std::string& request_id) {
  MutexLock lock(&mu_);
  const TimeMs now = clock_->NowMs();
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) {
    if (sessions_.size() >= max_sessions_ && ExpireIdleLocked(now) == 0) return nullptr;
    it = sessions_.emplace(request_id, Entry{std::make_shared<Session>(), now}).first;
  }
  it->second.last_used_ms = now;
  return it->second.session;
}

std::shared_ptr<Session> SessionManager::Find(const std::string& request_id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) return nullptr;
  it->second.last_used_ms = clock_->NowMs();
  return it->second.session;
}

std::shared_ptr<Session> SessionManager::Remove(const std::string& request_id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) return nullptr;
  std::shared_ptr<Session> session = std::move(it->second.session);
  sessions_.erase(it);
  return session;
}

std::size_t SessionManager::ExpireIdleLocked(TimeMs now) {
  return std::erase_if(
      sessions_, [&](const auto& item) { return now - item.second.last_used_ms >= idle_ttl_ms_; });
}

std::size_t SessionManager::ExpireIdle() {
  MutexLock lock(&mu_);
  return ExpireIdleLocked(clock_->NowMs());
}

std::size_t SessionManager::size() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace lmcache::server
