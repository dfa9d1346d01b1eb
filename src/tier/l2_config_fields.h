// L2ConfigFields: reads the fields of one `--l2-adapter` JSON object for the
// adapter types' parsers (l2_adapter_types.h), strictly: a value of the wrong
// type or out of range, or a key nobody read, is refused with a message that
// names the adapter's position and the field.
//
// Thread-safety: a plain value, used on the thread that parses the flags.
#pragma once

#include <nlohmann/json.hpp>

#include <any>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lmcache/status.h"
#include "tier/l2_config.h"

namespace lmcache::tier {

inline constexpr double kConfigGiB = 1024.0 * 1024.0 * 1024.0;

class L2ConfigFields {
 public:
  using json = nlohmann::json;
  L2ConfigFields(const json& object, std::string where)
      : object_(object), where_(std::move(where)) {}

  Status Error(const std::string& field, const std::string& problem) const {
    return InvalidConfig(where_ + " field '" + field + "': " + problem);
  }
  // Whether the object has `field`; marks it read.
  bool Has(const std::string& field) {
    seen_.insert(field);
    return object_.contains(field);
  }
  Result<std::string> String(const std::string& field, bool required);
  Result<double> Number(const std::string& field, double fallback, double min, double max);
  Result<bool> Bool(const std::string& field, bool fallback);
  // The adapter object nested in `field` (fault_inject's `inner`), parsed
  // whole; `role` says what it is in the error when it is missing.
  Result<L2AdapterSpec> Adapter(const std::string& field, const std::string& role);
  // Keys the reference accepts that this server does not act on.
  void Ignore(std::initializer_list<const char*> fields, std::vector<std::string>* ignored) {
    for (const char* f : fields) {
      if (Has(f)) ignored->push_back(f);
    }
  }
  // Every key must have been read.
  Status RejectUnknown() const;
  const json& object() const { return object_; }
  const std::string& where() const { return where_; }

 private:
  const json& object_;
  const std::string where_;
  std::set<std::string> seen_;
};

// An adapter type whose configuration is a `Config`: `parse` reads the
// type's own fields into one, `make` builds the adapter from it.
template <typename Config>
L2AdapterType TypedL2AdapterType(
    std::string name, std::vector<std::string> aliases,
    std::function<Result<Config>(L2ConfigFields&, L2AdapterSpec*)> parse,
    std::function<Result<std::unique_ptr<L2Adapter>>(const Config&)> make) {
  return {std::move(name), std::move(aliases),
          [parse = std::move(parse)](L2ConfigFields& f, L2AdapterSpec* spec) -> Status {
            LMC_ASSIGN_OR_RETURN(Config config, parse(f, spec));
            spec->config = std::move(config);
            return Status::Ok();
          },
          [make = std::move(make)](const L2AdapterSpec& spec, const L2Environment&) {
            return make(std::any_cast<const Config&>(spec.config));
          }};
}

}  // namespace lmcache::tier
