// CephGateway: a real single-node Ceph cluster with its S3 gateway (radosgw)
// on loopback, for a test, started and stopped by tools/ceph_s3.sh (which
// the benchmark uses too). Available() says whether Ceph is installed, so a
// test skips with a clear message where it is not (CI installs it: a skip
// there fails the run). The gateway alone can be killed and restarted, or
// frozen (SIGSTOP) and thawed, for the fault tests; the objects live in the
// OSD, which keeps running.
// Thread-safety: one test thread.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace lmcache::testing {

class CephGateway {
 public:
  static bool Available() {
    return ::access("/usr/bin/radosgw", X_OK) == 0 && ::access("/usr/bin/ceph-mon", X_OK) == 0 &&
           ::access("/usr/bin/ceph-osd", X_OK) == 0;
  }

  CephGateway(std::string script, const std::vector<std::string>& buckets)
      : script_(std::move(script)) {
    dir_ = (std::filesystem::temp_directory_path() / ("lmcache_ceph_" + std::to_string(::getpid())))
               .string();
    // --watch: the cluster goes with this process, even one killed by a timeout.
    std::string command = script_ + " start " + dir_ + " --watch " + std::to_string(::getpid());
    for (const auto& b : buckets) command += " --bucket " + b;
    std::string out;
    if (Run(command + " 2>" + dir_ + ".log", &out) != 0) {
      error_ = "tools/ceph_s3.sh start failed: " + Tail(dir_ + ".log");
      return;
    }
    std::ifstream env(dir_ + "/s3.env");
    std::string line;
    while (std::getline(env, line)) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) env_[line.substr(0, eq)] = Unquote(line.substr(eq + 1));
    }
    if (env_["S3_ENDPOINT"].empty()) error_ = "tools/ceph_s3.sh wrote no S3_ENDPOINT";
  }
  ~CephGateway() {
    std::string out;
    Run(script_ + " stop " + dir_ + " 2>/dev/null", &out);
    std::filesystem::remove(dir_ + ".log");
  }
  CephGateway(const CephGateway&) = delete;
  CephGateway& operator=(const CephGateway&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // S3_ENDPOINT, S3_HOST_PORT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION.
  std::string env(const std::string& name) const {
    const auto it = env_.find(name);
    return it == env_.end() ? std::string() : it->second;
  }

  bool StopGateway() { return Command("stop-gateway"); }
  bool StartGateway() { return Command("start-gateway"); }
  bool PauseGateway() { return Command("pause-gateway"); }
  bool ResumeGateway() { return Command("resume-gateway"); }

 private:
  bool Command(const std::string& what) {
    std::string out;
    return Run(script_ + " " + what + " " + dir_ + " 2>>" + dir_ + ".log", &out) == 0;
  }
  static int Run(const std::string& command, std::string* out) {
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return -1;
    std::array<char, 4096> buffer;
    while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) *out += buffer.data();
    return ::pclose(pipe);
  }
  static std::string Tail(const std::string& path) {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }
  static std::string Unquote(std::string value) {
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      return value.substr(1, value.size() - 2);
    }
    return value;
  }

  std::string script_;
  std::string dir_;
  std::string error_;
  std::map<std::string, std::string> env_;
};

}  // namespace lmcache::testing
