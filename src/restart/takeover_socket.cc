#include "restart/takeover_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace lmcache::restart {
namespace {

constexpr std::size_t kHeaderBytes = 9;

std::string Errno(const std::string& what, const std::string& path, int error) {
  return what + " " + path + ": " + std::strerror(error);
}

Result<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return InvalidConfig("--takeover-socket: '" + path + "' is empty or longer than " +
                         std::to_string(sizeof(address.sun_path) - 1) + " characters");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

int MillisLeft(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Waits until `fd` is readable or the deadline passes.
Status WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, MillisLeft(deadline));
    if (ready > 0) return Status::Ok();
    if (ready == 0) return Status(ErrorCode::kTimeout, "the takeover peer went silent");
    if (errno != EINTR) return Status(ErrorCode::kIoError, Errno("poll", "takeover socket", errno));
  }
}

}  // namespace

TakeoverSocket::TakeoverSocket(UniqueFd fd) : fd_(std::move(fd)) {
  if (!fd_.valid()) return;
  const timeval limit{static_cast<time_t>(kSendTimeout.count()), 0};
  (void)setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

Result<TakeoverSocket> TakeoverSocket::Connect(const std::string& path) {
  LMC_ASSIGN_OR_RETURN(const sockaddr_un address, AddressOf(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(ErrorCode::kIoError, Errno("socket for", path, errno));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const bool absent = errno == ENOENT || errno == ECONNREFUSED;
    return Status(absent ? ErrorCode::kNotFound : ErrorCode::kIoError,
                  Errno("connect to", path, errno));
  }
  return TakeoverSocket(std::move(fd));
}

Status TakeoverSocket::Send(FrameType type, std::string_view payload, int pass_fd) {
  char header[kHeaderBytes];
  header[0] = static_cast<char>(type);
  const std::uint64_t length = payload.size();
  for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  iovec iov{header, kHeaderBytes};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&message);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  // The header goes in one sendmsg (a unix stream socket never splits a
  // 9-byte write), the descriptor with it.
  if (sendmsg(fd_.get(), &message, MSG_NOSIGNAL) != static_cast<ssize_t>(kHeaderBytes)) {
    return Status(ErrorCode::kIoError, Errno("send to", "the takeover peer", errno));
  }
  std::size_t sent = 0;
  while (sent < payload.size()) {
    const ssize_t n = send(fd_.get(), payload.data() + sent, payload.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(ErrorCode::kIoError, Errno("send to", "the takeover peer", errno));
    sent += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status TakeoverSocket::ReadExactly(char* out, std::size_t n,
                                   std::chrono::steady_clock::time_point deadline,
                                   UniqueFd* passed) {
  std::size_t got = 0;
  while (got < n) {
    LMC_RETURN_IF_ERROR(WaitReadable(fd_.get(), deadline));
    iovec iov{out + got, n - got};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t r = recvmsg(fd_.get(), &message, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return Status(ErrorCode::kIoError, Errno("receive from", "the takeover peer", errno));
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
      UniqueFd owned(fd);  // closed here unless the caller wants it
      if (passed != nullptr && !passed->valid()) *passed = std::move(owned);
    }
    if (r == 0) return Status(ErrorCode::kUnavailable, "the takeover peer closed the connection");
    got += static_cast<std::size_t>(r);
  }
  return Status::Ok();
}

Result<std::string> TakeoverSocket::Receive(FrameType expected, std::chrono::milliseconds timeout,
                                            std::uint64_t max_bytes, UniqueFd* passed) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char header[kHeaderBytes];
  LMC_RETURN_IF_ERROR(ReadExactly(header, kHeaderBytes, deadline, passed));
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<std::uint64_t>(static_cast<unsigned char>(header[1 + i])) << (8 * i);
  }
  if (static_cast<FrameType>(header[0]) != expected) {
    return Status(ErrorCode::kMalformedRequest,
                  "takeover: expected a frame of type " +
                      std::to_string(static_cast<int>(expected)) + ", got " +
                      std::to_string(static_cast<unsigned char>(header[0])));
  }
  if (length > max_bytes) {
    return Status(ErrorCode::kMalformedRequest, "takeover: a frame of " + std::to_string(length) +
                                                    " bytes, more than the " +
                                                    std::to_string(max_bytes) + " expected");
  }
  // Grown as bytes arrive, so a lying length costs no memory it did not send.
  std::string payload;
  constexpr std::size_t kStep = 1 << 20;
  while (payload.size() < length) {
    const std::size_t start = payload.size();
    payload.resize(start + std::min<std::uint64_t>(kStep, length - start));
    LMC_RETURN_IF_ERROR(
        ReadExactly(payload.data() + start, payload.size() - start, deadline, nullptr));
  }
  return payload;
}

bool TakeoverSocket::WaitClosed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char byte = 0;
  while (WaitReadable(fd_.get(), deadline).ok()) {
    const ssize_t r = recv(fd_.get(), &byte, 1, 0);
    if (r == 0 || (r < 0 && errno != EINTR)) return true;
  }
  return false;
}

TakeoverListener::TakeoverListener(std::string path, UniqueFd fd, std::uint64_t inode)
    : path_(std::move(path)), fd_(std::move(fd)), inode_(inode) {}

TakeoverListener::TakeoverListener(TakeoverListener&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::move(other.fd_)), inode_(other.inode_) {
  other.path_.clear();
}

TakeoverListener::~TakeoverListener() {
  if (path_.empty() || !fd_.valid()) return;
  struct stat info {};
  // Only our own file: a successor may have bound the path meanwhile.
  if (stat(path_.c_str(), &info) == 0 && info.st_ino == inode_) unlink(path_.c_str());
}

Result<TakeoverListener> TakeoverListener::Listen(const std::string& path) {
  LMC_ASSIGN_OR_RETURN(const sockaddr_un address, AddressOf(path));
  if (auto live = TakeoverSocket::Connect(path); live.ok()) {
    return Status(ErrorCode::kAlreadyExists,
                  "another server listens for takeovers on " + path +
                      ": give this one its own --shm-name or --takeover-socket");
  }
  unlink(path.c_str());  // a dead server's file, if any
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(ErrorCode::kIoError, Errno("socket for", path, errno));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Status(ErrorCode::kIoError, Errno("bind", path, errno));
  }
  // Not through umask, which is the whole process's (other threads create
  // files): a peer that connects before this chmod is still refused by uid.
  if (chmod(path.c_str(), 0600) != 0) {
    const int error = errno;
    unlink(path.c_str());
    return Status(ErrorCode::kIoError, Errno("chmod 0600", path, error));
  }
  if (listen(fd.get(), 4) != 0) return Status(ErrorCode::kIoError, Errno("listen on", path, errno));
  struct stat info {};
  if (stat(path.c_str(), &info) != 0)
    return Status(ErrorCode::kIoError, Errno("stat", path, errno));
  return TakeoverListener(path, std::move(fd), info.st_ino);
}

Result<TakeoverSocket> TakeoverListener::Accept(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  LMC_RETURN_IF_ERROR(WaitReadable(fd_.get(), deadline));
  UniqueFd peer(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!peer.valid()) return Status(ErrorCode::kIoError, Errno("accept on", path_, errno));
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (getsockopt(peer.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0 ||
      credentials.uid != geteuid()) {
    return Status(ErrorCode::kPermissionDenied, "a takeover request from uid " +
                                                    std::to_string(credentials.uid) +
                                                    " (not this server's user) was refused");
  }
  return TakeoverSocket(std::move(peer));
}

}  // namespace lmcache::restart
