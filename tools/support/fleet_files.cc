#include "support/fleet_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "fakes/free_port.h"

namespace lmcache::tools {

Result<std::vector<int>> FreeLoopbackTcpPorts(int count) {
  std::vector<int> ports = testing::FreeTcpPorts(count);
  for (const int port : ports) {
    if (port == 0) return Status(ErrorCode::kIoError, "no free TCP port on 127.0.0.1");
  }
  return ports;
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
