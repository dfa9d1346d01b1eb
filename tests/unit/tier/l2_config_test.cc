// L2 configuration: the JSON of --l2-adapter is checked strictly, every error
// names the adapter and the field.
#include "tier/l2_config.h"

#include <gtest/gtest.h>

#include <any>

#include "tier/fault/fault_adapter.h"
#include "tier/fs/fs_adapter.h"
#include "tier/l2_config_fields.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

std::string ErrorOf(std::string_view json) {
  auto spec = ParseL2AdapterSpec(json, 2);
  EXPECT_FALSE(spec.ok()) << json;
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidConfig);
  return spec.status().message();
}

bool Mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(L2ConfigTest, ParsesTheReferenceExamples) {
  auto fs = ParseL2AdapterSpec(R"({"type":"fs","base_path":"/data/l2","max_size_gb":1.5,
                                   "use_odirect":true})", 1);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  const auto& c = std::any_cast<const FsAdapterConfig&>(fs->config);
  EXPECT_EQ(c.base_path, "/data/l2");
  EXPECT_EQ(c.max_size_bytes, static_cast<std::uint64_t>(1.5 * (1ull << 30)));
  EXPECT_TRUE(c.use_odirect);
  auto mock = ParseL2AdapterSpec(R"({"type":"mock","max_size_gb":256,"mock_bandwidth_gb":10})", 1);
  ASSERT_TRUE(mock.ok());
  EXPECT_EQ(std::any_cast<const MockAdapterConfig&>(mock->config).bandwidth_gb_per_s, 10);
  auto fault = ParseL2AdapterSpec(
      R"({"type":"fault_inject","inner":{"type":"mock"},"load_failure_rate":0.5})", 1);
  ASSERT_TRUE(fault.ok());
  EXPECT_EQ(std::any_cast<const FaultSpec&>(fault->config).faults.load_failure_rate, 0.5);
  EXPECT_EQ(std::any_cast<const FaultSpec&>(fault->config).inner->type, "mock");
}

TEST(L2ConfigTest, ReferenceKeysWithoutEffectAreAcceptedAndReported) {
  auto spec = ParseL2AdapterSpec(
      R"({"type":"fs","base_path":"/x","num_workers":4,"checksum":"crc32","read_ahead_size":1})", 1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->ignored_keys.size(), 3u);
}

TEST(L2ConfigTest, EveryErrorNamesTheAdapterAndTheField) {
  EXPECT_TRUE(Mentions(ErrorOf("{not json"), "--l2-adapter #2: not valid JSON"));
  EXPECT_TRUE(Mentions(ErrorOf("[1]"), "must be a JSON object"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"base_path":"/x"})"), "field 'type': is required"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"s3"})"), "unknown adapter type 's3'"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs"})"), "field 'base_path': is required"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":7})"), "'base_path': must be a string"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","max_size_gb":-1})"),
                       "'max_size_gb': must be in [0, 1000000], got -1"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","use_odirect":"yes"})"),
                       "'use_odirect': must be true or false"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","bse_path":"/y"})"),
                       "field 'bse_path': is not a field"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","serde":{"type":"fp8"}})"),
                       "'serde'"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fault_inject","inner":{"type":"mock","x":1}})"),
                       "#2 inner field 'x'"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"mock","affinity_tag":"gpu1"})"), "'affinity_tag'"));
}

// The types come from the build's registrations (src/CMakeLists.txt), not
// from l2_config: the error lists exactly those, and resp is there only when
// LMC_L2_RESP built it.
// A refused --l2-adapter is logged at start: its error never carries a
// password given in it (a bad URL's, or one in JSON that does not parse).
TEST(L2ConfigTest, AnErrorNeverCarriesAPasswordFromTheJson) {
  auto broken = ParseL2AdapterSpec(R"({"type":"resp","url":"redis://u:hunter2@h:1")", 1);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().find("hunter2"), std::string::npos)
      << broken.status().message();
  if (!LMC_L2_RESP) return;
  auto bad_port = ParseL2AdapterSpec(R"({"type":"resp","url":"redis://u:hunter2@h:port"})", 1);
  ASSERT_FALSE(bad_port.ok());
  EXPECT_EQ(bad_port.status().message().find("hunter2"), std::string::npos)
      << bad_port.status().message();
  EXPECT_NE(bad_port.status().message().find("redis://u:***@h:port"), std::string::npos)
      << bad_port.status().message();
}

TEST(L2AdapterTypesTest, TheUnknownTypeErrorListsTheTypesThisBuildRegistered) {
  const std::string expected = std::string("this server has fs, ") +
                               (LMC_L2_RESP ? "resp (valkey), " : "") + "mock, fault_inject and p2p";
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"s3"})"), expected)) << ErrorOf(R"({"type":"s3"})");
  EXPECT_EQ(L2AdapterTypes::Builtin().Find("resp") != nullptr, static_cast<bool>(LMC_L2_RESP));
  EXPECT_EQ(L2AdapterTypes::Builtin().Find("valkey"), L2AdapterTypes::Builtin().Find("resp"));
}

// A type registered from outside l2_config is parsed and built through it:
// the seam a new backend plugs into.
TEST(L2AdapterTypesTest, ARegisteredTypeParsesItsOwnFieldsAndBuilds) {
  L2AdapterTypes types;
  int built = 0;
  types.Add({"slow_disk", {"sd"},
             [](L2ConfigFields& f, L2AdapterSpec* spec) -> Status {
               LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_size_gb", 1, 0, 10));
               spec->config = MockAdapterConfig{.max_size_bytes = static_cast<std::uint64_t>(gb)};
               return Status::Ok();
             },
             [&built](const L2AdapterSpec& spec, const L2Environment&) -> Result<std::unique_ptr<L2Adapter>> {
               built += 1;
               return std::unique_ptr<L2Adapter>(std::make_unique<MockAdapter>(
                   std::any_cast<const MockAdapterConfig&>(spec.config)));
             }});
  types.Add({"tape", {}, nullptr, nullptr});
  EXPECT_EQ(types.Names(), "slow_disk (sd) and tape");
  ASSERT_NE(types.Find("sd"), nullptr);
  EXPECT_EQ(types.Find("sd")->name, "slow_disk");
  EXPECT_EQ(types.Find("disk"), nullptr);

  L2AdapterSpec spec;
  spec.type = "sd";
  spec.kind = types.Find("sd");
  const nlohmann::json object = {{"type", "sd"}, {"max_size_gb", 3}};
  L2ConfigFields fields(object, "--l2-adapter #1");
  ASSERT_TRUE(fields.Has("type"));
  ASSERT_TRUE(spec.kind->parse(fields, &spec).ok());
  EXPECT_TRUE(fields.RejectUnknown().ok());
  EXPECT_EQ(std::any_cast<const MockAdapterConfig&>(spec.config).max_size_bytes, 3u);
  auto adapter = MakeL2Adapter(spec);
  ASSERT_TRUE(adapter.ok());
  EXPECT_EQ(built, 1);

  const nlohmann::json wrong = {{"type", "sd"}, {"max_size_gb", 30}, {"colour", "red"}};
  L2ConfigFields strict(wrong, "--l2-adapter #1");
  strict.Has("type");
  EXPECT_TRUE(Mentions(spec.kind->parse(strict, &spec).message(), "must be in [0, 10], got 30"));
  EXPECT_TRUE(Mentions(strict.RejectUnknown().message(), "field 'colour'"));
}

}  // namespace
}  // namespace lmcache::tier
