// SendWholeMessage: sends one ZMQ message, frame by frame, without blocking,
// and says whether all of it went.
//
// libzmq delivers a multipart message whole or not at all, yet a frame after
// the first can still be refused: when the pipe towards the peer ends
// between two frames (its connection closed or failed its handshake while
// the message was being sent; the socket's thread learns of it inside the
// next send), libzmq takes back the frames already queued and answers EAGAIN
// (lb_t::sendpipe). cppzmq's send_multipart asserts that this cannot happen,
// which aborted a server built with assertions on (the sanitizer builds: a
// server meeting 100 unreachable peers under TSan, python_p2p_etcd_test);
// here it is an outcome of its own, and the caller counts the call unsent.
//
// Thread-safety: as the socket's (one thread at a time).
#pragma once

#include <cstddef>
#include <iterator>

#include <zmq.hpp>

namespace lmcache::fleet {

enum class SendOutcome {
  kSent,
  kQueueFull,          // the first frame was refused: nothing was queued
  kDroppedMidMessage,  // a later frame was refused: libzmq dropped the message
};

// Socket: anything with zmq::socket_t's send(zmq::const_buffer,
// zmq::send_flags) -> zmq::send_result_t (errors other than EAGAIN throw
// zmq::error_t, as there). Frames: a range of zmq::const_buffer.
template <typename Socket, typename Frames>
SendOutcome SendWholeMessage(Socket& socket, const Frames& frames) {
  const auto end = std::end(frames);
  for (auto it = std::begin(frames); it != end; ++it) {
    const bool last = std::next(it) == end;
    const zmq::send_flags flags =
        zmq::send_flags::dontwait | (last ? zmq::send_flags::none : zmq::send_flags::sndmore);
    if (!socket.send(*it, flags)) {
      return it == std::begin(frames) ? SendOutcome::kQueueFull : SendOutcome::kDroppedMidMessage;
    }
  }
  return SendOutcome::kSent;
}

}  // namespace lmcache::fleet
