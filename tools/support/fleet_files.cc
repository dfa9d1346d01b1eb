#include "support/fleet_files.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace lmcache::tools {

Result<int> FreeLoopbackTcpPort() {
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

Result<std::string> WriteFleetKeyFile(const std::filesystem::path& dir) {
  const std::string path = (dir / "fleet.key").string();
  std::ifstream random("/dev/urandom", std::ios::binary);
  char key[32];
  if (!random.read(key, sizeof(key))) return Status(ErrorCode::kIoError, "cannot read /dev/urandom");
  std::ofstream file(path, std::ios::binary);
  if (!file.write(key, sizeof(key))) return Status(ErrorCode::kIoError, "cannot write " + path);
  file.close();
  if (::chmod(path.c_str(), 0600) != 0) return Status(ErrorCode::kIoError, "cannot chmod " + path);
  return path;
}

ScopedDirectory::ScopedDirectory(std::filesystem::path path) : path_(std::move(path)) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScopedDirectory::~ScopedDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace lmcache::tools
