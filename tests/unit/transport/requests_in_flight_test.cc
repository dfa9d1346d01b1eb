// RequestsInFlight: a connection's close is reported once its last request
// in flight is answered, at once when none is, and again after a request
// read after the close (it was still queued) is answered.
#include "transport/requests_in_flight.h"

#include <gtest/gtest.h>

namespace lmcache::transport {
namespace {

TEST(RequestsInFlight, ACloseWithNothingInFlightIsReportedAtOnce) {
  RequestsInFlight requests;
  EXPECT_TRUE(requests.Closed("a"));
  requests.Started("b", false);
  EXPECT_FALSE(requests.Answered("b"));  // b never closed
  EXPECT_TRUE(requests.Closed("b"));
  EXPECT_EQ(requests.connections(), 0u);
}

TEST(RequestsInFlight, ACloseWaitsForTheLastAnswer) {
  RequestsInFlight requests;
  requests.Started("a", false);
  requests.Started("a", false);
  requests.Started("b", false);
  EXPECT_FALSE(requests.Closed("a"));
  EXPECT_EQ(requests.closing(), 1u);
  EXPECT_FALSE(requests.Closed("a"));  // a second report of the same close changes nothing
  EXPECT_FALSE(requests.Answered("a"));
  EXPECT_FALSE(requests.Answered("b"));  // another connection's answers do not count
  EXPECT_TRUE(requests.Answered("a"));   // a's last one: now it is gone
  EXPECT_EQ(requests.closing(), 0u);
  EXPECT_EQ(requests.connections(), 0u);
  EXPECT_FALSE(requests.Answered("a"));  // nothing counted any more
}

TEST(RequestsInFlight, ARequestReadAfterTheCloseReportsItAgainWhenAnswered) {
  RequestsInFlight requests;
  EXPECT_TRUE(requests.Closed("a"));  // released once
  requests.Started("a", /*late=*/true);
  requests.Started("a", /*late=*/true);
  EXPECT_EQ(requests.closing(), 1u);
  EXPECT_FALSE(requests.Answered("a"));
  EXPECT_TRUE(requests.Answered("a"));  // released again: what the late ones made goes too
}

TEST(RequestsInFlight, ANewConnectionAfterTheReportIsCountedAfresh) {
  RequestsInFlight requests;
  requests.Started("a", false);
  EXPECT_FALSE(requests.Closed("a"));
  EXPECT_TRUE(requests.Answered("a"));
  requests.Started("a", false);  // a reconnect with the same routing id (ROUTER_HANDOVER)
  EXPECT_FALSE(requests.Answered("a"));
}

}  // namespace
}  // namespace lmcache::transport
