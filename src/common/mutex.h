// Annotated mutex, scoped lock and condition variable.
//
// Thin wrappers over std::mutex / std::condition_variable that carry clang
// capability annotations, so lock requirements are checked at compile time.
// A Mutex also counts the threads waiting for it right now (`waiters()`),
// which costs one failed try_lock only when the lock is contended: tests use
// it to park a request at a known point, and stats can report contention.
// Thread-safety: Mutex and CondVar are internally synchronised, as their std
// counterparts; a MutexLock belongs to the thread that created it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/check.h"
#include "common/thread_annotations.h"

namespace lmcache {

class LMC_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() LMC_ACQUIRE() { LockStd(); }
  void Unlock() LMC_RELEASE() { UnlockStd(); }
  // Tells the thread-safety analysis that the caller holds this mutex (taken
  // through a path it cannot follow, such as a set of shard locks); builds
  // without NDEBUG also check that the calling thread is the holder.
  void AssertHeld() const LMC_ASSERT_CAPABILITY(this) {
#ifndef NDEBUG
    LMC_CHECK(holder_.load(std::memory_order_relaxed) == std::this_thread::get_id());
#endif
  }
  // Threads blocked in Lock() at this moment.
  std::uint32_t waiters() const { return waiters_.load(std::memory_order_acquire); }

 private:
  friend class CondVar;
  friend class MutexLock;
  void LockStd() {
    if (!mu_.try_lock()) {
      waiters_.fetch_add(1, std::memory_order_acq_rel);
      mu_.lock();
      waiters_.fetch_sub(1, std::memory_order_acq_rel);
    }
    MarkHeld();
  }
  void UnlockStd() {
    MarkReleased();
    mu_.unlock();
  }
#ifndef NDEBUG
  void MarkHeld() { holder_.store(std::this_thread::get_id(), std::memory_order_relaxed); }
  void MarkReleased() { holder_.store(std::thread::id(), std::memory_order_relaxed); }
  std::atomic<std::thread::id> holder_{};
#else
  void MarkHeld() {}
  void MarkReleased() {}
#endif
  std::mutex mu_;
  std::atomic<std::uint32_t> waiters_{0};
};

// RAII holder of a Mutex for one scope.
class LMC_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) LMC_ACQUIRE(mu) : mu_(mu) {
    mu->LockStd();
    lock_ = std::unique_lock<std::mutex>(mu->mu_, std::adopt_lock);
  }
  ~MutexLock() LMC_RELEASE() {
    mu_->MarkReleased();
    // lock_ unlocks the std::mutex.
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  friend class CondVar;
  Mutex* mu_;
  std::unique_lock<std::mutex> lock_;
};

// Marks a scope whose thread must not wait on a condition: a request
// handler's (Service::Handle; docs/threading.md, "No pool thread waits"). A
// request that must wait parks instead. A CondVar wait inside the scope is a
// bug, and builds with assertions (the sanitizer builds, which run every
// test) abort on it at the wait. Nests; belongs to the thread that made it.
class NoWaitScope {
 public:
  NoWaitScope() : outer_(active_) { active_ = true; }
  ~NoWaitScope() { active_ = outer_; }
  NoWaitScope(const NoWaitScope&) = delete;
  NoWaitScope& operator=(const NoWaitScope&) = delete;
  static bool active() { return active_; }

 private:
  static inline thread_local bool active_ = false;
  const bool outer_;
};

class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }
  // Waits until notified or `timeout` passed; the caller re-checks its predicate.
  template <typename Rep, typename Period>
  void WaitFor(MutexLock* lock, std::chrono::duration<Rep, Period> timeout) {
    LMC_DCHECK(!NoWaitScope::active());  // a request handler must park, not wait
    lock->mu_->MarkReleased();
    cv_.wait_for(lock->lock_, timeout);
    lock->mu_->MarkHeld();
  }
  void Wait(MutexLock* lock) {
    LMC_DCHECK(!NoWaitScope::active());  // a request handler must park, not wait
    lock->mu_->MarkReleased();
    cv_.wait(lock->lock_);
    lock->mu_->MarkHeld();
  }

 private:
  std::condition_variable cv_;
};

}  // namespace lmcache
