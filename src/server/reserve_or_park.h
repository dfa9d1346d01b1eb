// ReserveOrPark: a store whose L1 reservation must wait for pre-faulted
// pages parks (ParkedRequests) instead of holding its pool thread.
//
// A large pool is pre-faulted in the background for minutes after start,
// and the allocator hands out only pages made ready so far. A store that
// does not fit in them must not wait on its pool thread for fresh pages:
// with one affinity thread per lane, the other workers of that lane would
// wait behind it. So the store's attempt runs with
// WhilePoolWarms::kReportBusy; when it reports pages pending it has
// reserved nothing, and the request parks until:
//   - more pages are ready: the attempt runs again, on the pre-faulter's
//     thread (a reservation is short), and answers or parks again;
//   - its deadline (the service clock's now + prefault_wait): the attempt
//     runs once more with kGoOn, evicting or taking what fits as a store on a
//     warm pool would (prepare_store answers the prefix it got);
//   - its client closes, or the server drains: answered kUnavailable, with
//     nothing reserved.
//
// Thread-safety: from any thread; the attempt may run on the calling thread,
// the pre-faulter's or the parked-request deadline thread, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/clock.h"
#include "server/op_table.h"
#include "server/parked_requests.h"
#include "store/object_table.h"

namespace lmcache::server {

// What a store that waits for pages uses: where it parks, the table whose
// pages it waits for, the clock of its deadline. Each must outlive it.
struct StoreParking {
  ParkedRequests* parked = nullptr;
  store::ObjectTable* table = nullptr;
  const Clock* clock = nullptr;
};

// What one attempt at a store came to: its reply, or that it must wait for
// more than `ready_bytes_seen` bytes of the pool to be ready.
struct Attempted {
  Attempted(OpResult result) : reply(std::move(result)) {}              // NOLINT: implicit by design
  Attempted(Status status) : reply(OpResult(std::move(status))) {}      // NOLINT
  Attempted(Result<std::string> result) : reply(OpResult(std::move(result))) {}  // NOLINT
  static Attempted PagesPending(std::uint64_t ready_bytes_seen) {
    Attempted a(Status::Ok());
    a.reply.reset();
    a.ready_bytes_seen = ready_bytes_seen;
    return a;
  }
  std::optional<OpResult> reply;
  std::uint64_t ready_bytes_seen = 0;
};

// Runs the store's whole request (authorize, reserve, record, encode); it
// must be safe to run again after it reported pages pending.
using StoreAttempt = std::function<Attempted(store::WhilePoolWarms)>;

// Answers `respond` with the attempt's reply, now or once it stops waiting
// for pages. `operation` is a static name, declared with ParkedRequests.
void ReserveOrPark(const StoreParking& parking, std::string_view operation, std::string_view connection,
                   StoreAttempt attempt, Respond respond);

// A handler (op_table.h's Bind, for a store) from a payload decoder and
// fn(context, Args, WhilePoolWarms) -> Attempted, run through ReserveOrPark.
// The decoded arguments and the context are kept for the attempts to come.
template <typename Decode, typename Fn>
Handler BindReserving(const StoreParking& parking, std::string_view operation, Decode decode,
                      Fn fn) {
  parking.parked->Declare(operation);
  return [parking, operation, decode, fn](const RequestContext& context, Payloads payloads,
                                        const Respond& respond) {
    auto args = decode(payloads);
    if (!args.ok()) return respond(args.status());
    auto attempt = [fn, connection = std::string(context.connection), context,
                    args = std::move(args).value()](store::WhilePoolWarms warming) {
      RequestContext kept = context;
      kept.connection = connection;  // the transport's view ends with the handler
      return fn(kept, args, warming);
    };
    ReserveOrPark(parking, operation, context.connection, std::move(attempt), respond);
  };
}

}  // namespace lmcache::server
