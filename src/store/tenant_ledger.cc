#include "store/tenant_ledger.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace lmcache::store {

Result<std::uint64_t> QuotaBytesFromGb(double gb) {
  if (!std::isfinite(gb)) return InvalidArgument("limit_gb must be a finite number");
  if (gb < 0) return InvalidArgument("limit_gb must be >= 0");
  const double bytes = std::floor(gb * static_cast<double>(1ull << 30));
  // 2^63 bytes: beyond any pool, and exact in a double.
  if (bytes >= 9223372036854775808.0) return InvalidArgument("limit_gb is too large");
  return static_cast<std::uint64_t>(bytes);
}

Result<std::uint64_t> QuotaBytesFromGb(std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double gb = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || errno == ERANGE) {
    return InvalidArgument("quota '" + copy + "' is not a number of GB");
  }
  return QuotaBytesFromGb(gb);
}

Result<QuotaMode> ParseQuotaMode(std::string_view text) {
  if (text == "off") return QuotaMode::kOff;
  if (text == "on") return QuotaMode::kOpen;
  if (text == "allowlist") return QuotaMode::kAllowlist;
  return InvalidConfig("--quota-mode: unknown mode '" + std::string(text) +
                       "'; use on (tenants with a quota are capped), allowlist (a tenant "
                       "without a quota caches nothing) or off (no accounting)");
}

std::string_view QuotaModeName(QuotaMode mode) {
  switch (mode) {
    case QuotaMode::kOff: return "off";
    case QuotaMode::kOpen: return "on";
    case QuotaMode::kAllowlist: return "allowlist";
  }
  return "unknown";
}

std::optional<std::uint64_t> TenantLedger::LimitOf(const TenantAccount* account) const {
  if (account != nullptr && account->limit_bytes) return account->limit_bytes;
  if (mode_ == QuotaMode::kAllowlist) return 0;
  return std::nullopt;
}

TenantAccount& TenantLedger::AccountLocked(std::string_view salt) {
  auto it = accounts_.find(salt);
  if (it != accounts_.end()) return it->second;
  TenantAccount& account = accounts_[std::string(salt)];
  account.salt = std::string(salt);
  return account;
}

void TenantLedger::ForgetIfIdleLocked(Accounts::iterator it) {
  if (it->second.used_bytes == 0 && !it->second.limit_bytes) accounts_.erase(it);
}

bool TenantLedger::TryCharge(std::string_view salt, std::uint64_t bytes) {
  if (!enabled()) return true;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  TenantAccount* account = it == accounts_.end() ? nullptr : &it->second;
  const std::optional<std::uint64_t> limit = LimitOf(account);
  const std::uint64_t used = account == nullptr ? 0 : account->used_bytes;
  if (limit && (used > *limit || bytes > *limit - used)) {
    CountRefusedLocked(account, 1, bytes);
    return false;
  }
  AccountLocked(salt).used_bytes += bytes;
  return true;
}

void TenantLedger::Charge(std::string_view salt, std::uint64_t bytes) {
  if (!enabled()) return;
  MutexLock lock(&mu_);
  AccountLocked(salt).used_bytes += bytes;
}

void TenantLedger::Credit(std::string_view salt, std::uint64_t bytes) {
  if (!enabled()) return;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  if (it == accounts_.end()) return;
  it->second.used_bytes -= std::min(it->second.used_bytes, bytes);
  ForgetIfIdleLocked(it);
}

void TenantLedger::CountRefusedLocked(TenantAccount* account, std::uint64_t objects,
                                      std::uint64_t bytes) {
  if (account != nullptr && account->limit_bytes) {
    account->refused_objects += objects;
    account->refused_bytes += bytes;
  } else {
    other_refused_objects_ += objects;
    other_refused_bytes_ += bytes;
  }
}

void TenantLedger::CountRefused(std::string_view salt, std::uint64_t objects,
                                std::uint64_t bytes) {
  if (!enabled() || objects == 0) return;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  CountRefusedLocked(it == accounts_.end() ? nullptr : &it->second, objects, bytes);
}

void TenantLedger::CountQuotaEviction(std::string_view salt, std::uint64_t objects,
                                      std::uint64_t bytes) {
  if (!enabled() || objects == 0) return;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  if (it == accounts_.end() || !it->second.limit_bytes) return;
  it->second.quota_evicted_objects += objects;
  it->second.quota_evicted_bytes += bytes;
}

