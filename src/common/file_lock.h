// Advisory whole-file locks (flock) that prove a live owner.
//
// An flock belongs to an open file description: it holds for as long as the
// owner keeps that descriptor open and vanishes when the owner dies, however
// it dies. The server holds one on its pool segment and on the lock file of
// each ipc endpoint for its whole life, so a later process can tell a live
// owner (the lock is held) from a leftover of a dead one (it is not).
// Thread-safety: stateless functions.
#pragma once

#include <sys/types.h>

#include <optional>

#include "lmcache/status.h"

namespace lmcache {

// Takes an exclusive flock on `fd` without waiting: true when taken, false
// when another open file description holds a lock on the same file.
Result<bool> TryLockExclusive(int fd);
// The pid holding an flock on the file `fd` refers to, as /proc/locks reports
// it; nullopt when nobody does or it is not visible (another pid namespace).
std::optional<pid_t> FlockHolder(int fd);

}  // namespace lmcache
