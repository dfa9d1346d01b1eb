#include "lmcache/status.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

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

// Every code the server can send is in docs/protocol.md's table, under its
// name, and the table names no other (105 PERMISSION_DENIED was produced
// for a release before the table had it: issue 19).
TEST(Status, EveryErrorCodeIsDocumentedUnderItsName) {
  std::ifstream doc(LMC_PROTOCOL_DOC);
  ASSERT_TRUE(doc.good()) << LMC_PROTOCOL_DOC;
  std::map<int, std::string> documented;
  const std::regex row(R"(^\| ([0-9]+) \| ([A-Z_]+) \|)");
  bool in_table = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.starts_with("## ")) in_table = line == "## Error codes";
    std::smatch match;
    if (in_table && std::regex_search(line, match, row)) {
      documented[std::stoi(match[1].str())] = match[2].str();
    }
  }
  std::map<int, std::string> defined;
  for (int code = 0; code < 1000; ++code) {
    const std::string_view name = ErrorCodeName(static_cast<ErrorCode>(code));
    if (name != "UNKNOWN") defined[code] = std::string(name);
  }
  EXPECT_GE(defined.size(), 20u);
  EXPECT_EQ(documented, defined);
}

}  // namespace
}  // namespace lmcache
