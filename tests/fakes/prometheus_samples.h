// PrometheusSamples: the samples of a Prometheus text exposition, by series
// (`name{labels}` exactly as written) to value, for tests that check what
// /metrics serves.
//
// Thread-safety: a pure function.
#pragma once

#include <map>
#include <sstream>
#include <string>

namespace lmcache::testing {

inline std::map<std::string, double> PrometheusSamples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

}  // namespace lmcache::testing
