// ConditionLog: one log line when a tier enters a bad condition (disk full,
// directory gone, node down) and one when it recovers, instead of one per
// failing object.
//
// Fail(condition, detail) logs a warning only when `condition` differs from
// the current one; Ok() logs the recovery once. The current condition is
// part of the adapter's stats.
//
// Thread-safety: internally synchronised (a leaf mutex).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/mutex.h"

namespace lmcache {

class ConditionLog {
 public:
  explicit ConditionLog(std::string subject) : subject_(std::move(subject)) {}

  void Fail(std::string_view condition, std::string_view detail) LMC_EXCLUDES(mu_);
  void Ok() LMC_EXCLUDES(mu_);
  // Empty when healthy.
  std::string current() const LMC_EXCLUDES(mu_);
  // Conditions entered since startup.
  std::uint64_t entered() const LMC_EXCLUDES(mu_);

 private:
  const std::string subject_;
  mutable Mutex mu_;
  std::string current_ LMC_GUARDED_BY(mu_);
  std::uint64_t entered_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t failures_in_condition_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache
