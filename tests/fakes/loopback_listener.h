// LoopbackListener: a TCP listener on 127.0.0.1 at a port the kernel picks,
// for tests of what the transport learns from accepted sockets (their
// peer, their owner, their port).
//
// Thread-safety: none; one test thread uses it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "common/unique_fd.h"

namespace lmcache::testing {

struct LoopbackListener {
  LoopbackListener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
            ::listen(fd.get(), 16) == 0 &&
            ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0;
  }
  std::uint16_t port() const { return ntohs(address.sin_port); }
  // A client socket connected to it (in this process).
  UniqueFd Connect() const {
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(client.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
              0);
    return client;
  }
  UniqueFd Accept() const { return UniqueFd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC)); }

  UniqueFd fd;
  sockaddr_in address{};
  bool bound = false;
};

}  // namespace lmcache::testing
