// L2 adapter types: what `--l2-adapter '{"type": ...}'` can name in this build.
//
// Each type lives in its own translation unit (fs_adapter_type.cc,
// resp_adapter_type.cc, ...) and registers a parser for its own JSON fields
// and a factory. Which types a build has is decided by src/CMakeLists.txt, one
// `lmc_l2_adapter_type(...)` line each (a type with an external library sits
// behind its own option, e.g. LMC_L2_RESP for hiredis); the generated
// l2_builtin_types.cc calls their registration functions, so adding a backend
// touches its own files and that one line, never this header or l2_config.
//
// Thread-safety: Builtin() registers every type once, on its first call
// (thread-safe, a function-local static); the set is read-only afterwards.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"
#include "tier/l2_adapter.h"

namespace lmcache::fleet {
class PeerAccess;
}

namespace lmcache::tier {

class L2ConfigFields;
struct L2AdapterSpec;

// What an adapter may need from the server beyond its own fields.
class ElementTypeDirectory;

struct L2Environment {
  // The fleet, with P2P on (the p2p type reads its peers through it); null otherwise.
  const fleet::PeerAccess* fleet = nullptr;
  // What a serde reads an object's element type from (serde_adapter.h); null:
  // every object is stored raw.
  const ElementTypeDirectory* element_types = nullptr;
};

struct L2AdapterType {
  std::string name;                  // the `type` value, e.g. "resp"
  std::vector<std::string> aliases;  // other accepted names, e.g. "valkey"
  // Reads the type's own fields into spec->config (and spec->ignored_keys);
  // the fields every type shares are read by l2_config.
  std::function<Status(L2ConfigFields&, L2AdapterSpec*)> parse;
  // Builds an adapter from a spec this type parsed.
  std::function<Result<std::unique_ptr<L2Adapter>>(const L2AdapterSpec&, const L2Environment&)> make;
};

class L2AdapterTypes {
 public:
  // The types of this build.
  static const L2AdapterTypes& Builtin();
  void Add(L2AdapterType type) { types_.push_back(std::move(type)); }
  // The type named `name` (or one of its aliases), or nullptr.
  const L2AdapterType* Find(std::string_view name) const;
  // "fs, resp (valkey), mock and fault_inject": for the unknown-type error.
  std::string Names() const;

 private:
  std::vector<L2AdapterType> types_;
};

// Generated (src/CMakeLists.txt): calls the registration function of every
// type this build has.
void RegisterBuiltinL2AdapterTypes(L2AdapterTypes& types);

}  // namespace lmcache::tier
