// FlagValue: one command-line flag as GET /config shows it: its name, its
// effective value (as given, or its default; secrets masked by whoever fills
// it) and whether it was given. A plain value, so the layer that parses
// flags (daemon/) and the one that serves them (admin_http/) share no code.
//
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <vector>

namespace lmcache {

struct FlagValue {
  std::string name;                 // "--l1-size-gb"
  std::vector<std::string> values;  // one for most flags; every occurrence of a repeatable one
  bool repeatable = false;
  bool given = false;  // on the command line (else `values` is its default, possibly none)
};

}  // namespace lmcache
