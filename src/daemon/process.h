// What lmcache-server sets up for its process and how its main thread
// waits: the signals it handles (blocked in every thread, so the main thread
// alone takes them, one at a time), and the descriptor limit.
//
// Signals: SIGTERM drains (or stops), SIGINT stops at once, SIGHUP reopens
// the log file (handled here, never returned), SIGUSR1 is raised by the
// takeover service when a successor asks for the pool.
//
// Thread-safety: BlockHandledSignals and RaiseDescriptorLimit once, on the
// main thread before any other starts; the waits on the main thread only.
#pragma once

#include <signal.h>

#include <chrono>

namespace lmcache::daemon {

// Blocks SIGINT, SIGTERM, SIGHUP and SIGUSR1 in this thread (every thread
// started later inherits the mask); returns the set to wait on.
sigset_t BlockHandledSignals();

// The next handled signal within `timeout` (0: none came, or SIGHUP, which
// reopened the log file).
int NextSignal(const sigset_t& signals, std::chrono::milliseconds timeout);

// Waits for the first SIGTERM, SIGINT or SIGUSR1; returns it.
int WaitForShutdown(const sigset_t& signals);

// Waits for SIGTERM or SIGINT, past any SIGUSR1 (a server that handed its
// pool over and waits for its pod to be deleted: --after-handover wait).
void WaitForTermination(const sigset_t& signals);

// Every connection a client, a peer or a stranger holds costs a descriptor:
// the soft limit (1024 on many systems) goes up to the hard one, logged.
void RaiseDescriptorLimit();

}  // namespace lmcache::daemon
