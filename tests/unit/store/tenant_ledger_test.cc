// TenantLedger: charges, credits, quota limits in each mode, and the bounded
// set of accounts it keeps.
#include "store/tenant_ledger.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string_view>

namespace lmcache::store {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

TEST(TenantLedger, ATenantWithoutAQuotaIsUnboundedInOpenMode) {
  TenantLedger ledger(QuotaMode::kOpen);
  EXPECT_TRUE(ledger.TryCharge("a", 1000));
  EXPECT_TRUE(ledger.TryCharge("a", 1ull << 40));
  EXPECT_EQ(ledger.Get("a").used_bytes, 1000 + (1ull << 40));
  EXPECT_EQ(ledger.Room("a"), kMax);
  EXPECT_EQ(ledger.Excess("a"), 0u);
}

TEST(TenantLedger, AQuotaRefusesTheChargeThatWouldPassItAndCountsIt) {
  TenantLedger ledger(QuotaMode::kOpen);
  ASSERT_TRUE(ledger.SetLimit("a", 300).ok());
  EXPECT_TRUE(ledger.TryCharge("a", 100));
  EXPECT_TRUE(ledger.TryCharge("a", 200));  // exactly at the limit
  EXPECT_FALSE(ledger.TryCharge("a", 1));
  EXPECT_EQ(ledger.Room("a"), 0u);
  const TenantAccount a = ledger.Get("a");
  EXPECT_EQ(a.used_bytes, 300u);
  EXPECT_EQ(a.refused_objects, 1u);
  EXPECT_EQ(a.refused_bytes, 1u);
  ledger.Credit("a", 100);
  EXPECT_EQ(ledger.Room("a"), 100u);
  EXPECT_TRUE(ledger.TryCharge("a", 100));
  // Another tenant is not touched by a's quota.
  EXPECT_TRUE(ledger.TryCharge("b", 10'000));
}

TEST(TenantLedger, AllowlistRefusesTenantsWithoutAQuota) {
  TenantLedger ledger(QuotaMode::kAllowlist);
  EXPECT_EQ(ledger.Room("stranger"), 0u);
  EXPECT_FALSE(ledger.TryCharge("stranger", 1));
  ASSERT_TRUE(ledger.SetLimit("", 50).ok());  // the empty salt may have one too
  EXPECT_TRUE(ledger.TryCharge("", 50));
  const TenantTotals totals = ledger.Totals();
  EXPECT_EQ(totals.other_refused_objects, 1u);
  EXPECT_EQ(totals.other_tenants, 0u);  // a refused tenant has no account
  ASSERT_EQ(totals.with_quota.size(), 1u);
  EXPECT_EQ(totals.with_quota[0].used_bytes, 50u);
}

TEST(TenantLedger, OffChargesNothingAndRefusesQuotas) {
  TenantLedger ledger(QuotaMode::kOff);
  EXPECT_TRUE(ledger.TryCharge("a", 1));
  EXPECT_EQ(ledger.Get("a").used_bytes, 0u);
  const Status set = ledger.SetLimit("a", 1);
  EXPECT_EQ(set.code(), ErrorCode::kWrongState);
  EXPECT_NE(set.message().find("--quota-mode"), std::string::npos);
}

TEST(TenantLedger, LoweringAQuotaBelowUsageShowsTheExcess) {
  TenantLedger ledger(QuotaMode::kOpen);
  ledger.Charge("a", 500);
  ASSERT_TRUE(ledger.SetLimit("a", 200).ok());
  EXPECT_EQ(ledger.Excess("a"), 300u);
  EXPECT_FALSE(ledger.TryCharge("a", 1));
  const auto over = ledger.OverLimit();
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].first, "a");
  EXPECT_EQ(over[0].second, 300u);
  ledger.Credit("a", 300);
  EXPECT_TRUE(ledger.OverLimit().empty());
}

TEST(TenantLedger, IdleAccountsWithoutAQuotaAreForgotten) {
  TenantLedger ledger(QuotaMode::kOpen);
  for (int i = 0; i < 1000; ++i) ledger.Charge("t" + std::to_string(i), 10);
  EXPECT_EQ(ledger.Totals().other_tenants, 1000u);
  EXPECT_EQ(ledger.Totals().other_used_bytes, 10'000u);
  for (int i = 0; i < 1000; ++i) ledger.Credit("t" + std::to_string(i), 10);
  EXPECT_EQ(ledger.Totals().other_tenants, 0u);
  // A quota keeps its account even when idle; removing it forgets it.
  ASSERT_TRUE(ledger.SetLimit("q", 1).ok());
  EXPECT_EQ(ledger.Totals().with_quota.size(), 1u);
  EXPECT_TRUE(ledger.RemoveLimit("q"));
  EXPECT_FALSE(ledger.RemoveLimit("q"));
  EXPECT_TRUE(ledger.Totals().with_quota.empty());
  EXPECT_EQ(ledger.Totals().other_tenants, 0u);
}

TEST(TenantLedger, ACreditNeverTakesUsageBelowZero) {
  TenantLedger ledger(QuotaMode::kOpen);
  ledger.Charge("a", 10);
  ledger.Credit("a", 20);
  ledger.Credit("never-charged", 5);
  EXPECT_EQ(ledger.Get("a").used_bytes, 0u);
  EXPECT_EQ(ledger.Get("never-charged").used_bytes, 0u);
}

TEST(TenantLedger, QuotasInGbFollowTheReferencesConversionAndValidation) {
  EXPECT_EQ(*QuotaBytesFromGb(1.0), 1ull << 30);
  EXPECT_EQ(*QuotaBytesFromGb(0.0), 0u);
  EXPECT_EQ(*QuotaBytesFromGb(0.5), 1ull << 29);
  EXPECT_EQ(*QuotaBytesFromGb(std::string_view("2.5")), 5ull << 29);
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e12}) {
    EXPECT_EQ(QuotaBytesFromGb(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  for (const char* bad : {"", "x", "1x", "nan", "-2", "1e400"}) {
    EXPECT_EQ(QuotaBytesFromGb(std::string_view(bad)).status().code(), ErrorCode::kInvalidArgument)
        << bad;
  }
}

TEST(TenantLedger, ModesParseByNameOnly) {
  EXPECT_EQ(*ParseQuotaMode("on"), QuotaMode::kOpen);
  EXPECT_EQ(*ParseQuotaMode("off"), QuotaMode::kOff);
  EXPECT_EQ(*ParseQuotaMode("allowlist"), QuotaMode::kAllowlist);
  const auto bad = ParseQuotaMode("strict");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(bad.status().message().find("--quota-mode"), std::string::npos);
  EXPECT_EQ(QuotaModeName(QuotaMode::kAllowlist), "allowlist");
}

}  // namespace
}  // namespace lmcache::store
