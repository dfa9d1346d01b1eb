#include "support/local_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "lmcache/client.h"
#include "support/server_stats.h"

namespace lmcache::tools {

std::string FindServerBinary(const std::string& given) {
  if (!given.empty()) return given;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (const auto& candidate : {self / "lmcache-server", self / ".." / "src" / "lmcache-server"}) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "lmcache-server";
}

namespace {

// Generous: a busy 2-core machine pre-faults a few GiB in tens of seconds.
constexpr auto kStartupBound = std::chrono::seconds(120);

// A request that times out while the server is busy starting is asked again:
// only the overall bound fails the start.
Status WaitPrefaulted(client::Client& client, const std::string& which) {
  const auto deadline = std::chrono::steady_clock::now() + kStartupBound;
  Status last = Status::Ok();
  while (std::chrono::steady_clock::now() < deadline) {
    auto stats = ServerStats::Fetch(client);
    if (stats.ok() && stats->Number("l1.unready_bytes") == 0) return Status::Ok();
    if (!stats.ok()) last = stats.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status(ErrorCode::kTimeout, which + ": the pool was not pre-faulted within " +
                                         std::to_string(kStartupBound.count()) + " s" +
                                         (last.ok() ? "" : " (last stats request: " +
                                                               last.ToString() + ")"));
}

}  // namespace

Result<std::unique_ptr<LocalServer>> LocalServer::Start(const std::string& binary,
                                                        const std::string& name,
                                                        const std::vector<std::string>& args) {
  std::unique_ptr<LocalServer> server(new LocalServer());
  server->url_ = "ipc://" + (std::filesystem::temp_directory_path() /
                             (name + "_" + std::to_string(getpid()) + ".sock"))
                                .string();
  std::vector<std::string> argv_storage{binary, "--url", server->url_};
  // No HTTP endpoint unless asked for: several servers may run side by side.
  if (std::find(args.begin(), args.end(), "--http-port") == args.end()) {
    argv_storage.insert(argv_storage.end(), {"--http-port", "0"});
  }
  // SIGTERM exits at once unless the caller tests the drain.
  if (std::find(args.begin(), args.end(), "--drain-timeout-seconds") == args.end()) {
    argv_storage.insert(argv_storage.end(), {"--drain-timeout-seconds", "0"});
  }
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  server->pid_ = fork();
  if (server->pid_ < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (server->pid_ == 0) {
    execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s\n", binary.c_str());
    _exit(127);
  }
  const std::string which = name + " (" + binary + ", pid " + std::to_string(server->pid_) +
                            ", " + server->url_ + "; its log is on stderr above)";
  client::ClientOptions options;
  options.url = server->url_;
  options.request_timeout = std::chrono::milliseconds(500);  // per ping; retried below
  LMC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  const auto deadline = std::chrono::steady_clock::now() + kStartupBound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (client->Ping().ok()) {
      // A benchmark measures the steady state: stores made while the pool is
      // still being pre-faulted in the background wait for its pages.
      LMC_RETURN_IF_ERROR(WaitPrefaulted(*client, which));
      return server;
    }
    int status = 0;
    if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->pid_ = -1;
      return Status(ErrorCode::kUnavailable, which + " exited during startup");
    }
  }
  return Status(ErrorCode::kTimeout, which + " did not answer a ping within " +
                                         std::to_string(kStartupBound.count()) + " s");
}

LocalServer::~LocalServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
}

}  // namespace lmcache::tools
