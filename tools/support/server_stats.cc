#include "support/server_stats.h"

#include <charconv>

#include "common/msgpack_codec.h"
#include "common/msgpack_tree.h"

namespace lmcache::tools {

Result<ServerStats> ServerStats::Fetch(client::Client& client) {
  LMC_ASSIGN_OR_RETURN(const std::string reply, client.Call("stats", {}));
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle,
                       msgpk::Parse(reply, "stats", msgpk::DecodeLimits{.max_map_items = 4096}));
  ServerStats stats;
  stats.root_ = std::make_shared<msgpack::object_handle>(std::move(handle));
  return stats;
}

std::optional<double> ServerStats::Number(std::string_view path) const {
  if (!root_) return std::nullopt;
  msgpack::object node = root_->get();
  while (!path.empty()) {
    const std::size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (node.type == msgpack::type::ARRAY) {
      std::size_t index = 0;
      auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), index);
      if (error != std::errc() || index >= node.via.array.size) return std::nullopt;
      node = node.via.array.ptr[index];
      continue;
    }
    if (node.type != msgpack::type::MAP) return std::nullopt;
    const msgpack::object* next = nullptr;
    for (std::uint32_t i = 0; i < node.via.map.size; ++i) {
      const msgpack::object& key = node.via.map.ptr[i].key;
      if (key.type == msgpack::type::STR &&
          std::string_view(key.via.str.ptr, key.via.str.size) == part) {
        next = &node.via.map.ptr[i].val;
        break;
      }
    }
    if (next == nullptr) return std::nullopt;
    node = *next;
  }
  auto value = msgpk::AsFloat(node, "stats value");
  if (!value.ok()) return std::nullopt;
  return *value;
}

}  // namespace lmcache::tools
