#include "server/reserve_or_park.h"

#include <memory>
#include <string>

namespace lmcache::server {
namespace {

struct ParkedStore {
  StoreParking parking;
  std::string_view operation;
  std::string connection;
  TimeMs deadline_ms = 0;
  StoreAttempt attempt;
  Respond respond;
};

void Park(const std::shared_ptr<ParkedStore>& store, std::uint64_t ready_bytes_seen);

void Finish(const std::shared_ptr<ParkedStore>& store, ParkEnd why) {
  switch (why) {
    case ParkEnd::kWoken: {
      Attempted again = store->attempt(store::WhilePoolWarms::kReportBusy);
      if (again.reply) return store->respond(std::move(*again.reply));
      return Park(store, again.ready_bytes_seen);
    }
    case ParkEnd::kDeadline: {
      Attempted last = store->attempt(store::WhilePoolWarms::kGoOn);
      if (last.reply) return store->respond(std::move(*last.reply));
      return store->respond(Internal(std::string(store->operation) +
                                     ": the reservation still waited for pages at its deadline"));
    }
    case ParkEnd::kClosed:
      return store->respond(Status(ErrorCode::kUnavailable,
                                   std::string(store->operation) +
                                       ": the client closed its connection while the store "
                                       "waited for pre-faulted pages; nothing was reserved"));
    case ParkEnd::kDrained:
      return store->respond(Status(ErrorCode::kUnavailable,
                                   std::string(store->operation) +
                                       ": the server is stopping; the store waited for "
                                       "pre-faulted pages and reserved nothing"));
  }
}

void Park(const std::shared_ptr<ParkedStore>& store, std::uint64_t ready_bytes_seen) {
  auto waker = store->parking.parked->Park(store->operation, store->connection, store->deadline_ms,
                                           [store](ParkEnd why) { Finish(store, why); });
  if (!waker.ok()) return store->respond(waker.status());
  // Called at once when pages came meanwhile: no wakeup is lost.
  store->parking.table->NotifyWhenPagesReady(ready_bytes_seen, std::move(waker).value());
}

}  // namespace

void ReserveOrPark(const StoreParking& parking, std::string_view operation, std::string_view connection,
                   StoreAttempt attempt, Respond respond) {
  Attempted first = attempt(store::WhilePoolWarms::kReportBusy);
  if (first.reply) return respond(std::move(*first.reply));
  auto store = std::make_shared<ParkedStore>();
  store->parking = parking;
  store->operation = operation;
  store->connection = std::string(connection);
  store->deadline_ms = parking.clock->NowMs() + parking.table->prefault_wait().count();
  store->attempt = std::move(attempt);
  store->respond = std::move(respond);
  Park(store, first.ready_bytes_seen);
}

}  // namespace lmcache::server
