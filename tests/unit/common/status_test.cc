#include "lmcache/status.h"

#include <gtest/gtest.h>

namespace lmcache {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(Status, CarriesCodeAndMessage) {
  Status s(ErrorCode::kOutOfMemory, "pool full");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOutOfMemory);
  EXPECT_EQ(s.ToString(), "OUT_OF_MEMORY: pool full");
  EXPECT_EQ(s.WithContext("store").message(), "store: pool full");
}

TEST(Status, CodesAreStable) {
  // These values travel on the wire: changing one breaks deployed clients.
  EXPECT_EQ(static_cast<int>(ErrorCode::kInvalidArgument), 100);
  EXPECT_EQ(static_cast<int>(ErrorCode::kNotFound), 200);
  EXPECT_EQ(static_cast<int>(ErrorCode::kOutOfMemory), 300);
  EXPECT_EQ(static_cast<int>(ErrorCode::kInternal), 400);
  EXPECT_EQ(static_cast<int>(ErrorCode::kInvalidConfig), 500);
  EXPECT_EQ(ErrorCodeName(ErrorCode::kShmTooSmall), "SHM_TOO_SMALL");
  EXPECT_EQ(ErrorCodeName(static_cast<ErrorCode>(999)), "UNKNOWN");
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  LMC_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(Result, HoldsValueOrStatus) {
  auto ok = Half(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 2);
  auto bad = Half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  EXPECT_EQ(UseHalf(5, &out).code(), ErrorCode::kInvalidArgument);
}

TEST(Result, FromOkStatusIsInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace lmcache
