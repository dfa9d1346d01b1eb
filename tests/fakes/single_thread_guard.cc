// The single-thread guard: linked into each test listed in
// LMC_SINGLE_THREADED_TESTS (tests/CMakeLists.txt), in each tree that builds
// them (Release, ASan). The TSan tree does not run those tests, on the
// promise that their process never starts a second thread or another process
// (where a race could be); these definitions take precedence over the C
// library's (an executable's own symbols come first in the dynamic lookup,
// for calls from libstdc++'s std::thread too) and over ASan's interceptors
// (weak symbols; its runtime starts its own threads and its symbolizer
// through raw system calls, and LeakSanitizer still reports), so a test that
// breaks the promise fails at once, saying which list to take it off.
//
// Thread-safety: each function ends the process; none returns.
#include <pthread.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

[[noreturn]] void RefuseSecondThreadOrProcess(const char* call) {
  std::fprintf(stderr,
               "single_thread_guard: %s in a test listed in LMC_SINGLE_THREADED_TESTS "
               "(tests/CMakeLists.txt), which the TSan build does not run; a test that starts "
               "threads or processes must be run there: take it off that list\n",
               call);
  std::_Exit(86);  // a status of its own, and no core file per refused call
}

}  // namespace

extern "C" {

int pthread_create(pthread_t* /*thread*/, const pthread_attr_t* /*attr*/,
                   void* (* /*start*/)(void*), void* /*arg*/) noexcept {
  RefuseSecondThreadOrProcess("pthread_create");
}

pid_t fork() noexcept { RefuseSecondThreadOrProcess("fork"); }

int posix_spawn(pid_t* /*pid*/, const char* /*path*/, const posix_spawn_file_actions_t* /*actions*/,
                const posix_spawnattr_t* /*attr*/, char* const /*argv*/[], char* const /*envp*/[]) {
  RefuseSecondThreadOrProcess("posix_spawn");
}

int posix_spawnp(pid_t* /*pid*/, const char* /*file*/,
                 const posix_spawn_file_actions_t* /*actions*/, const posix_spawnattr_t* /*attr*/,
                 char* const /*argv*/[], char* const /*envp*/[]) {
  RefuseSecondThreadOrProcess("posix_spawnp");
}

}  // extern "C"
