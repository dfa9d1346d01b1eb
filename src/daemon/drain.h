// The drain after a SIGTERM, and the successor a SIGUSR1 announces: the
// main thread's part of a graceful stop and of a warm restart's handover.
//
// Thread-safety: on the main thread (it takes the handled signals,
// daemon/process.h); the service and the tier are read through their
// thread-safe snapshots.
#pragma once

#include <signal.h>

#include <optional>

#include "restart/takeover.h"
#include "server/service.h"
#include "tier/l2_tier.h"

namespace lmcache::daemon {

// The successor the takeover thread accepted, if a SIGUSR1 announced one
// (any other SIGUSR1 is ignored, logged: it must not stop the server).
std::optional<restart::PendingTakeover> SuccessorWaiting(restart::TakeoverService* takeover);

// Returns when no worker is registered and nothing is queued (requests, L2
// stores), `timeout_seconds` passed, another SIGTERM or a SIGINT asks to
// exit at once, or a successor asked for the pool (then in *successor).
// `l2` and `takeover` may be null.
void Drain(const sigset_t& signals, server::Service& service, tier::L2Tier* l2,
           double timeout_seconds, restart::TakeoverService* takeover,
           std::optional<restart::PendingTakeover>* successor);

}  // namespace lmcache::daemon
