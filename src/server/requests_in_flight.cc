#include "server/requests_in_flight.h"

namespace lmcache::server {

void RequestsInFlight::Started(const std::string& connection, bool late) {
  Entry& entry = entries_[connection];
  entry.in_flight += 1;
  if (late && !entry.closed) {
    entry.closed = true;
    closing_ += 1;
  }
}

bool RequestsInFlight::Answered(const std::string& connection) {
  auto it = entries_.find(connection);
  if (it == entries_.end()) return false;  // not counted: nothing to do
  if (--it->second.in_flight > 0) return false;
  const bool closed = it->second.closed;
  if (closed) closing_ -= 1;
  entries_.erase(it);
  return closed;
}

bool RequestsInFlight::Closed(const std::string& connection) {
  auto it = entries_.find(connection);
  if (it == entries_.end()) return true;
  if (!it->second.closed) {
    it->second.closed = true;
    closing_ += 1;
  }
  return false;
}

}  // namespace lmcache::server
