#include "transport/source_cap.h"

#include "common/socket_address.h"

namespace lmcache::transport {

bool SourceCap::Accepted(int fd) {
  Closed(fd);  // a descriptor still recorded was closed unseen: its number is reused now
  std::string source = SocketAddressText(fd, /*peer=*/true);
  int own_port = 0;
  SocketAddressText(fd, /*peer=*/false, &own_port);
  if (source.empty() || own_port != local_port_) return true;
  std::size_t& count = count_[source];
  if (count >= max_per_source_) return false;
  count += 1;
  source_of_.emplace(fd, std::move(source));
  return true;
}

void SourceCap::Closed(int fd) {
  auto it = source_of_.find(fd);
  if (it == source_of_.end()) return;
  auto count = count_.find(it->second);
  if (count != count_.end() && --count->second == 0) count_.erase(count);
  source_of_.erase(it);
}

std::size_t SourceCap::ConnectionsFrom(const std::string& source) const {
  auto it = count_.find(source);
  return it == count_.end() ? 0 : it->second;
}

}  // namespace lmcache::transport
