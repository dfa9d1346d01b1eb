#include "common/periodic_thread.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace lmcache {

PeriodicThread::PeriodicThread(std::string name, std::chrono::milliseconds period,
                               std::function<void()> task)
    : name_(std::move(name)), period_(period), task_(std::move(task)) {}

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start() {
  if (thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void PeriodicThread::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void PeriodicThread::Nudge() {
  {
    MutexLock lock(&mu_);
    nudged_ = true;
  }
  wake_.NotifyAll();
}

void PeriodicThread::Loop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      if (!stop_ && !nudged_) wake_.WaitFor(&lock, period_);
      if (stop_) return;
      nudged_ = false;
    }
    try {
      task_();
    } catch (const std::exception& e) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      spdlog::error("{}: pass failed (the loop goes on): {}", name_, e.what());
    } catch (...) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      spdlog::error("{}: pass failed with an unknown exception (the loop goes on)", name_);
    }
    runs_.fetch_add(1, std::memory_order_relaxed);
    last_run_ms_.store(SteadyClock::Instance().NowMs(), std::memory_order_relaxed);
  }
}

}  // namespace lmcache
