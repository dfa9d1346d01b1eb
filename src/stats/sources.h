// stats::Sources<Snapshot>: the subsystems that fill a part of a stats
// snapshot register here, by name, instead of each getting its own setter
// on whoever takes the snapshot. Taking a snapshot asks every source in the
// order they registered; a source registered again under its name replaces
// the first (a restarted subsystem).
//
// Thread-safety: Add and Fill from any threads; a source's function runs
// under the registry's lock, so it must not register sources itself.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace lmcache::stats {

template <class Snapshot>
class Sources {
 public:
  using FillFn = std::function<void(Snapshot*)>;

  void Add(std::string name, FillFn fill) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (auto& [existing, function] : sources_) {
      if (existing == name) {
        function = std::move(fill);
        return;
      }
    }
    sources_.emplace_back(std::move(name), std::move(fill));
  }

  void Fill(Snapshot* snapshot) const LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (const auto& [name, fill] : sources_) fill(snapshot);
  }

  std::vector<std::string> Names() const LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::vector<std::string> names;
    for (const auto& [name, fill] : sources_) names.push_back(name);
    return names;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::pair<std::string, FillFn>> sources_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::stats
