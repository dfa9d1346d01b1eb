#include "tier/l2_adapter.h"

#include <future>

namespace lmcache::tier {

Status L2Adapter::AttachMemory(std::span<std::byte>) { return Status::Ok(); }

void L2Adapter::SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t, LookupDone done) {
  done(LookupAndLock(keys));
}

namespace {

// Runs `submit` with a completion and waits for it (inline or from any thread).
template <class Results, class Submit>
Results SubmitAndWait(Submit submit) {
  std::promise<Results> completed;
  std::future<Results> results = completed.get_future();
  submit([&completed](Results r) { completed.set_value(std::move(r)); });
  return results.get();
}

}  // namespace

std::vector<Status> L2Adapter::Store(std::span<const L2Write> objects) {
  return SubmitAndWait<std::vector<Status>>(
      [&](StoreDone done) { SubmitStore(objects, std::move(done)); });
}

std::vector<L2LoadOutcome> L2Adapter::Load(std::span<const L2Read> reads) {
  return SubmitAndWait<std::vector<L2LoadOutcome>>(
      [&](LoadDone done) { SubmitLoad(reads, std::move(done)); });
}

void L2Counters::CountLoad(L2LoadOutcome outcome, std::uint64_t bytes) {
  switch (outcome) {
    case L2LoadOutcome::kLoaded:
      loaded_objects.fetch_add(1, std::memory_order_relaxed);
      loaded_bytes.fetch_add(bytes, std::memory_order_relaxed);
      break;
    case L2LoadOutcome::kMissing:
      load_misses.fetch_add(1, std::memory_order_relaxed);
      break;
    case L2LoadOutcome::kCorrupt:
      checksum_failures.fetch_add(1, std::memory_order_relaxed);
      break;
    case L2LoadOutcome::kFailed:
      load_failures.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

LMC_STATS_ROWS(L2AdapterStatRows, L2AdapterStats, LMC_L2_ADAPTER_STATS)

}  // namespace lmcache::tier
