#include "tier/l2_config.h"

#include <nlohmann/json.hpp>

#include <set>

namespace lmcache::tier {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Reads the fields of one adapter object and reports the first problem.
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  Status Error(const std::string& field, const std::string& problem) const {
    return InvalidConfig(where_ + " field '" + field + "': " + problem);
  }
  bool Has(const std::string& field) {
    seen_.insert(field);
    return object_.contains(field);
  }
  Result<std::string> String(const std::string& field, bool required) {
    if (!Has(field)) {
      if (required) return Error(field, "is required");
      return std::string();
    }
    if (!object_[field].is_string()) return Error(field, "must be a string");
    return object_[field].get<std::string>();
  }
  Result<double> Number(const std::string& field, double fallback, double min, double max) {
    if (!Has(field)) return fallback;
    if (!object_[field].is_number()) return Error(field, "must be a number");
    const double value = object_[field].get<double>();
    if (!(value >= min && value <= max)) {
      return Error(field, "must be in [" + Format(min) + ", " + Format(max) + "], got " +
                              Format(value));
    }
    return value;
  }
  Result<bool> Bool(const std::string& field, bool fallback) {
    if (!Has(field)) return fallback;
    if (!object_[field].is_boolean()) return Error(field, "must be true or false");
    return object_[field].get<bool>();
  }
  // Keys the reference accepts that this server does not act on.
  void Ignore(std::initializer_list<const char*> fields, std::vector<std::string>* ignored) {
    for (const char* f : fields) {
      if (Has(f)) ignored->push_back(f);
    }
  }
  // Every key must have been read.
  Status RejectUnknown() const {
    for (const auto& [key, value] : object_.items()) {
      if (!seen_.contains(key)) return Error(key, "is not a field of this adapter type");
    }
    return Status::Ok();
  }
  const json& object() const { return object_; }
  const std::string& where() const { return where_; }

