#include "common/condition_log.h"

#include <spdlog/spdlog.h>

namespace lmcache {

void ConditionLog::Fail(std::string_view condition, std::string_view detail) {
  MutexLock lock(&mu_);
  failures_in_condition_ += 1;
  if (current_ == condition) return;
  current_ = std::string(condition);
  entered_ += 1;
  failures_in_condition_ = 1;
  spdlog::warn("{}: {} ({}); the server goes on without it and retries", subject_, condition,
               detail);
}

void ConditionLog::Ok() {
  MutexLock lock(&mu_);
  if (current_.empty()) return;
  spdlog::info("{}: recovered from '{}' after {} failed operations", subject_, current_,
               failures_in_condition_);
  current_.clear();
  failures_in_condition_ = 0;
}

std::string ConditionLog::current() const {
  MutexLock lock(&mu_);
  return current_;
}

std::uint64_t ConditionLog::entered() const {
  MutexLock lock(&mu_);
  return entered_;
}

}  // namespace lmcache
