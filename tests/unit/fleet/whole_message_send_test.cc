// SendWholeMessage: frames, flags and the three outcomes, against a fake
// socket that refuses a chosen frame (what libzmq does when the peer's pipe
// ends between two frames) and against a real one whose queue is full.
#include "fleet/whole_message_send.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace lmcache::fleet {
namespace {

struct SentFrame {
  std::string bytes;
  zmq::send_flags flags;
};

// Refuses (EAGAIN: an empty result) the frame at refuse_at, counting from 0.
struct FakeSocket {
  std::optional<std::size_t> refuse_at;
  std::vector<SentFrame> sent;
  std::size_t calls = 0;

  zmq::send_result_t send(zmq::const_buffer frame, zmq::send_flags flags) {
    if (refuse_at && calls++ == *refuse_at) return {};
    sent.push_back({std::string(static_cast<const char*>(frame.data()), frame.size()), flags});
    return frame.size();
  }
};

std::vector<zmq::const_buffer> Frames(const std::vector<std::string>& parts) {
  std::vector<zmq::const_buffer> frames;
  for (const std::string& p : parts) frames.push_back(zmq::buffer(p));
  return frames;
}

TEST(WholeMessageSendTest, SendsEveryFrameWithMoreOnAllButTheLastAndNeverBlocks) {
  const std::vector<std::string> parts{"uid", "op", "payload"};
  FakeSocket socket;
  EXPECT_EQ(SendWholeMessage(socket, Frames(parts)), SendOutcome::kSent);
  ASSERT_EQ(socket.sent.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(socket.sent[i].bytes, parts[i]);
    const auto more = i + 1 < 3 ? zmq::send_flags::sndmore : zmq::send_flags::none;
    EXPECT_EQ(socket.sent[i].flags, zmq::send_flags::dontwait | more) << "frame " << i;
  }
}

TEST(WholeMessageSendTest, AFirstFrameRefusedIsAFullQueue) {
  const std::vector<std::string> parts{"uid", "op"};
  FakeSocket socket;
  socket.refuse_at = 0;
  EXPECT_EQ(SendWholeMessage(socket, Frames(parts)), SendOutcome::kQueueFull);
  EXPECT_TRUE(socket.sent.empty());
}

// The case cppzmq's send_multipart asserts away: it ended the server.
TEST(WholeMessageSendTest, ALaterFrameRefusedIsAMessageDroppedNotAnAbort) {
  const std::vector<std::string> parts{"uid", "op", "payload"};
  for (std::size_t refused = 1; refused < parts.size(); ++refused) {
    FakeSocket socket;
    socket.refuse_at = refused;
    EXPECT_EQ(SendWholeMessage(socket, Frames(parts)), SendOutcome::kDroppedMidMessage)
        << "frame " << refused << " refused";
    EXPECT_EQ(socket.sent.size(), refused) << "nothing is sent after the refused frame";
  }
}

// A real DEALER with nowhere to deliver and a queue of one message: the
// second message's first frame is refused, and nothing blocks.
TEST(WholeMessageSendTest, ARealSocketWhoseQueueIsFullRefusesTheFirstFrame) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 1);
  socket.connect("tcp://127.0.0.1:1");  // nobody listens: the pipe only queues
  const std::vector<std::string> parts{"uid", "op", "payload"};
  EXPECT_EQ(SendWholeMessage(socket, Frames(parts)), SendOutcome::kSent);
  EXPECT_EQ(SendWholeMessage(socket, Frames(parts)), SendOutcome::kQueueFull);
}

}  // namespace
}  // namespace lmcache::fleet
