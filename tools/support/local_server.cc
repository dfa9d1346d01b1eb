#include "support/local_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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

// Lines of the log quoted in a failed start.
constexpr int kQuotedLogLines = 20;

std::vector<std::string> LogLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

// A request that times out while the server is busy starting is asked again:
// only the overall bound fails the start.
Status WaitPrefaulted(client::Client& client, const std::function<std::string(const std::string&)>& which) {
  const auto deadline = std::chrono::steady_clock::now() + kStartupBound;
  Status last = Status::Ok();
  while (std::chrono::steady_clock::now() < deadline) {
    auto stats = ServerStats::Fetch(client);
    if (stats.ok() && stats->Number("l1.unready_bytes") == 0) return Status::Ok();
    if (!stats.ok()) last = stats.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status(ErrorCode::kTimeout,
                which("the pool was not pre-faulted within " +
                      std::to_string(kStartupBound.count()) + " s" +
                      (last.ok() ? "" : " (last stats request: " + last.ToString() + ")")));
}

}  // namespace

std::string LocalServer::Describe(const std::string& what) const {
  std::string text = description_ + ": " + what;
  const std::vector<std::string> lines = LogLines(log_path_);
  if (lines.empty()) return text + " (its log " + log_path_ + " is empty)";
  log_quoted_ = true;
  text += "; the last lines of its log (" + log_path_ + "):";
  const std::size_t first = lines.size() > kQuotedLogLines ? lines.size() - kQuotedLogLines : 0;
  for (std::size_t i = first; i < lines.size(); ++i) text += "\n  " + lines[i];
  return text;
}

Result<std::unique_ptr<LocalServer>> LocalServer::Start(const std::string& binary,
                                                        const std::string& name,
                                                        const std::vector<std::string>& args) {
  std::unique_ptr<LocalServer> server(new LocalServer());
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  server->name_ = name;
  server->url_ = "ipc://" + base.string() + ".sock";
  server->log_path_ = base.string() + ".log";
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
  const int log_fd = ::open(server->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    return Status(ErrorCode::kIoError, "cannot create " + server->log_path_ + ": " + std::strerror(errno));
  }
  server->pid_ = fork();
  if (server->pid_ < 0) {
    ::close(log_fd);
    return Status(ErrorCode::kIoError, "fork failed");
  }
  if (server->pid_ == 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  ::close(log_fd);
  server->description_ =
      name + " (" + binary + ", pid " + std::to_string(server->pid_) + ", " + server->url_ + ")";
  const auto which = [&server](const std::string& what) { return server->Describe(what); };
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
      return Status(ErrorCode::kUnavailable, which("exited during startup"));
    }
  }
  return Status(ErrorCode::kTimeout, which("did not answer a ping within " +
                                           std::to_string(kStartupBound.count()) + " s"));
}

void LocalServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

LocalServer::~LocalServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  if (log_quoted_) return;  // a failed start's error holds it, and names the file
  // What the server logged (warnings and errors at the tools' log levels)
  // reaches the tool's stderr, marked with the server it came from.
  for (const std::string& line : LogLines(log_path_)) {
    std::fprintf(stderr, "[%s] %s\n", name_.c_str(), line.c_str());
  }
  std::error_code ignored;
  std::filesystem::remove(log_path_, ignored);
}

}  // namespace lmcache::tools
