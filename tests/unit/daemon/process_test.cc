#include "daemon/process.h"

#include <signal.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <chrono>

namespace lmcache::daemon {
namespace {

using std::chrono::milliseconds;

TEST(Process, TheHandledSignalsAreBlockedAndTakenOneAtATime) {
  const sigset_t signals = BlockHandledSignals();
  sigset_t blocked;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &blocked), 0);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) EXPECT_TRUE(sigismember(&blocked, s)) << s;

  EXPECT_EQ(NextSignal(signals, milliseconds(10)), 0) << "nothing pending";
  ASSERT_EQ(raise(SIGTERM), 0);  // blocked: pending, not delivered
  ASSERT_EQ(raise(SIGUSR1), 0);
  // Pending standard signals are taken lowest number first: SIGUSR1 (10), SIGTERM (15).
  EXPECT_EQ(WaitForShutdown(signals), SIGUSR1);
  EXPECT_EQ(NextSignal(signals, milliseconds(10)), SIGTERM);
  EXPECT_EQ(NextSignal(signals, milliseconds(10)), 0);
}

TEST(Process, SighupIsHandledThereAndNeverEndsTheWait) {
  const sigset_t signals = BlockHandledSignals();
  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_EQ(NextSignal(signals, milliseconds(10)), 0) << "SIGHUP reopens the log, returns 0";
  ASSERT_EQ(raise(SIGHUP), 0);
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(WaitForShutdown(signals), SIGINT) << "past the SIGHUP (1), the SIGINT (2)";
}

TEST(Process, WaitingForTerminationTakesSigusr1AndEndsAtSigterm) {
  const sigset_t signals = BlockHandledSignals();
  ASSERT_EQ(raise(SIGUSR1), 0);
  ASSERT_EQ(raise(SIGTERM), 0);
  WaitForTermination(signals);  // returns: past the SIGUSR1 (10), the SIGTERM (15)
  EXPECT_EQ(NextSignal(signals, milliseconds(10)), 0) << "both were taken";
}

TEST(Process, TheDescriptorSoftLimitIsRaisedToTheHardOne) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max > 512) {
    rlimit lowered = limit;
    lowered.rlim_cur = 512;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  }
  RaiseDescriptorLimit();
  rlimit after{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, limit.rlim_max);
}

}  // namespace
}  // namespace lmcache::daemon