std::uint64_t TenantLedger::Room(std::string_view salt) const {
  if (!enabled()) return std::numeric_limits<std::uint64_t>::max();
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  const TenantAccount* account = it == accounts_.end() ? nullptr : &it->second;
  const std::optional<std::uint64_t> limit = LimitOf(account);
  if (!limit) return std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t used = account == nullptr ? 0 : account->used_bytes;
  return used >= *limit ? 0 : *limit - used;
}

std::optional<std::uint64_t> TenantLedger::LimitFor(std::string_view salt) const {
  if (!enabled()) return std::nullopt;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  return LimitOf(it == accounts_.end() ? nullptr : &it->second);
}

std::uint64_t TenantLedger::Excess(std::string_view salt) const {
  if (!enabled()) return 0;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  const TenantAccount* account = it == accounts_.end() ? nullptr : &it->second;
  const std::optional<std::uint64_t> limit = LimitOf(account);
  const std::uint64_t used = account == nullptr ? 0 : account->used_bytes;
  return limit && used > *limit ? used - *limit : 0;
}

std::vector<std::pair<std::string, std::uint64_t>> TenantLedger::OverLimit() const {
  std::vector<std::pair<std::string, std::uint64_t>> over;
  if (!enabled()) return over;
  MutexLock lock(&mu_);
  for (const auto& [salt, account] : accounts_) {
    const std::optional<std::uint64_t> limit = LimitOf(&account);
    if (limit && account.used_bytes > *limit) over.emplace_back(salt, account.used_bytes - *limit);
  }
  return over;
}

Status TenantLedger::SetLimit(std::string_view salt, std::uint64_t bytes) {
  if (!enabled()) {
    return Status(ErrorCode::kWrongState,
                  "quotas are off on this server (--quota-mode off): restart it with "
                  "--quota-mode on or allowlist to set them");
  }
  MutexLock lock(&mu_);
  AccountLocked(salt).limit_bytes = bytes;
  return Status::Ok();
}

bool TenantLedger::RemoveLimit(std::string_view salt) {
  if (!enabled()) return false;
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  if (it == accounts_.end() || !it->second.limit_bytes) return false;
  it->second.limit_bytes.reset();
  ForgetIfIdleLocked(it);
  return true;
}

TenantAccount TenantLedger::Get(std::string_view salt) const {
  MutexLock lock(&mu_);
  auto it = accounts_.find(salt);
  if (it != accounts_.end()) return it->second;
  TenantAccount none;
  none.salt = std::string(salt);
  return none;
}

TenantTotals TenantLedger::Totals() const {
  TenantTotals totals;
  MutexLock lock(&mu_);
  for (const auto& [salt, account] : accounts_) {
    if (account.limit_bytes) {
      totals.with_quota.push_back(account);
      continue;
    }
    totals.other_tenants += 1;
    totals.other_used_bytes += account.used_bytes;
  }
  totals.other_refused_objects = other_refused_objects_;
  totals.other_refused_bytes = other_refused_bytes_;
  std::sort(totals.with_quota.begin(), totals.with_quota.end(),
            [](const TenantAccount& a, const TenantAccount& b) { return a.salt < b.salt; });
  return totals;
}

}  // namespace lmcache::store

namespace lmcache::store {

QuotaStats TenantLedger::Stats() const {
  const TenantTotals totals = Totals();
  QuotaStats stats;
  stats.mode = std::string(QuotaModeName(mode_));
  stats.tenants_with_quota = totals.with_quota.size();
  stats.other_tenants = totals.other_tenants;
  stats.other_used_bytes = totals.other_used_bytes;
  stats.other_refused_objects = totals.other_refused_objects;
  for (const TenantAccount& account : totals.with_quota) {
    TenantQuotaStats& t = stats.tenants.emplace_back();
    t.salt = account.salt.empty() ? std::string(kDefaultSaltName) : account.salt;
    t.limit_bytes = account.limit_bytes.value_or(0);
    t.used_bytes = account.used_bytes;
    t.refused_objects = account.refused_objects;
    t.refused_bytes = account.refused_bytes;
    t.quota_evicted_objects = account.quota_evicted_objects;
    t.quota_evicted_bytes = account.quota_evicted_bytes;
  }
  return stats;
}

LMC_STATS_ROWS(QuotaStatRows, QuotaStats, LMC_QUOTA_STATS)
LMC_STATS_ROWS(TenantQuotaStatRows, TenantQuotaStats, LMC_TENANT_QUOTA_STATS)

}  // namespace lmcache::store
