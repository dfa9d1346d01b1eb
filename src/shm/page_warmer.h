// PageWarmer: maps an attached pool's pages into this process's page tables
// on a background thread, so a client's copies into the pool pay no page
// fault.
//
// A process that maps a shared segment pays one fault per 4 KiB page at its
// first touch of that page through its own mapping, whatever the server did,
// and a first copy runs many times slower than later ones (figures in
// docs/performance.md); MADV_POPULATE is no substitute on hypervisors with
// shadow page tables, only a real access is. The warmer reads one
// byte of each page, in address order, of the prefix the server has written
// (ShmSegment::WrittenEnd) and follows that prefix as the server's background
// pre-faulting extends it. Reads change nothing, so it runs while the process
// copies; they allocate nothing, so a full /dev/shm cannot SIGBUS it.
// Thread-safety: the constructor starts the thread and the destructor stops
// and joins it; warmed_bytes() and WaitDone() may be called from any thread.
// The segment must outlive the warmer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "shm/shm_segment.h"

namespace lmcache::shm {

class PageWarmer {
 public:
  // `give_up_after`: stop following a prefix that has not grown for this long
  // (a server whose /dev/shm ran out never finishes its pool).
  explicit PageWarmer(const ShmSegment* segment,
                      std::chrono::milliseconds give_up_after = std::chrono::minutes(10));
  ~PageWarmer();
  PageWarmer(const PageWarmer&) = delete;
  PageWarmer& operator=(const PageWarmer&) = delete;

  std::uint64_t warmed_bytes() const { return warmed_.load(std::memory_order_acquire); }
  // True once every page of the segment is mapped here, waiting up to `timeout`.
  bool WaitDone(std::chrono::milliseconds timeout);

 private:
  void Run(std::chrono::milliseconds give_up_after);
  bool Stopped();
  // Sleeps up to `period` unless stopped; false when stopped.
  bool Pause(std::chrono::milliseconds period);

  const ShmSegment* segment_;
  std::atomic<std::uint64_t> warmed_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;      // guarded by mutex_
  bool finished_ = false;  // guarded by mutex_: the thread has returned
  std::thread thread_;
};

}  // namespace lmcache::shm
