#include "stats/field.h"

namespace lmcache::stats {

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kCounter: return "counter";
    case Kind::kGauge: return "gauge";
    case Kind::kHistogram: return "histogram";
    case Kind::kText: return "info";
  }
  return "?";
}

}  // namespace lmcache::stats
