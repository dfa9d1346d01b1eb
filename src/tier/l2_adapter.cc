#include "tier/l2_adapter.h"

namespace lmcache::tier {

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

void L2Counters::Fill(L2AdapterStats* s) const {
  auto load = [](const std::atomic<std::uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  s->stored_objects = load(stored_objects);
  s->stored_bytes = load(stored_bytes);
  s->store_failures = load(store_failures);
  s->loaded_objects = load(loaded_objects);
  s->loaded_bytes = load(loaded_bytes);
  s->load_misses = load(load_misses);
  s->load_failures = load(load_failures);
  s->checksum_failures = load(checksum_failures);
  s->evicted_objects = load(evicted_objects);
  s->evicted_bytes = load(evicted_bytes);
}

}  // namespace lmcache::tier
