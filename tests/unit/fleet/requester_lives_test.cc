// RequesterLives: connections that said hello are known by their life, so a
// requester's connections share its tasks; an earlier life of a URL ends
// once a newer one said hello and none of its connections is open, and not
// before; a boot id claimed at a second URL is not believed; memory stays
// within its bound, forgetting closed lives first.
#include "fleet/requester_lives.h"

#include <gtest/gtest.h>

namespace lmcache::fleet {
namespace {

using Names = std::vector<std::string>;

TEST(RequesterLivesTest, AConnectionThatSaidHelloIsKnownByItsLife) {
  RequesterLives lives;
  EXPECT_EQ(lives.PeerOf("c1"), "c1");
  EXPECT_TRUE(lives.Hello("c1", {"u", "b1"}).empty());
  EXPECT_TRUE(lives.Hello("c1", {"u", "b1"}).empty());  // each probe says it again
  EXPECT_TRUE(lives.Hello("c2", {"u", "b1"}).empty());
  EXPECT_EQ(lives.PeerOf("c1"), "life:b1");
  EXPECT_EQ(lives.PeerOf("c2"), "life:b1");
  EXPECT_TRUE(lives.Closed("c1").empty());
  EXPECT_EQ(lives.PeerOf("c1"), "c1");
  EXPECT_EQ(lives.PeerOf("c2"), "life:b1");
  EXPECT_TRUE(lives.Closed("c2").empty());  // not superseded: it may come back
  EXPECT_EQ(lives.lives(), 1u);
}

TEST(RequesterLivesTest, AnEarlierLifeEndsOnceSupersededAndClosed) {
  RequesterLives lives;
  lives.Hello("old-1", {"u", "b1"});
  lives.Hello("old-2", {"u", "b1"});
  lives.Hello("elsewhere", {"v", "b7"});
  EXPECT_TRUE(lives.Hello("new", {"u", "b2"}).empty());  // b1's connections are open
  EXPECT_TRUE(lives.Closed("old-1").empty());
  EXPECT_EQ(lives.Closed("old-2"), Names{"life:b1"});
  EXPECT_TRUE(lives.Closed("old-2").empty());  // once
  // Closed before the newer life speaks: ended at its hello.
  EXPECT_TRUE(lives.Closed("new").empty());
  EXPECT_EQ(lives.Hello("newer", {"u", "b3"}), Names{"life:b2"});
  EXPECT_EQ(lives.PeerOf("elsewhere"), "life:b7");  // another URL's life is untouched
  EXPECT_EQ(lives.lives(), 2u);
}

TEST(RequesterLivesTest, ABootIdClaimedAtASecondUrlIsNotBelieved) {
  RequesterLives lives;
  lives.Hello("c1", {"u", "b1"});
  lives.Closed("c1");
  lives.Hello("other", {"v", "b2"});
  EXPECT_TRUE(lives.Hello("liar", {"v", "b1"}).empty());
  EXPECT_EQ(lives.PeerOf("liar"), "liar");
  // b1 was not superseded by the claim: its own URL's next life still ends it.
  EXPECT_EQ(lives.Hello("c2", {"u", "b3"}), Names{"life:b1"});
}

TEST(RequesterLivesTest, ItRemembersAtMostItsBoundForgettingClosedLivesFirst) {
  RequesterLives lives(2);
  lives.Hello("c1", {"u1", "b1"});
  lives.Hello("c2", {"u2", "b2"});
  EXPECT_TRUE(lives.Hello("c3", {"u3", "b3"}).empty());
  EXPECT_EQ(lives.PeerOf("c3"), "c3");  // no room: both lives have a connection open
  lives.Closed("c1");
  lives.Hello("c3", {"u3", "b3"});
  EXPECT_EQ(lives.PeerOf("c3"), "life:b3");
  EXPECT_EQ(lives.lives(), 2u);
  // b1 was forgotten: a hello of it names it again, and finds its tasks by name.
  lives.Closed("c2");
  lives.Hello("c4", {"u1", "b1"});
  EXPECT_EQ(lives.PeerOf("c4"), "life:b1");
}

}  // namespace
}  // namespace lmcache::fleet
