// L2 configuration: the JSON of --l2-adapter is checked strictly, every error
// names the adapter and the field.
#include "tier/l2_config.h"

#include <gtest/gtest.h>

#include <any>

#include "tier/fault/fault_adapter.h"
#include "tier/fs/fs_adapter.h"
#include "tier/l2_config_fields.h"
#include "tier/mock/mock_adapter.h"
#if LMC_L2_S3
#include "tier/s3/s3_adapter.h"
#endif

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
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"gcs"})"), "unknown adapter type 'gcs'"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs"})"), "field 'base_path': is required"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":7})"), "'base_path': must be a string"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","max_size_gb":-1})"),
                       "'max_size_gb': must be in [0, 1000000], got -1"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","use_odirect":"yes"})"),
                       "'use_odirect': must be true or false"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fs","base_path":"/x","bse_path":"/y"})"),
                       "field 'bse_path': is not a field"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"fault_inject","inner":{"type":"mock","x":1}})"),
                       "#2 inner field 'x'"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"mock","affinity_tag":"gpu1"})"), "'affinity_tag'"));
}

// Issue 64: the reference's serde blocks (its serde/factory.py and fp8.py:
// type fp8, fp8_dtype a torch name, default float8_e4m3fn, max_workers).
// fp8 is built; the other types are refused by name, with what to use.
TEST(L2ConfigTest, TheReferencesFp8SerdeIsTakenAndItsOtherTypesAreRefusedByName) {
  const std::pair<const char*, PayloadCodec> taken[] = {
      {R"({"type":"fp8"})", PayloadCodec::kFp8E4M3},
      {R"({"type":"fp8","fp8_dtype":"float8_e4m3fn","max_workers":4})", PayloadCodec::kFp8E4M3},
      {R"({"type":"fp8","max_workers":"2"})", PayloadCodec::kFp8E4M3},
      {R"({"type":"fp8","max_workers":2.0})", PayloadCodec::kFp8E4M3},
      {R"({"type":"fp8","fp8_dtype":"float8_e5m2"})", PayloadCodec::kFp8E5M2},
      {R"({"type":"fp8","fp8_dtype":"torch.float8_e5m2"})", PayloadCodec::kFp8E5M2},
      {R"({"type":"lossless"})", PayloadCodec::kLossless},
  };
  for (const auto& [serde, codec] : taken) {
    const std::string json = std::string(R"({"type":"mock","serde":)") + serde + "}";
    auto spec = ParseL2AdapterSpec(json, 1);
    ASSERT_TRUE(spec.ok()) << json << ": " << spec.status().ToString();
    EXPECT_EQ(spec->serde.codec, codec) << json;
  }
  auto plain = ParseL2AdapterSpec(R"({"type":"mock"})", 1);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->serde.codec, PayloadCodec::kRaw);
  auto with_workers =
      ParseL2AdapterSpec(R"({"type":"mock","serde":{"type":"fp8","max_workers":2}})", 1);
  ASSERT_TRUE(with_workers.ok());
  EXPECT_EQ(with_workers->ignored_keys.size(), 1u) << "max_workers is reported as without effect";

  const std::pair<const char*, const char*> refused[] = {
      {R"({"type":"cachegen"})", "\"cachegen\" (CacheGen's learned codec) is not built"},
      {R"({"type":"aesgcm"})",
       "\"aesgcm\" is not a serde of this server, which has fp8 and lossless"},
      {R"({"type":"lossless","level":3})", "'serde.level': is not a field of the lossless serde"},
      {R"({"fp8_dtype":"float8_e4m3fn"})", "'serde.type': is required"},
      {R"("fp8")", "'serde': must be an object"},
      {R"({"type":"fp8","fp8_dtype":"float8_e4m3fnuz"})", "'serde.fp8_dtype': must be"},
      {R"({"type":"fp8","fp8_dtype":8})", "'serde.fp8_dtype': must be"},
      {R"({"type":"fp8","max_workers":0})", "'serde.max_workers': must be an integer >= 1"},
      {R"({"type":"fp8","scale":2})", "'serde.scale': is not a field of the fp8 serde"},
  };
  for (const auto& [serde, message] : refused) {
    const std::string error =
        ErrorOf(std::string(R"({"type":"fs","base_path":"/x","serde":)") + serde + "}");
    EXPECT_TRUE(Mentions(error, message)) << serde << ": " << error;
    EXPECT_TRUE(Mentions(error, "--l2-adapter #2")) << error;
  }
}

// A serde wraps the adapter it is given to: stores are encoded, and the
// adapter says so in its stats.
TEST(L2ConfigTest, AnAdapterWithASerdeIsBuiltWrappedInIt) {
  auto spec =
      ParseL2AdapterSpec(R"({"type":"mock","serde":{"type":"fp8","fp8_dtype":"float8_e5m2"}})", 1);
  ASSERT_TRUE(spec.ok());
  auto adapter = MakeL2Adapter(*spec);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  EXPECT_EQ((*adapter)->Stats().serde, "fp8-e5m2");
  auto plain = MakeL2Adapter(*ParseL2AdapterSpec(R"({"type":"mock"})", 1));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->Stats().serde, "");
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
                               (LMC_L2_RESP ? "resp (valkey), " : "") + (LMC_L2_S3 ? "s3, " : "") +
                               "mock, fault_inject and p2p";
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"gcs"})"), expected)) << ErrorOf(R"({"type":"gcs"})");
  EXPECT_EQ(L2AdapterTypes::Builtin().Find("s3") != nullptr, static_cast<bool>(LMC_L2_S3));
  EXPECT_EQ(L2AdapterTypes::Builtin().Find("resp") != nullptr, static_cast<bool>(LMC_L2_RESP));
  EXPECT_EQ(L2AdapterTypes::Builtin().Find("valkey"), L2AdapterTypes::Builtin().Find("resp"));
}

