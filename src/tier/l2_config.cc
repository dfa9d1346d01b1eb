#include "tier/l2_config.h"

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "common/mask_secrets.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {
namespace {

using nlohmann::json;

std::string FormatNumber(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Result<L2AdapterSpec> ParseObject(const json& object, const std::string& where);

// The reference's `serde` block (lmcache/v1/distributed/serde/factory.py):
// {"type": "fp8", "fp8_dtype": "float8_e4m3fn" | "float8_e5m2", "max_workers": n};
// and ours, {"type": "lossless"}.
Status ParseSerde(L2ConfigFields& f, L2AdapterSpec* spec) {
  const json& serde = f.object()["serde"];
  if (!serde.is_object()) return f.Error("serde", "must be an object, e.g. {\"type\": \"fp8\"}");
  if (!serde.contains("type") || !serde["type"].is_string()) {
    return f.Error("serde.type", "is required: \"fp8\"");
  }
  const std::string type = serde["type"].get<std::string>();
  if (type == "cachegen") {
    return f.Error("serde.type",
                   "\"cachegen\" (CacheGen's learned codec) is not built into this server; use "
                   "{\"type\": \"fp8\"} to store half the bytes, or remove serde");
  }
  if (type == "lossless") {  // ours: byte planes and zstd (payload_codec.h)
    for (const auto& [key, value] : serde.items()) {
      if (key != "type")
        return f.Error("serde." + key, "is not a field of the lossless serde (type)");
    }
    spec->serde.codec = PayloadCodec::kLossless;
    return Status::Ok();
  }
  if (type != "fp8") {
    return f.Error("serde.type",
                   "\"" + type + "\" is not a serde of this server, which has fp8 and lossless");
  }
  for (const auto& [key, value] : serde.items()) {
    if (key == "type") continue;
    if (key == "fp8_dtype") {
      std::string dtype = value.is_string() ? value.get<std::string>() : "";
      if (dtype.starts_with("torch.")) dtype.erase(0, 6);
      if (dtype == "float8_e4m3fn") {
        spec->serde.codec = PayloadCodec::kFp8E4M3;
      } else if (dtype == "float8_e5m2") {
        spec->serde.codec = PayloadCodec::kFp8E5M2;
      } else {
        return f.Error("serde.fp8_dtype", "must be \"float8_e4m3fn\" or \"float8_e5m2\"");
      }
      continue;
    }
    if (key == "max_workers") {
      // The reference takes int(value): 2, 2.0 and "2" alike.
      double workers = 0;
      if (value.is_number()) workers = value.get<double>();
      if (value.is_string()) workers = std::strtod(value.get<std::string>().c_str(), nullptr);
      if (!(workers >= 1)) return f.Error("serde.max_workers", "must be an integer >= 1");
      spec->ignored_keys.push_back(
          "serde.max_workers (objects are encoded on the store controller's workers)");
      continue;
    }
    return f.Error("serde." + key,
                   "is not a field of the fp8 serde (type, fp8_dtype, max_workers)");
  }
  if (spec->serde.codec == PayloadCodec::kRaw) spec->serde.codec = PayloadCodec::kFp8E4M3;
  return Status::Ok();
}

Status ParseCommon(L2ConfigFields& f, L2AdapterSpec* spec) {
  LMC_ASSIGN_OR_RETURN(spec->name, f.String("name", false));
  LMC_ASSIGN_OR_RETURN(const std::string tag, f.String("affinity_tag", false));
  if (!tag.empty() && tag != "_default") {
    return f.Error("affinity_tag", "only \"_default\" (one L1 pool) is served");
  }
  if (f.Has("serde")) LMC_RETURN_IF_ERROR(ParseSerde(f, spec));
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

Result<L2AdapterSpec> ParseObject(const json& object, const std::string& where) {
  if (!object.is_object()) return InvalidConfig(where + ": must be a JSON object");
  L2ConfigFields f(object, where);
  L2AdapterSpec spec;
  LMC_ASSIGN_OR_RETURN(spec.type, f.String("type", true));
  const L2AdapterTypes& types = L2AdapterTypes::Builtin();
  spec.kind = types.Find(spec.type);
  if (spec.kind == nullptr) {
    return f.Error("type", "unknown adapter type '" + spec.type + "'; this server has " +
                               types.Names());
  }
  LMC_RETURN_IF_ERROR(spec.kind->parse(f, &spec));
  LMC_RETURN_IF_ERROR(ParseCommon(f, &spec));
  LMC_RETURN_IF_ERROR(f.RejectUnknown());
  return spec;
}

}  // namespace

Result<L2AdapterSpec> ParseL2AdapterSpec(std::string_view text, int position) {
  return ParseL2AdapterSpecAt(text, "--l2-adapter #" + std::to_string(position));
}

Result<L2AdapterSpec> ParseL2AdapterSpecAt(std::string_view text, const std::string& where) {
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return InvalidConfig(where + ": not valid JSON: " + MaskSecrets(text));
  LMC_ASSIGN_OR_RETURN(L2AdapterSpec spec, ParseObject(object, where));
  spec.source = std::string(text);
  return spec;
}

Result<std::unique_ptr<L2Adapter>> MakeL2Adapter(const L2AdapterSpec& spec,
                                                 const L2Environment& environment) {
  if (spec.kind == nullptr) return InvalidConfig("L2 adapter '" + spec.type + "' was not parsed");
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<L2Adapter> made, spec.kind->make(spec, environment));
  if (spec.serde.codec == PayloadCodec::kRaw) return made;
  return std::unique_ptr<L2Adapter>(
      std::make_unique<SerdeAdapter>(std::move(made), spec.serde, environment.element_types));
}

Result<std::string> L2ConfigFields::String(const std::string& field, bool required) {
  if (!Has(field)) {
    if (required) return Error(field, "is required");
    return std::string();
  }
  if (!object_[field].is_string()) return Error(field, "must be a string");
  return object_[field].get<std::string>();
}

Result<double> L2ConfigFields::Number(const std::string& field, double fallback, double min,
                                      double max) {
  if (!Has(field)) return fallback;
  if (!object_[field].is_number()) return Error(field, "must be a number");
  const double value = object_[field].get<double>();
  if (!(value >= min && value <= max)) {
    return Error(field, "must be in [" + FormatNumber(min) + ", " + FormatNumber(max) +
                            "], got " + FormatNumber(value));
  }
  return value;
}

Result<bool> L2ConfigFields::Bool(const std::string& field, bool fallback) {
  if (!Has(field)) return fallback;
  if (!object_[field].is_boolean()) return Error(field, "must be true or false");
  return object_[field].get<bool>();
}

Result<L2AdapterSpec> L2ConfigFields::Adapter(const std::string& field,
                                              const std::string& role) {
  if (!Has(field) || !object_[field].is_object()) {
    return Error(field, "is required: " + role + ", as an object");
  }
  return ParseObject(object_[field], where_ + " " + field);
}

Status L2ConfigFields::RejectUnknown() const {
  for (const auto& [key, value] : object_.items()) {
    if (!seen_.contains(key)) return Error(key, "is not a field of this adapter type");
  }
  return Status::Ok();
}

}  // namespace lmcache::tier
