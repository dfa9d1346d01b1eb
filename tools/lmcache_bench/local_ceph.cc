#include "local_ceph.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace lmcache::bench {

Result<std::unique_ptr<LocalCeph>> LocalCeph::Start(const std::string& script,
                                                    const std::string& bucket,
                                                    std::uint64_t memstore_bytes) {
  for (const char* daemon : {"/usr/bin/ceph-mon", "/usr/bin/ceph-osd", "/usr/bin/radosgw"}) {
    if (::access(daemon, X_OK) != 0) {
      return Status(ErrorCode::kNotFound, std::string(daemon) +
                                              " is not installed (Debian's ceph-mon, ceph-osd, "
                                              "radosgw)");
    }
  }
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("lmcache_bench_ceph_" + std::to_string(::getpid())))
                              .string();
  std::unique_ptr<LocalCeph> ceph(new LocalCeph(script, dir));
  const std::string command = "CEPH_S3_MEMSTORE_BYTES=" + std::to_string(memstore_bytes) + " " +
                              script + " start " + dir + " --bucket " + bucket + " --watch " +
                              std::to_string(::getpid()) + " 2>" + dir + ".log";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(dir + ".log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    return Status(ErrorCode::kUnavailable, "tools/ceph_s3.sh start failed: " + text);
  }
  std::ifstream env(dir + "/s3.env");
  std::string line;
  while (std::getline(env, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) ceph->env_[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (ceph->env("S3_ENDPOINT").empty()) {
    return Status(ErrorCode::kUnavailable, "tools/ceph_s3.sh wrote no S3_ENDPOINT");
  }
  return ceph;
}

LocalCeph::~LocalCeph() {
  const std::string command = script_ + " stop " + dir_ + " 2>/dev/null";
  (void)std::system(command.c_str());
  std::filesystem::remove(dir_ + ".log");
}

std::string LocalCeph::env(const std::string& name) const {
  const auto it = env_.find(name);
  return it == env_.end() ? std::string() : it->second;
}

}  // namespace lmcache::bench
