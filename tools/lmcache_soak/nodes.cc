// The servers of a soak (soak.h, SoakNodes): one, or a fleet sharing over P2P.
#include <unistd.h>

#include <filesystem>

#include "soak.h"

namespace lmcache::soak {

Result<std::unique_ptr<SoakNodes>> SoakNodes::Start(const std::string& binary, int count,
                                                    const std::vector<std::string>& args) {
  std::unique_ptr<SoakNodes> nodes(new SoakNodes());
  nodes->binary_ = binary;
  nodes->args_.assign(static_cast<std::size_t>(count), args);
  if (count > 1) {
    nodes->dir_ = std::make_unique<tools::ScopedDirectory>(
        std::filesystem::temp_directory_path() /
        ("lmcache_soak_fleet_" + std::to_string(::getpid())));
    LMC_ASSIGN_OR_RETURN(const std::string key_file,
                         tools::WriteFleetKeyFile(nodes->dir_->path().string()));
    LMC_ASSIGN_OR_RETURN(const std::vector<int> ports, tools::FreeLoopbackTcpPorts(count));
    // Each node lists every other (its own address would be skipped anyway).
    for (int n = 0; n < count; ++n) {
      std::string peers;
      for (int m = 0; m < count; ++m) {
        if (m == n) continue;
        peers += (peers.empty() ? "" : ",") + std::string("tcp://127.0.0.1:") +
                 std::to_string(ports[static_cast<std::size_t>(m)]);
      }
      nodes->args_[static_cast<std::size_t>(n)].insert(
          nodes->args_[static_cast<std::size_t>(n)].end(),
          {"--p2p-advertise-url", "127.0.0.1:" + std::to_string(ports[static_cast<std::size_t>(n)]),
           "--p2p-auth-key-file", key_file, "--p2p-peers", peers});
    }
  }
  nodes->servers_.resize(static_cast<std::size_t>(count));
  for (int n = 0; n < count; ++n) LMC_RETURN_IF_ERROR(nodes->StartNode(n));
  return nodes;
}

Status SoakNodes::StartNode(int node) {
  const std::string name = count() > 1 ? "lmcache_soak_node" + std::to_string(node)
                                        : std::string("lmcache_soak_server");
  LMC_ASSIGN_OR_RETURN(servers_[static_cast<std::size_t>(node)],
                       tools::LocalServer::Start(binary_, name,
                                                 args_[static_cast<std::size_t>(node)]));
  return Status::Ok();
}

Status SoakNodes::KillAndRestart(int node) {
  auto& server = servers_[static_cast<std::size_t>(node)];
  server->Kill();
  server.reset();
  return StartNode(node);
}

}  // namespace lmcache::soak
