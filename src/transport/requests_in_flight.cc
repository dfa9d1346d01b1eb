#include "transport/requests_in_flight.h"

#include <algorithm>

namespace lmcache::transport {

void RequestsInFlight::Started(const std::string& connection, bool late) {
  Entry& entry = entries_[connection];
  entry.in_flight += 1;
  entry.closed = entry.closed || late;
}

bool RequestsInFlight::Answered(const std::string& connection) {
  auto it = entries_.find(connection);
  if (it == entries_.end()) return false;  // not counted: nothing to do
  if (--it->second.in_flight > 0) return false;
  const bool closed = it->second.closed;
  entries_.erase(it);
  return closed;
}

bool RequestsInFlight::Closed(const std::string& connection) {
  auto it = entries_.find(connection);
  if (it == entries_.end()) return true;
  it->second.closed = true;
  return false;
}

std::size_t RequestsInFlight::closing() const {
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e.second.closed; }));
}

}  // namespace lmcache::transport
