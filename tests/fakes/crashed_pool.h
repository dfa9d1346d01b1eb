// A pool left by a server killed with SIGKILL, for the crash-recovery tests:
// a forked child builds a journaled pool of `config` (the journal from
// restart::MakePoolJournal), stores six 1 MiB objects (keys 0..5, each
// filled with 0x60 + i), seals them, deletes a seventh while a reader holds
// it (retired: a delete survives the crash), stages an eighth (key 100,
// never committed) and is killed with everything mapped and running; no
// destructor runs, exactly as after a crash.
//
// Thread-safety: call from a test's main thread (it forks).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "fakes/keys.h"
#include "restart/pool_journal.h"
#include "store/l1_cache.h"

namespace lmcache::testing {

// The offset the child staged (never committed), or nullopt when it failed.
inline std::optional<alloc::Offset> CrashAServerAfterStoring(store::L1Config config,
                                                             const Clock* clock) {
  constexpr std::uint64_t kMiB = 1 << 20;
  config.journal = restart::MakePoolJournal;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return std::nullopt;
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    alloc::Offset staged_offset = 0;
    auto cache = store::L1Cache::Create(config, clock);
    if (cache.ok() && (*cache)->WaitPrefaulted(std::chrono::seconds(30))) {
      store::L1Cache& a = **cache;
      auto& journal = dynamic_cast<restart::PoolJournal&>(*a.journal());
      auto lease = a.table().ReserveWrite(KeysN(0, 6), kMiB, store::Owner::Instance(1),
                                          store::AllocationMode::kAllOrNothing);
      for (std::size_t i = 0; lease.ok() && i < 6; ++i) {
        std::memset(a.segment().base() + lease->offsets[i], static_cast<int>(0x60 + i), kMiB);
      }
      // One more object, sealed, read-locked and then deleted (retired: its
      // memory waits for the reader): a delete survives the crash.
      const std::vector<store::ObjectKey> gone = KeysN(50, 1);
      auto deleted = a.table().ReserveWrite(gone, kMiB, store::Owner::Instance(1),
                                            store::AllocationMode::kAllOrNothing);
      if (deleted.ok()) (void)a.table().FinishWrite(deleted->lease);
      (void)journal.WaitSealed(std::chrono::seconds(30));
      store::ReadRequest reader;
      reader.keys = gone;
      reader.owner = store::Owner::Session(9);
      (void)a.table().AcquireRead(reader);
      (void)a.table().Delete(gone, /*force=*/true);
      if (lease.ok() && a.table().FinishWrite(lease->lease).admitted == 6 &&
          journal.WaitSealed(std::chrono::seconds(30))) {
        auto staged = a.table().ReserveWrite(KeysN(100, 1), kMiB, store::Owner::Instance(2),
                                             store::AllocationMode::kAllOrNothing);
        if (staged.ok() && staged->reserved == 1) staged_offset = staged->offsets[0];
      }
    }
    (void)!write(pipe_fds[1], &staged_offset, sizeof(staged_offset));
    pause();  // killed here, with everything still mapped and running
    _exit(0);
  }
  close(pipe_fds[1]);
  alloc::Offset staged_offset = 0;
  const bool got = read(pipe_fds[0], &staged_offset, sizeof(staged_offset)) ==
                   static_cast<ssize_t>(sizeof(staged_offset));
  close(pipe_fds[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  if (!got || staged_offset == 0 || !WIFSIGNALED(status)) return std::nullopt;
  return staged_offset;
}

}  // namespace lmcache::testing
