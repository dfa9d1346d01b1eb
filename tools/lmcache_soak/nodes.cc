// The servers of a soak (soak.h, SoakNodes): one, or a fleet sharing over P2P.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "soak.h"

namespace lmcache::soak {
namespace {

// A port on 127.0.0.1 free now (bound and closed; a node started on it
// right after fails clearly in the rare case another process took it).
Result<int> FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(ErrorCode::kIoError, "socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!bound) return Status(ErrorCode::kIoError, "no free TCP port on 127.0.0.1");
  return static_cast<int>(ntohs(address.sin_port));
}

Result<std::string> WriteFleetKey(const std::filesystem::path& dir) {
  const std::string path = (dir / "fleet.key").string();
  std::ifstream random("/dev/urandom", std::ios::binary);
  char key[32];
  if (!random.read(key, sizeof(key))) return Status(ErrorCode::kIoError, "/dev/urandom");
  std::ofstream(path, std::ios::binary).write(key, sizeof(key));
  ::chmod(path.c_str(), 0600);
  return path;
}

}  // namespace

SoakNodes::~SoakNodes() {
  servers_.clear();  // stopped first: the key file goes after
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

Result<std::unique_ptr<SoakNodes>> SoakNodes::Start(const std::string& binary, int count,
                                                    const std::vector<std::string>& args) {
  std::unique_ptr<SoakNodes> nodes(new SoakNodes());
  nodes->binary_ = binary;
  nodes->args_.assign(static_cast<std::size_t>(count), args);
  if (count > 1) {
    nodes->dir_ = (std::filesystem::temp_directory_path() /
                   ("lmcache_soak_fleet_" + std::to_string(::getpid())))
                      .string();
    std::filesystem::create_directories(nodes->dir_);
    LMC_ASSIGN_OR_RETURN(const std::string key_file, WriteFleetKey(nodes->dir_));
    std::vector<int> ports;
    for (int n = 0; n < count; ++n) {
      LMC_ASSIGN_OR_RETURN(const int port, FreeTcpPort());
      ports.push_back(port);
    }
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
