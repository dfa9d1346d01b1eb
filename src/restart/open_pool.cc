#include "restart/open_pool.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "common/system_info.h"
#include "restart/pool_journal.h"
#include "restart/pool_recovery.h"
#include "shm/shm_segment.h"

namespace lmcache::restart {
namespace {

using Steady = std::chrono::steady_clock;

double SecondsSince(Steady::time_point start) {
  return std::chrono::duration<double>(Steady::now() - start).count();
}

double GiB(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

// The successor's first step: the running server's pool, or nullopt for a
// cold start (nobody to take over from, or it stepped down for one).
Result<std::optional<Inheritance>> AskForThePool(store::L1Config* l1,
                                                 const RestartConfig& config) {
  TakeoverHello hello;
  hello.geometry = TakeoverGeometryOf(*l1, config.chunk_sizes);
  if (!config.shm_name_given) hello.geometry.shm_name.clear();  // it takes the running one's
  hello.cold_if_incompatible = config.takeover == TakeoverMode::kIfCompatible;
  spdlog::info("takeover: asking the server on {} for its pool (waiting up to {} s for its drain)",
               config.socket_path, std::chrono::duration<double>(config.timeout).count());
  const auto asked = Steady::now();
  LMC_ASSIGN_OR_RETURN(std::optional<Inheritance> inheritance,
                       RequestTakeover(config.socket_path, hello, config.timeout));
  if (!inheritance) {
    spdlog::info("takeover: no server hands a pool over on {}; starting cold", config.socket_path);
    return inheritance;
  }
  spdlog::info("takeover: received the pool's descriptor and index ({} objects, {} slots held, "
               "{} registrations) {:.3f} s after asking",
               inheritance->image.pool.table.resident.size(),
               inheritance->image.pool.table.held.size(), inheritance->image.registrations.size(),
               SecondsSince(asked));
  if (!config.shm_name_given) l1->shm_name = inheritance->image.shm_name;
  return inheritance;
}

// The successor's adoption of the pool it was handed, acknowledged to the
// predecessor once it holds (from then on the pool's name is this server's).
Status AdoptThePool(const store::L1Config& l1, const Clock& clock, Inheritance& inheritance,
                    OpenedPool* pool) {
  const auto adopting = Steady::now();
  LMC_ASSIGN_OR_RETURN(auto segment, shm::ShmSegment::Adopt(l1.shm_name,
                                                            std::move(inheritance.segment),
                                                            l1.size_bytes));
  store::AdoptionReport report;
  LMC_ASSIGN_OR_RETURN(pool->cache, store::L1Cache::Adopt(l1, &clock, std::move(segment),
                                                          inheritance.image.pool, &report));
  spdlog::info("takeover: adopted the pool in place in {:.3f} s", SecondsSince(adopting));
  server::RestartStats& stats = pool->stats;
  stats.took_over = true;
  stats.adopted_objects = report.objects;
  stats.adopted_bytes = report.bytes;
  stats.adopted_read_locked = report.read_locked;
  stats.dropped_staged = report.held_slots;
  stats.dropped_staged_bytes = report.held_bytes;
  pool->origin = PoolOrigin::kTakenOver;
  pool->predecessor_boot_id = inheritance.image.boot_id;
  pool->registrations = std::move(inheritance.image.registrations);
  return Acknowledge(inheritance);
}

// --recover-pool: the pool a crashed predecessor left, adopted in place with
// every object its journal proves intact; pool->cache stays empty (start
// cold) when there is nothing to recover or it cannot be.
void RecoverThePool(const store::L1Config& l1, const Clock& clock, OpenedPool* pool) {
  const auto started = Steady::now();
  RecoveryReport report;
  auto recovered = RecoverPool(l1, &clock, &report);
  if (!recovered.ok()) {
    if (recovered.status().code() == ErrorCode::kNotFound) {
      spdlog::info("recovery: no pool {} with a journal to recover; starting cold", l1.shm_name);
    } else {
      spdlog::warn("recovery: cannot recover the pool {}: {}; starting cold", l1.shm_name,
                   recovered.status().message());
    }
    return;
  }
  pool->cache = std::move(recovered).value();
  pool->origin = PoolOrigin::kRecovered;
  server::RestartStats& stats = pool->stats;
  stats.recovered = true;
  stats.recovered_objects = report.objects;
  stats.recovered_bytes = report.bytes;
  stats.recovery_held_slots = report.held_slots;
  stats.recovery_held_bytes = report.held_bytes;
  stats.recovery_unsealed = report.unsealed;
  stats.recovery_checksum_mismatches = report.checksum_mismatches;
  stats.recovery_seconds = SecondsSince(started);
  spdlog::info("crash recovery: recovered pool {} in {:.3f} s: {} objects ({:.2f} GiB) verified "
               "and served again; {} slots held from reuse, a write TTL at most ({} staged, {} "
               "not yet checksummed, {} changed since their checksum, {} superseded, {} "
               "undecodable; {} whose hold from an earlier recovery had ended freed); {} records "
               "outside any slab dropped",
               l1.shm_name, stats.recovery_seconds, report.objects, GiB(report.bytes),
               report.held_slots, report.staged, report.unsealed, report.checksum_mismatches,
               report.superseded, report.undecodable, report.holds_ended, report.outside_slabs);
}

}  // namespace

const char* PoolOriginName(PoolOrigin origin) {
  switch (origin) {
    case PoolOrigin::kCold: return "cold";
    case PoolOrigin::kTakenOver: return "taken over";
    case PoolOrigin::kRecovered: return "recovered";
  }
  return "?";
}

TakeoverGeometry TakeoverGeometryOf(const store::L1Config& l1,
                                    const store::ChunkSizes& chunk_sizes) {
  return {l1.shm_name, store::GeometryOf(l1), chunk_sizes};
}

Result<OpenedPool> OpenPool(store::L1Config* l1, const RestartConfig& config, const Clock& clock,
                            const std::function<Status(bool after_takeover)>& bind) {
  OpenedPool pool;
  pool.started = Steady::now();
  l1->journal = config.recover_pool ? store::SlotJournalFactory(MakePoolJournal) : nullptr;
  // A successor asks for the pool before it binds anything: the running
  // server holds the endpoints until it hands over.
  std::optional<Inheritance> inheritance;
  if (config.takeover != TakeoverMode::kOff) {
    auto asked = AskForThePool(l1, config);
    if (!asked.ok()) {
      return Status(asked.status().code(), "cannot take over: " + asked.status().message());
    }
    inheritance = std::move(asked).value();
  }
  if (inheritance) {
    // On a failure the predecessor sees the connection close without an acknowledgement.
    if (Status adopted = AdoptThePool(*l1, clock, *inheritance, &pool); !adopted.ok()) {
      return Status(adopted.code(), "cannot take over the pool: " + adopted.message());
    }
  }
  // Endpoints next: a second server refused here has touched nothing.
  LMC_RETURN_IF_ERROR(bind(inheritance.has_value()));
  // Without --recover-pool nothing records the pool: a journal an earlier run
  // left would describe bytes nobody keeps it true for. (Not before: a
  // predecessor that refuses our takeover serves on with its journal.)
  if (!config.recover_pool) RemoveJournal(l1->shm_name);
  if (!inheritance && config.recover_pool) RecoverThePool(*l1, clock, &pool);
  if (!pool.cache) {
    spdlog::info("creating L1 pool /dev/shm/{} of {:.2f} GiB", l1->shm_name, GiB(l1->size_bytes));
    LMC_ASSIGN_OR_RETURN(pool.cache, store::L1Cache::Create(*l1, &clock));
  }
  return pool;
}

void FinishOpening(OpenedPool& pool, server::Service& service) {
  if (pool.origin == PoolOrigin::kCold) return;
  server::RestartStats& stats = pool.stats;
  if (pool.origin == PoolOrigin::kTakenOver) {
    stats.carried_registrations = service.AdoptRegistrations(pool.registrations);
    pool.registrations.clear();
    stats.takeover_seconds = SecondsSince(pool.started);
    spdlog::info(
        "warm restart: took pool {} over from server {}: adopted {} objects ({:.2f} GiB), {} of "
        "them read-locked (kept for a read lease); dropped {} staged copies (held from reuse "
        "for a write lease); carried {} registrations; serving {:.3f} s after asking",
        pool.cache->segment().name(), pool.predecessor_boot_id, stats.adopted_objects,
        GiB(stats.adopted_bytes), stats.adopted_read_locked, stats.dropped_staged,
        stats.carried_registrations, stats.takeover_seconds);
  }
  service.stats_sources().Add(
      "restart", [stats](server::StatsSnapshot* snapshot) { snapshot->restart = stats; });
}

Status HandOverPool(PendingTakeover& successor, store::L1Cache& cache,
                    server::Service& service, std::chrono::milliseconds timeout) {
  const auto started = Steady::now();
  HandoverImage image;
  if (!successor.cold) {
    image = {service.boot_id(), std::string(cache.segment().name()), cache.StopAndExport(),
             service.CarriedRegistrations()};
    spdlog::info("takeover: exported the pool's index in {:.3f} s", SecondsSince(started));
  }
  LMC_RETURN_IF_ERROR(HandOver(successor, cache.segment().fd(), image, timeout));
  if (!successor.cold) {
    cache.Disown();
    spdlog::info("handed pool {} over: {} objects, {} staged copies, {} registrations, in {:.3f} s; "
                 "the successor serves it",
                 image.shm_name, image.pool.table.resident.size(), image.pool.table.held.size(),
                 image.registrations.size(), SecondsSince(started));
  }
  return Status::Ok();
}

}  // namespace lmcache::restart
