// The single-thread guard fails a test that starts a thread (see
// tests/fakes/single_thread_guard.cc). Not a GoogleTest: a death test would
// fork, which the guard also refuses. ctest passes it when its output names
// the list to fix; a guard that let the thread run prints "started".
#include <cstdio>
#include <thread>

int main() {
  std::thread([] {}).join();
  std::puts("started a thread: the single-thread guard did not stop it");
  return 0;
}
