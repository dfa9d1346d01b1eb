#include "tier/l2_adapter_types.h"

#include <algorithm>

namespace lmcache::tier {

const L2AdapterTypes& L2AdapterTypes::Builtin() {
  static const L2AdapterTypes kTypes = [] {
    L2AdapterTypes types;
    RegisterBuiltinL2AdapterTypes(types);
    return types;
  }();
  return kTypes;
}

const L2AdapterType* L2AdapterTypes::Find(std::string_view name) const {
  for (const L2AdapterType& type : types_) {
    if (type.name == name) return &type;
    if (std::find(type.aliases.begin(), type.aliases.end(), name) != type.aliases.end()) {
      return &type;
    }
  }
  return nullptr;
}

std::string L2AdapterTypes::Names() const {
  std::string out;
  for (std::size_t i = 0; i < types_.size(); ++i) {
    if (i > 0) out += i + 1 == types_.size() ? " and " : ", ";
    out += types_[i].name;
    if (!types_[i].aliases.empty()) {
      out += " (";
      for (std::size_t a = 0; a < types_[i].aliases.size(); ++a) {
        out += (a > 0 ? ", " : "") + types_[i].aliases[a];
      }
      out += ")";
    }
  }
  return out;
}

}  // namespace lmcache::tier
