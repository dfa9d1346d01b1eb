// The C++ port picker (tests/fakes/free_port.h): pickers in several processes
// never hand out one port twice while it is reserved, the Python picker
// (tests/python/free_ports.py) honours the C++ picker's reservations and the
// other way round, and the registry keeps one "PORT EXPIRY" line per live
// reservation. Each case uses a private registry and a narrow range below the
// ephemeral one, where pickers that did not share their picks would collide
// at once (tests/python/test_free_ports.py says how surely).
#include "fakes/free_port.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fakes/temp_dir.h"

namespace lmcache::testing {
namespace {

// Below the default range (from 10000), so no other test picks these, and not
// the Python test's (9400-9599): the two may run at once.
constexpr int kRangeLow = 9600;

// Whether every port of [low, high] can be bound now: the cases expect exact
// sets of ports, and on some hosts a service listens in this range.
bool RangeIsFree(int low, int high) {
  for (int port = low; port <= high; ++port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool bound = free_port_detail::BindLoopback(fd, port);
    ::close(fd);
    if (!bound) return false;
  }
  return true;
}

class FreePortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RangeIsFree(kRangeLow, kRangeLow + 199)) {
      GTEST_SKIP() << "a port of the test's range " << kRangeLow << "-" << kRangeLow + 199
                   << " is in use here";
    }
    UseRange(kRangeLow, kRangeLow + 7);
  }
  void TearDown() override {
    ::unsetenv("LMCACHE_TEST_PORT_REGISTRY");
    ::unsetenv("LMCACHE_TEST_PORT_RANGE");
  }
  void UseRange(int low, int high) {
    ::setenv("LMCACHE_TEST_PORT_REGISTRY", registry_.c_str(), 1);
    ::setenv("LMCACHE_TEST_PORT_RANGE", (std::to_string(low) + "-" + std::to_string(high)).c_str(),
             1);
  }
  static std::vector<int> Range(int low, int count) {
    std::vector<int> ports(count);
    for (int i = 0; i < count; ++i) ports[i] = low + i;
    return ports;
  }
  static std::vector<int> Sorted(std::vector<int> ports) {
    std::sort(ports.begin(), ports.end());
    return ports;
  }
  void WriteRegistry(const std::string& text) const { std::ofstream(registry_) << text; }
  std::string ReadRegistry() const {
    std::stringstream text;
    text << std::ifstream(registry_).rdbuf();
    return text.str();
  }

  TempDir dir_{"free_port_test"};
  std::string registry_ = (dir_.path() / "registry").string();
};

// Each child picks `picks` ports one call at a time and writes them to a pipe.
std::vector<int> PickInChildren(int children, int picks) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int c = 0; c < children; ++c) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      for (int i = 0; i < picks; ++i) {
        const int port = FreeTcpPort();
        if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) ::_exit(2);
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::vector<int> ports;
  for (int port = 0; ::read(fds[0], &port, sizeof(port)) == sizeof(port);) ports.push_back(port);
  ::close(fds[0]);
  for (const pid_t pid : pids) {
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return ports;
}

TEST_F(FreePortTest, PickersInManyProcessesNeverShareAPort) {
  UseRange(kRangeLow, kRangeLow + 199);
  const std::vector<int> picked = PickInChildren(4, 40);
  ASSERT_EQ(picked.size(), 160u);
  const std::set<int> distinct(picked.begin(), picked.end());
  EXPECT_EQ(distinct.size(), picked.size()) << "a port was handed out twice";
  EXPECT_GE(*distinct.begin(), kRangeLow);
  EXPECT_LE(*distinct.rbegin(), kRangeLow + 199);
}

TEST_F(FreePortTest, OneCallTakesEveryPortOfARangeOnce) {
  EXPECT_EQ(Sorted(FreeTcpPorts(8)), Range(kRangeLow, 8));
}

TEST_F(FreePortTest, WithEveryPortReservedAPickFallsBackToTheKernel) {
  FreeTcpPorts(8);
  EXPECT_GE(FreeTcpPort(), free_port_detail::EphemeralPortFloor());
}

TEST_F(FreePortTest, AnExpiredReservationFreesItsPort) {
  const long long past = std::time(nullptr) - 1;
  std::string text;
  for (const int port : Range(kRangeLow, 8))
    text += std::to_string(port) + " " + std::to_string(past) + "\n";
  WriteRegistry(text);
  EXPECT_EQ(Sorted(FreeTcpPorts(8)), Range(kRangeLow, 8));
}

TEST_F(FreePortTest, TheRegistryKeepsOneLinePerLiveReservation) {
  const long long now = std::time(nullptr);
  WriteRegistry(std::to_string(kRangeLow) + " " + std::to_string(now + 100) + "\nnot a line\n" +
                std::to_string(kRangeLow + 1) + " " + std::to_string(now - 5) + "\n" +
                std::to_string(kRangeLow + 2) + " " + std::to_string(now + 100) + " extra\n");
  const std::vector<int> picked = FreeTcpPorts(2);
  EXPECT_EQ(std::count(picked.begin(), picked.end(), kRangeLow), 0);
  std::istringstream lines(ReadRegistry());
  std::vector<int> listed;
  for (long long port = 0, expiry = 0; lines >> port >> expiry;) {
    listed.push_back(static_cast<int>(port));
    if (std::count(picked.begin(), picked.end(), port) > 0) {
      EXPECT_GE(expiry, now + free_port_detail::kReserveSeconds);
    }
  }
  std::vector<int> expected = picked;
  expected.push_back(kRangeLow);
  EXPECT_EQ(listed, Sorted(expected));
}

// Another local user may plant the registry's name in a shared /tmp as a
// link to a file of ours: the picker must not rewrite (truncate) it, and
// picks anyway, unregistered.
TEST_F(FreePortTest, ARegistryPathThatIsALinkIsNeverFollowed) {
  const std::string victim = (dir_.path() / "victim").string();
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), registry_.c_str()), 0);
  const std::vector<int> picked = FreeTcpPorts(2);
  EXPECT_NE(picked[0], picked[1]);
  std::stringstream text;
  text << std::ifstream(victim).rdbuf();
  EXPECT_EQ(text.str(), "precious\n");
}

#ifdef LMC_PYTHON3
// Python's picks, `count` ports in one call, as the Python tests make them.
std::vector<int> PythonPicks(int count) {
  std::ostringstream command;
  command << "cd " << LMC_TEST_PYTHON_DIR << " && " << LMC_PYTHON3
          << " -c 'import free_ports; print(*free_ports.free_tcp_ports(" << count << "))'";
  FILE* out = ::popen(command.str().c_str(), "r");
  EXPECT_NE(out, nullptr);
  std::vector<int> ports;
  for (int port = 0; out != nullptr && std::fscanf(out, "%d", &port) == 1;) ports.push_back(port);
  if (out != nullptr) {
    EXPECT_EQ(::pclose(out), 0);
  }
  return ports;
}

TEST_F(FreePortTest, PythonAndCxxPickersShareOneRegistry) {
  const std::vector<int> first = FreeTcpPorts(3);
  const std::vector<int> second = PythonPicks(3);
  const std::vector<int> third = FreeTcpPorts(2);
  std::vector<int> all = first;
  all.insert(all.end(), second.begin(), second.end());
  all.insert(all.end(), third.begin(), third.end());
  EXPECT_EQ(Sorted(all), Range(kRangeLow, 8)) << "one picker took a port the other reserved";
}
#endif

}  // namespace
}  // namespace lmcache::testing