 private:
  static std::string Format(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& object_;
  const std::string where_;
  std::set<std::string> seen_;
};

Result<L2AdapterSpec> ParseObject(const json& object, const std::string& where);

Status ParseCommon(Fields& f, L2AdapterSpec* spec) {
  LMC_ASSIGN_OR_RETURN(const std::string tag, f.String("affinity_tag", false));
  if (!tag.empty() && tag != "_default") {
    return f.Error("affinity_tag", "only \"_default\" (one L1 pool) is served");
  }
  if (f.Has("serde")) {
    return f.Error("serde", "compression (fp8) is not supported by this server; remove it");
  }
  if (f.Has("eviction")) {
    const json& e = f.object()["eviction"];
    if (!e.is_object()) return f.Error("eviction", "must be an object");
    if (e.contains("eviction_policy") &&
        (!e["eviction_policy"].is_string() ||
         (e["eviction_policy"] != "LRU" && e["eviction_policy"] != "noop"))) {
      return f.Error("eviction.eviction_policy", "must be \"LRU\" (capacity is kept by LRU)");
    }
    spec->ignored_keys.push_back("eviction (watermarks: capacity is kept by LRU at max_size_gb)");
  }
  f.Ignore({"num_workers", "per_op_workers", "shared", "persist_enabled"}, &spec->ignored_keys);
  return Status::Ok();
}

Result<FsAdapterConfig> ParseFs(Fields& f, L2AdapterSpec* spec) {
  FsAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(const std::string base, f.String("base_path", true));
  if (base.empty()) return f.Error("base_path", "must name a directory");
  c.base_path = base;
  LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_size_gb", 0, 0, 1e6));
  c.max_size_bytes = static_cast<std::uint64_t>(gb * kGiB);
  LMC_ASSIGN_OR_RETURN(c.use_odirect, f.Bool("use_odirect", false));
  LMC_ASSIGN_OR_RETURN(c.fsync, f.Bool("fsync", true));
  LMC_ASSIGN_OR_RETURN(const std::string checksum, f.String("checksum", false));
  if (!checksum.empty() && checksum != "none" && checksum != "crc32" && checksum != "xxh3") {
    return f.Error("checksum", "must be \"none\", \"crc32\" or \"xxh3\"");
  }
  if (!checksum.empty() && checksum != "xxh3") {
    spec->ignored_keys.push_back("checksum (every object carries an XXH3 checksum, always verified)");
  }
  f.Ignore({"relative_tmp_dir", "read_ahead_size"}, &spec->ignored_keys);
  return c;
}

Result<MockAdapterConfig> ParseMock(Fields& f) {
  MockAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_size_gb", 0, 0, 1e6));
  c.max_size_bytes = static_cast<std::uint64_t>(gb * kGiB);
  LMC_ASSIGN_OR_RETURN(c.bandwidth_gb_per_s, f.Number("mock_bandwidth_gb", 0, 0, 1e4));
  return c;
}

Result<std::vector<std::string>> Urls(Fields& f) {
  if (!f.Has("url")) return f.Error("url", "is required: redis://host:port, a list of them, or unix:///path");
  const json& value = f.object()["url"];
  std::vector<std::string> urls;
  if (value.is_string()) {
    urls.push_back(value.get<std::string>());
  } else if (value.is_array() && !value.empty()) {
    for (const json& u : value) {
      if (!u.is_string()) return f.Error("url", "must be a string or a list of strings");
      urls.push_back(u.get<std::string>());
    }
  } else {
    return f.Error("url", "must be a string or a non-empty list of strings");
  }
  return urls;
}

Result<RespAdapterConfig> ParseResp(Fields& f) {
  RespAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(c.urls, Urls(f));
  for (const std::string& url : c.urls) {
    auto endpoint = ParseRespUrl(url, &c.credentials);
    if (!endpoint.ok()) return f.Error("url", endpoint.status().message());
  }
  LMC_ASSIGN_OR_RETURN(const std::string username, f.String("username", false));
  LMC_ASSIGN_OR_RETURN(const std::string password, f.String("password", false));
  if (f.Has("username")) c.credentials.username = username;
  if (f.Has("password")) c.credentials.password = password;
  if (!c.credentials.username.empty() && c.credentials.password.empty()) {
    return f.Error("username", "needs a password");
  }
  LMC_ASSIGN_OR_RETURN(const double db, f.Number("db", c.credentials.db, 0, 65535));
  c.credentials.db = static_cast<int>(db);
  LMC_ASSIGN_OR_RETURN(const std::string mode, f.String("mode", false));
  if (mode.empty() || mode == "auto") {
    c.mode = RespMode::kAuto;
  } else if (mode == "standalone") {
    c.mode = RespMode::kStandalone;
  } else if (mode == "cluster") {
    c.mode = RespMode::kCluster;
  } else {
    return f.Error("mode", "must be \"auto\", \"standalone\" or \"cluster\"");
  }
  if (c.mode == RespMode::kCluster && c.credentials.db != 0) {
    return f.Error("db", "a Redis Cluster has only database 0");
  }
  if (f.Has("key_prefix")) {
    LMC_ASSIGN_OR_RETURN(c.key_prefix, f.String("key_prefix", false));
    if (c.key_prefix.find_first_of("{}") != std::string::npos) {
      return f.Error("key_prefix", "must not contain '{' or '}' (they would change the hash slot)");
    }
  }
  LMC_ASSIGN_OR_RETURN(const double ttl, f.Number("ttl_seconds", 0, 0, 365.0 * 86400));
  c.ttl_seconds = static_cast<std::uint32_t>(ttl);
  LMC_ASSIGN_OR_RETURN(const double in_flight, f.Number("max_in_flight", 16, 1, 4096));
  c.max_in_flight = static_cast<std::uint32_t>(in_flight);
  LMC_ASSIGN_OR_RETURN(const double connect, f.Number("connect_timeout_ms", 1000, 1, 600'000));
  c.timeouts.connect = std::chrono::milliseconds(static_cast<long>(connect));
  LMC_ASSIGN_OR_RETURN(const double command, f.Number("command_timeout_ms", 5000, 1, 600'000));
  c.timeouts.command = std::chrono::milliseconds(static_cast<long>(command));
  LMC_ASSIGN_OR_RETURN(const double retry, f.Number("retry_interval_ms", 1000, 10, 600'000));
  c.retry_interval = std::chrono::milliseconds(static_cast<long>(retry));
  return c;
}

Result<FaultSpec> ParseFault(Fields& f) {
  FaultSpec s;
  if (!f.Has("inner") || !f.object()["inner"].is_object()) {
    return f.Error("inner", "is required: the adapter whose operations fail, as an object");
  }
  LMC_ASSIGN_OR_RETURN(L2AdapterSpec inner, ParseObject(f.object()["inner"], f.where() + " inner"));
  s.inner = std::make_shared<L2AdapterSpec>(std::move(inner));
  LMC_ASSIGN_OR_RETURN(s.faults.store_failure_rate, f.Number("store_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(s.faults.load_failure_rate, f.Number("load_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(s.faults.lookup_failure_rate, f.Number("lookup_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(const double delay, f.Number("delay_ms", 0, 0, 60'000));
  s.faults.delay_ms = static_cast<std::uint32_t>(delay);
  LMC_ASSIGN_OR_RETURN(s.faults.delay_rate, f.Number("delay_rate", 1, 0, 1));
  LMC_ASSIGN_OR_RETURN(const double seed, f.Number("seed", 1, 0, 9e15));
  s.faults.seed = static_cast<std::uint64_t>(seed);
  return s;
}

Result<L2AdapterSpec> ParseObject(const json& object, const std::string& where) {
  if (!object.is_object()) return InvalidConfig(where + ": must be a JSON object");
  Fields f(object, where);
  L2AdapterSpec spec;
  LMC_ASSIGN_OR_RETURN(spec.type, f.String("type", true));
  if (spec.type == "fs") {
    LMC_ASSIGN_OR_RETURN(spec.config, ParseFs(f, &spec));
  } else if (spec.type == "mock") {
    LMC_ASSIGN_OR_RETURN(spec.config, ParseMock(f));
  } else if (spec.type == "resp" || spec.type == "valkey") {
    LMC_ASSIGN_OR_RETURN(spec.config, ParseResp(f));
  } else if (spec.type == "fault_inject") {
    LMC_ASSIGN_OR_RETURN(spec.config, ParseFault(f));
  } else {
    return f.Error("type", "unknown adapter type '" + spec.type +
                               "'; this server has fs, resp (valkey), mock and fault_inject");
  }
  LMC_RETURN_IF_ERROR(ParseCommon(f, &spec));
  LMC_RETURN_IF_ERROR(f.RejectUnknown());
  return spec;
}

}  // namespace

Result<L2AdapterSpec> ParseL2AdapterSpec(std::string_view text, int position) {
  const std::string where = "--l2-adapter #" + std::to_string(position);
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return InvalidConfig(where + ": not valid JSON: " + std::string(text));
  return ParseObject(object, where);
}

Result<std::unique_ptr<L2Adapter>> MakeL2Adapter(const L2AdapterSpec& spec) {
  if (const auto* fs = std::get_if<FsAdapterConfig>(&spec.config)) {
    LMC_ASSIGN_OR_RETURN(auto adapter, FsAdapter::Create(*fs));
    return std::unique_ptr<L2Adapter>(std::move(adapter));
  }
  if (const auto* resp = std::get_if<RespAdapterConfig>(&spec.config)) {
    LMC_ASSIGN_OR_RETURN(auto adapter, RespAdapter::Create(*resp));
    return std::unique_ptr<L2Adapter>(std::move(adapter));
  }
  if (const auto* mock = std::get_if<MockAdapterConfig>(&spec.config)) {
    return std::unique_ptr<L2Adapter>(std::make_unique<MockAdapter>(*mock));
  }
  const auto& fault = std::get<FaultSpec>(spec.config);
  LMC_ASSIGN_OR_RETURN(auto inner, MakeL2Adapter(*fault.inner));
  return std::unique_ptr<L2Adapter>(std::make_unique<FaultAdapter>(std::move(inner), fault.faults));
}

}  // namespace lmcache::tier
