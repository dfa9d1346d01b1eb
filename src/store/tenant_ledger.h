// TenantLedger: the L1 bytes each tenant (cache_salt) holds, and the quota
// that caps them.
//
// A tenant is charged the aligned bytes of every copy it holds in L1: staged
// (a writer filling it) and resident. It is credited when a copy leaves those
// states (admitted copies move from staged to resident at no change; a copy
// retired or abandoned by a forced delete, or quarantined after its write
// lease, is credited when it leaves, though its memory comes back later).
// The object shards report every such transition (object_shard.h), so the
// figures are exact, byte for byte, at every moment a shard is unlocked.
//
// A quota is hard: TryCharge refuses a copy that would take the tenant past
// its limit, and the table (object_table.h) first evicts the tenant's own
// least recently used objects to make room, never another tenant's. With
// QuotaMode::kAllowlist a tenant without a quota may hold nothing (the
// reference's IsolatedLRU semantics); with kOpen it is unbounded; with kOff
// nothing is charged or limited at all (the ledger is not consulted).
//
// Accounts exist only for tenants that hold bytes or have a quota, so the
// ledger's size is bounded by what L1 holds plus the quotas set.
//
// Thread-safety: internally synchronised by one mutex, a leaf: the object
// shards call it with their mutexes held and it never calls out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "store/store_stats.h"

namespace lmcache::store {

enum class QuotaMode : std::uint8_t {
  kOff,        // no accounting; quotas cannot be set
  kOpen,       // tenants with a quota are capped, the rest are not (default)
  kAllowlist,  // a tenant without a quota holds nothing
};

// The name the HTTP routes and --quota give the empty salt (the reference's;
// a real salt of that name cannot be told apart from it).
inline constexpr std::string_view kDefaultSaltName = "_default";

// A quota of `gb` GiB in bytes, as the reference stores it (int(gb * 2^30)):
// kInvalidArgument unless finite and >= 0, or too large to count in bytes.
Result<std::uint64_t> QuotaBytesFromGb(double gb);
// The same from text (a flag's value): a number and nothing else.
Result<std::uint64_t> QuotaBytesFromGb(std::string_view text);

// "off", "on" or "allowlist" (--quota-mode); an error naming the flag otherwise.
Result<QuotaMode> ParseQuotaMode(std::string_view text);
std::string_view QuotaModeName(QuotaMode mode);

struct TenantAccount {
  std::string salt;
  std::uint64_t used_bytes = 0;
  std::optional<std::uint64_t> limit_bytes;  // none: no quota of its own
  // Copies refused because the quota was reached with nothing of the
  // tenant's own left to evict (kept for tenants with a quota).
  std::uint64_t refused_objects = 0;
  std::uint64_t refused_bytes = 0;
  // The tenant's own objects evicted to keep it within its quota.
  std::uint64_t quota_evicted_objects = 0;
  std::uint64_t quota_evicted_bytes = 0;
};

struct TenantTotals {
  std::vector<TenantAccount> with_quota;  // sorted by salt
  // Every tenant without a quota together (the bounded "other" bucket).
  std::uint64_t other_tenants = 0;
  std::uint64_t other_used_bytes = 0;
  std::uint64_t other_refused_objects = 0;  // allowlist mode: refused for lack of a quota
  std::uint64_t other_refused_bytes = 0;
};

class TenantLedger {
 public:
  explicit TenantLedger(QuotaMode mode) : mode_(mode) {}
  TenantLedger(const TenantLedger&) = delete;
  TenantLedger& operator=(const TenantLedger&) = delete;

  QuotaMode mode() const { return mode_; }
  bool enabled() const { return mode_ != QuotaMode::kOff; }

  // Charges `bytes` to `salt` if it stays within its quota; otherwise charges
  // nothing, counts the refusal and returns false.
  bool TryCharge(std::string_view salt, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Charges whatever the quota says (objects a restart adopts).
  void Charge(std::string_view salt, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  void Credit(std::string_view salt, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Counts copies of `salt` refused before TryCharge was asked (no room was left).
  void CountRefused(std::string_view salt, std::uint64_t objects, std::uint64_t bytes)
      LMC_EXCLUDES(mu_);
  // Counts objects of `salt` evicted to keep it within its quota.
  void CountQuotaEviction(std::string_view salt, std::uint64_t objects, std::uint64_t bytes)
      LMC_EXCLUDES(mu_);

  // Bytes `salt` may still take (0 when at or over its limit; the maximum
  // when it has none and the mode leaves it unbounded).
  std::uint64_t Room(std::string_view salt) const LMC_EXCLUDES(mu_);
  // The limit that holds `salt` (its quota; 0 in allowlist mode without
  // one), or none. For other tiers that enforce the same quotas.
  std::optional<std::uint64_t> LimitFor(std::string_view salt) const LMC_EXCLUDES(mu_);
  // Bytes over its limit (0 within it).
  std::uint64_t Excess(std::string_view salt) const LMC_EXCLUDES(mu_);
  // The tenants over their limits now (a quota lowered below their usage
  // while their objects were locked), with the bytes over.
  std::vector<std::pair<std::string, std::uint64_t>> OverLimit() const LMC_EXCLUDES(mu_);

  // Sets or replaces the quota of `salt`. kFailedPrecondition with kOff.
  Status SetLimit(std::string_view salt, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Removes it; false when there was none.
  bool RemoveLimit(std::string_view salt) LMC_EXCLUDES(mu_);
  // `salt`'s account (zeros and no limit when it has none).
  TenantAccount Get(std::string_view salt) const LMC_EXCLUDES(mu_);
  TenantTotals Totals() const LMC_EXCLUDES(mu_);
  // The same as the stats reply shows it.
  QuotaStats Stats() const LMC_EXCLUDES(mu_);

 private:
  struct SaltHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using Accounts = std::unordered_map<std::string, TenantAccount, SaltHash, std::equal_to<>>;

  // The limit that applies to `account` (or to a tenant without one).
  std::optional<std::uint64_t> LimitOf(const TenantAccount* account) const;
  TenantAccount& AccountLocked(std::string_view salt) LMC_REQUIRES(mu_);
  void CountRefusedLocked(TenantAccount* account, std::uint64_t objects, std::uint64_t bytes)
      LMC_REQUIRES(mu_);
  // Forgets an account that holds nothing and has no quota.
  void ForgetIfIdleLocked(Accounts::iterator it) LMC_REQUIRES(mu_);

  const QuotaMode mode_;
  mutable Mutex mu_;
  Accounts accounts_ LMC_GUARDED_BY(mu_);
  // Refusals of tenants without a quota (allowlist mode), whose accounts come and go.
  std::uint64_t other_refused_objects_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t other_refused_bytes_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache::store
