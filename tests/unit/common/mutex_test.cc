// Mutex, CondVar and NoWaitScope: a request handler's scope may not wait on
// a condition (docs/threading.md, "No pool thread waits").
#include "common/mutex.h"

#include <gtest/gtest.h>

#include <chrono>

namespace lmcache {
namespace {

TEST(NoWaitScopeTest, MarksItsThreadForItsScopeAndNests) {
  EXPECT_FALSE(NoWaitScope::active());
  {
    const NoWaitScope outer;
    EXPECT_TRUE(NoWaitScope::active());
    {
      const NoWaitScope inner;
      EXPECT_TRUE(NoWaitScope::active());
    }
    EXPECT_TRUE(NoWaitScope::active()) << "the inner scope's end must not clear the outer one";
  }
  EXPECT_FALSE(NoWaitScope::active());
}

TEST(NoWaitScopeTest, AWaitOutsideAScopeIsAllowed) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  cv.WaitFor(&lock, std::chrono::milliseconds(1));
}

#ifndef NDEBUG
TEST(NoWaitScopeDeathTest, AConditionWaitInsideAHandlersScopeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Mutex mu;
        CondVar cv;
        const NoWaitScope handler;
        MutexLock lock(&mu);
        cv.WaitFor(&lock, std::chrono::milliseconds(1));
      },
      "NoWaitScope::active");
}
#endif

}  // namespace
}  // namespace lmcache
