// TakeoverSocket and TakeoverListener: the private unix stream socket over
// which a successor server takes the pool over from its predecessor
// (handover_codec.h has the messages).
//
// A frame is [type u8][length u64 LE][payload]; one frame may carry a file
// descriptor (SCM_RIGHTS, the pool segment's). The listener's socket file is
// made mode 0600 and every peer of another user is refused (SO_PEERCRED); a socket file
// a dead server left is replaced, one a live server answers on is not.
// Every wait has a deadline: a peer that stops talking is an error, never a
// hang.
//
// Thread-safety: not synchronised; each object belongs to one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "lmcache/status.h"
#include "restart/handover_codec.h"

namespace lmcache::restart {

class TakeoverSocket {
 public:
  static constexpr std::chrono::seconds kSendTimeout{60};
  // kNotFound when nothing listens at `path` (no predecessor runs).
  static Result<TakeoverSocket> Connect(const std::string& path);
  // Sends time out after kSendTimeout (a peer that stops reading).
  explicit TakeoverSocket(UniqueFd fd);

  // Sends one frame, with `pass_fd` attached when it is >= 0.
  Status Send(FrameType type, std::string_view payload, int pass_fd = -1);
  // Receives one frame of type `expected` within `timeout`, of at most
  // `max_bytes`; a descriptor that came with it goes to *passed (closed when
  // `passed` is null). kUnavailable when the peer closed first.
  Result<std::string> Receive(FrameType expected, std::chrono::milliseconds timeout,
                              std::uint64_t max_bytes, UniqueFd* passed = nullptr);
  // Waits up to `timeout` for the peer to close its end; true when it did.
  bool WaitClosed(std::chrono::milliseconds timeout);

 private:
  Status ReadExactly(char* out, std::size_t n, std::chrono::steady_clock::time_point deadline,
                     UniqueFd* passed);
  UniqueFd fd_;
};

class TakeoverListener {
 public:
  static Result<TakeoverListener> Listen(const std::string& path);
  TakeoverListener(TakeoverListener&& other) noexcept;
  TakeoverListener& operator=(TakeoverListener&&) = delete;
  ~TakeoverListener();  // removes the socket file if it is still this listener's

  // The next peer of this user within `timeout`; kTimeout when none came.
  Result<TakeoverSocket> Accept(std::chrono::milliseconds timeout);
  const std::string& path() const { return path_; }

 private:
  TakeoverListener(std::string path, UniqueFd fd, std::uint64_t inode);
  std::string path_;
  UniqueFd fd_;
  std::uint64_t inode_ = 0;
};

}  // namespace lmcache::restart