#if LMC_L2_S3
// The reference's s3 fields (s3_l2_adapter.py S3L2AdapterConfig.from_dict),
// its virtual-hosted endpoint forms, and ours beside them.
TEST(L2ConfigTest, TheReferencesS3FieldsAreTaken) {
  auto spec = ParseL2AdapterSpec(
      R"({"type":"s3","s3_endpoint":"s3://kv-cache.s3.us-west-2.amazonaws.com","s3_region":"us-west-2",
          "s3_num_io_threads":16,"s3_prefer_http2":false,"s3_enable_s3express":false,
          "disable_tls":false,"aws_access_key_id":"AKID","aws_secret_access_key":"SECRET",
          "max_capacity_gb":2,"serde":{"type":"fp8"}})",
      1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const auto& c = std::any_cast<const S3AdapterConfig&>(spec->config);
  EXPECT_EQ(c.client.scheme, "https");
  EXPECT_EQ(c.client.bucket, "kv-cache");
  EXPECT_EQ(c.client.host, "s3.us-west-2.amazonaws.com");
  EXPECT_TRUE(c.client.virtual_hosted);
  EXPECT_EQ(c.client.region, "us-west-2");
  EXPECT_EQ(c.client.max_connections, 16u);
  EXPECT_FALSE(c.client.prefer_http2);
  EXPECT_EQ(c.client.credentials.access_key_id, "AKID");
  EXPECT_EQ(c.credentials_source, "config");
  EXPECT_EQ(c.max_capacity_bytes, 2ull << 30);
  EXPECT_EQ(spec->serde.codec, PayloadCodec::kFp8E4M3);

  auto bare = ParseL2AdapterSpec(
      R"({"type":"s3","s3_endpoint":"bucket.minio.local:9000","s3_region":"x","disable_tls":true,
          "aws_access_key_id":"a","aws_secret_access_key":"b"})",
      1);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  const auto& b = std::any_cast<const S3AdapterConfig&>(bare->config);
  EXPECT_EQ(b.client.scheme, "http");
  EXPECT_EQ(b.client.host, "minio.local:9000");
  EXPECT_EQ(b.client.bucket, "bucket");

  auto path = ParseL2AdapterSpec(
      R"({"type":"s3","s3_endpoint":"http://127.0.0.1:7480/","bucket":"lmc","s3_region":"default",
          "key_prefix":"fleet-a/","request_timeout_ms":2000,"max_retries":1,
          "aws_access_key_id":"a","aws_secret_access_key":"b"})",
      1);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto& p = std::any_cast<const S3AdapterConfig&>(path->config);
  EXPECT_FALSE(p.client.virtual_hosted);
  EXPECT_EQ(p.client.host, "127.0.0.1:7480");
  EXPECT_EQ(p.client.bucket, "lmc");
  EXPECT_EQ(p.key_prefix, "fleet-a/");
  EXPECT_EQ(p.client.request_timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(p.client.max_attempts, 2u);
}

TEST(L2ConfigTest, BadS3ConfigsAreRefusedSayingWhatToChange) {
  const std::string keys = R"(,"aws_access_key_id":"a","aws_secret_access_key":"b")";
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"s3","s3_region":"r")" + keys + "}"),
                       "field 's3_endpoint': is required"));
  EXPECT_TRUE(Mentions(ErrorOf(R"({"type":"s3","s3_endpoint":"bkt.h")" + keys + "}"),
                       "field 's3_region': is required"));
  EXPECT_TRUE(
      Mentions(ErrorOf(R"({"type":"s3","s3_endpoint":"nodot","s3_region":"r")" + keys + "}"),
               "virtual-hosted"));
  EXPECT_TRUE(
      Mentions(ErrorOf(R"({"type":"s3","s3_endpoint":"http://h","s3_region":"r")" + keys + "}"),
               "field 'bucket': is required"));
  EXPECT_TRUE(Mentions(
      ErrorOf(
          R"({"type":"s3","s3_endpoint":"https://h","bucket":"bkt","disable_tls":true,"s3_region":"r")" +
          keys + "}"),
      "field 'disable_tls'"));
  EXPECT_TRUE(
      Mentions(ErrorOf(R"({"type":"s3","s3_endpoint":"Bad_Bucket.h","s3_region":"r")" + keys + "}"),
               "not a valid S3 bucket name"));
  EXPECT_TRUE(Mentions(
      ErrorOf(R"({"type":"s3","s3_endpoint":"bkt.h","s3_region":"r","s3_enable_s3express":true)" +
              keys + "}"),
      "S3 Express One Zone"));
  EXPECT_TRUE(Mentions(
      ErrorOf(R"({"type":"s3","s3_endpoint":"bkt.h","s3_region":"r","s3_num_io_threads":0)" + keys +
              "}"),
      "s3_num_io_threads"));
  EXPECT_TRUE(Mentions(
      ErrorOf(R"({"type":"s3","s3_endpoint":"bkt.h","s3_region":"r","s3_bukcet":1)" + keys + "}"),
      "s3_bukcet"));
  // Half a pair of keys names the missing half, and never shows the secret.
  const std::string half = ErrorOf(
      R"({"type":"s3","s3_endpoint":"bkt.h","s3_region":"r","aws_secret_access_key":"hunter2"})");
  EXPECT_TRUE(Mentions(half, "aws_access_key_id is missing")) << half;
  EXPECT_FALSE(Mentions(half, "hunter2")) << half;
}
#endif

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
