#include "shm/page_warmer.h"

#include <algorithm>

namespace lmcache::shm {
namespace {

// Touched between two looks at the stop flag.
constexpr std::uint64_t kSliceBytes = 64ull << 20;
// How often an unfinished prefix is looked at again.
constexpr std::chrono::milliseconds kPollPeriod{20};

}  // namespace

PageWarmer::PageWarmer(const ShmSegment* segment, std::chrono::milliseconds give_up_after)
    : segment_(segment), thread_([this, give_up_after] { Run(give_up_after); }) {}

PageWarmer::~PageWarmer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool PageWarmer::WaitDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [this] { return finished_; });
  return warmed_bytes() == segment_->size();
}

bool PageWarmer::Pause(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !changed_.wait_for(lock, period, [this] { return stop_; });
}

bool PageWarmer::Stopped() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

void PageWarmer::Run(std::chrono::milliseconds give_up_after) {
  const std::uint64_t size = segment_->size();
  std::uint64_t position = 0;
  auto last_progress = std::chrono::steady_clock::now();
  while (position < size && !Stopped()) {
    // One look at the file per written run: finding its end walks its pages.
    const std::uint64_t end = segment_->WrittenEnd(position);
    if (end > position) {
      while (position < end && !Stopped()) {
        const std::uint64_t slice = std::min(kSliceBytes, end - position);
        segment_->ReadTouch(position, slice);
        position += slice;
        warmed_.store(position, std::memory_order_release);
      }
      last_progress = std::chrono::steady_clock::now();
      continue;
    }
    // The server's pre-faulting is behind us: look again shortly.
    if (std::chrono::steady_clock::now() - last_progress >= give_up_after) break;
    if (!Pause(kPollPeriod)) break;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  changed_.notify_all();
}

}  // namespace lmcache::shm
