#include "fleet/requester_lives.h"

#include <spdlog/spdlog.h>

namespace lmcache::fleet {
namespace {

std::string LifeName(std::string_view boot_id) { return "life:" + std::string(boot_id); }

}  // namespace

std::string RequesterLives::PeerOf(std::string_view connection) const {
  MutexLock lock(&mu_);
  auto it = named_.find(connection);
  return it != named_.end() ? it->second : std::string(connection);
}

std::vector<std::string> RequesterLives::Leave(std::string_view connection) {
  auto named = named_.find(connection);
  if (named == named_.end()) return {};
  const std::string name = std::move(named->second);
  named_.erase(named);
  auto life = lives_.find(name);
  if (life == lives_.end()) return {};
  life->second.open -= 1;
  if (life->second.open > 0 || !life->second.superseded) return {};
  lives_.erase(life);
  return {name};
}

bool RequesterLives::MakeRoom() {
  if (lives_.size() < max_lives_) return true;
  for (auto it = lives_.begin(); it != lives_.end(); ++it) {
    if (it->second.open == 0) {
      lives_.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<std::string> RequesterLives::Hello(std::string_view connection,
                                               const PeerHello& hello) {
  const std::string name = LifeName(hello.boot_id);
  MutexLock lock(&mu_);
  auto named = named_.find(connection);
  if (named != named_.end() && named->second == name) return {};  // each probe says it again
  std::vector<std::string> ending = Leave(connection);
  auto life = lives_.find(name);
  if (life != lives_.end() && life->second.url != hello.advertise_url) {
    // One boot id is one process: a member that claims another's is not
    // believed (its connection stays known by its own id).
    spdlog::warn("p2p: a member said hello for boot id {} at {}, which said hello at {} first",
                 hello.boot_id, hello.advertise_url, life->second.url);
    return ending;
  }
  if (life == lives_.end()) {
    if (!MakeRoom()) return ending;
    life = lives_.emplace(name, Life{hello.advertise_url}).first;
  }
  life->second.open += 1;
  named_.emplace(std::string(connection), name);
  // Every other life of this URL is an earlier one.
  for (auto it = lives_.begin(); it != lives_.end();) {
    if (it->first == name || it->second.url != hello.advertise_url) {
      ++it;
      continue;
    }
    it->second.superseded = true;
    if (it->second.open > 0) {
      ++it;
      continue;
    }
    ending.push_back(it->first);
    it = lives_.erase(it);
  }
  return ending;
}

std::vector<std::string> RequesterLives::Closed(std::string_view connection) {
  MutexLock lock(&mu_);
  return Leave(connection);
}

std::size_t RequesterLives::lives() const {
  MutexLock lock(&mu_);
  return lives_.size();
}

}  // namespace lmcache::fleet
