// WaitUntil: polls a condition another thread makes true, for tests that
// assert the state afterwards. The bound only guards against a hang, so it
// is generous (60 s by default): a sanitizer build beside CPU-bound
// neighbours is slow, and a bound that is the assertion itself belongs in
// the test, measured against a baseline of the same run.
//
// Thread-safety: the predicate is called on the caller's thread only.
#pragma once

#include <chrono>
#include <thread>

namespace lmcache::testing {

// True once `done()` holds; false if `bound` passed first.
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::seconds bound = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace lmcache::testing
