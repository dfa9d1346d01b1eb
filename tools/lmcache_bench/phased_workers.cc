#include "phased_workers.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

namespace lmcache::bench {
namespace {

// Messages on the pipes: one byte of kind, then (for errors) a length-prefixed text.
constexpr char kGo = 'g';
constexpr char kQuit = 'q';
constexpr char kOk = 'o';
constexpr char kFailed = 'f';

bool WriteAll(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, std::size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

void Report(int fd, const Status& status) {
  if (status.ok()) {
    WriteAll(fd, &kOk, 1);
    return;
  }
  const std::string text = status.ToString();
  const auto length = static_cast<std::uint32_t>(text.size());
  WriteAll(fd, &kFailed, 1);
  WriteAll(fd, &length, sizeof(length));
  WriteAll(fd, text.data(), text.size());
}

[[noreturn]] void ChildMain(int worker, int from_parent, int to_parent, const WorkerFn& setup,
                            const std::vector<WorkerFn>& phases) {
  Report(to_parent, setup(worker));
  char command = 0;
  while (ReadAll(from_parent, &command, 1) && command == kGo) {
    std::uint32_t index = 0;
    if (!ReadAll(from_parent, &index, sizeof(index))) break;
    Report(to_parent,
           index < phases.size() ? phases[index](worker) : InvalidArgument("no such phase"));
  }
  _exit(0);  // no destructors of the parent's objects in the child
}

}  // namespace

Result<std::unique_ptr<PhasedWorkers>> PhasedWorkers::Start(int workers, WorkerFn setup,
                                                            std::vector<WorkerFn> phases) {
  std::unique_ptr<PhasedWorkers> pool(new PhasedWorkers());
  for (int w = 0; w < workers; ++w) {
    int down[2];
    int up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
      return Status(ErrorCode::kIoError, std::string("pipe: ") + std::strerror(errno));
    }
    const pid_t pid = fork();
    if (pid < 0) return Status(ErrorCode::kIoError, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      ChildMain(w, down[0], up[1], setup, phases);
    }
    ::close(down[0]);
    ::close(up[1]);
    pool->children_.push_back({pid, down[1], up[0]});
  }
  LMC_RETURN_IF_ERROR(pool->Collect("setup"));
  return pool;
}

PhasedWorkers::~PhasedWorkers() {
  for (Child& child : children_) {
    WriteAll(child.to_child, &kQuit, 1);
    ::close(child.to_child);
    ::close(child.from_child);
  }
  for (Child& child : children_) {
    int status = 0;
    // Give each worker a moment to exit cleanly, then make sure it is gone.
    for (int i = 0; i < 200 && waitpid(child.pid, &status, WNOHANG) == 0; ++i) usleep(10'000);
    if (waitpid(child.pid, &status, WNOHANG) == 0) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, &status, 0);
    }
  }
}

Status PhasedWorkers::Collect(const char* what) {
  Status first_error;
  for (std::size_t w = 0; w < children_.size(); ++w) {
    char kind = 0;
    if (!ReadAll(children_[w].from_child, &kind, 1)) {
      if (first_error.ok()) {
        first_error = Internal(std::string(what) + ": worker " + std::to_string(w) + " died");
      }
      continue;
    }
    if (kind == kOk) continue;
    std::uint32_t length = 0;
    std::string text;
    if (ReadAll(children_[w].from_child, &length, sizeof(length))) {
      text.resize(length);
      ReadAll(children_[w].from_child, text.data(), length);
    }
    if (first_error.ok()) {
      first_error = Internal(std::string(what) + ": worker " + std::to_string(w) + ": " + text);
    }
  }
  return first_error;
}

std::vector<int> PhasedWorkers::pids() const {
  std::vector<int> pids;
  for (const Child& child : children_) pids.push_back(child.pid);
  return pids;
}

Result<double> PhasedWorkers::RunPhase(std::size_t index) {
  const auto phase = static_cast<std::uint32_t>(index);
  const auto start = std::chrono::steady_clock::now();
  for (Child& child : children_) {
    if (!WriteAll(child.to_child, &kGo, 1) || !WriteAll(child.to_child, &phase, sizeof(phase))) {
      return Internal("a worker is gone");
    }
  }
  LMC_RETURN_IF_ERROR(Collect("phase"));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace lmcache::bench
