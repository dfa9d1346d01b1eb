// libFuzzer target: crash recovery's reader of the journal a dead server left
// (restart/pool_recovery.h). The journal is the server's own file, but after a
// crash it is whatever the dead process had written, torn anywhere: recovery
// must refuse or drop what does not hold together, never follow it. Beyond
// "no crash, no sanitizer report", a plan is checked for what adopting it
// needs: slabs in ready pages without overlap, every object and held slot a
// slot start of one of them, once, and every served key valid.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "journal_input.h"
#include "restart/pool_recovery.h"

namespace {

using namespace lmcache;
namespace jf = restart::journal_format;

void Check(bool condition) {
  if (!condition) std::abort();
}

// Input byte 0, bit 0: seal what claims to be sealed with its true checksum.
void FixChecksums(std::vector<std::byte>& journal, std::span<const std::byte> pool) {
  const jf::Parts parts = fuzz::JournalParts();
  auto* records = reinterpret_cast<jf::Record*>(journal.data() + parts.records);
  for (std::size_t i = 0; i < fuzz::kJournalPoolBytes / fuzz::kJournalGeometry.pool.align_bytes; ++i) {
    jf::Record& r = records[i];
    if ((r.state & 3) != jf::kSealed || r.offset > pool.size() || r.size > pool.size() - r.offset)
      continue;
    r.checksum = XXH3_64bits(pool.data() + r.offset, r.size);
  }
}

void CheckPlan(const restart::RecoveryPlan& plan) {
  const std::uint64_t page = fuzz::kJournalGeometry.pool.page_bytes;
  Check(plan.image.ready_bytes <= fuzz::kJournalPoolBytes && plan.image.ready_bytes % page == 0);
  std::uint64_t end = 0;
  for (const alloc::SlabRecord& slab : plan.image.slabs) {
    Check(slab.first_page >= end && slab.num_pages > 0);
    end = slab.first_page + slab.num_pages;
    Check(end * page <= plan.image.ready_bytes);
  }
  std::set<std::uint64_t> offsets;
  for (const store::AdoptedObject& object : plan.image.table.resident) {
    Check(store::ValidateObjectKey(object.key).ok());
    Check(object.offset + object.size <= fuzz::kJournalPoolBytes);
    Check(offsets.insert(object.offset).second);
  }
  for (const store::HeldSlot& slot : plan.image.table.held) {
    Check(slot.offset + slot.size <= fuzz::kJournalPoolBytes);
    Check(offsets.insert(slot.offset).second);
  }
  Check(plan.report.objects == plan.image.table.resident.size());
  Check(plan.report.held_slots == plan.image.table.held.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::byte> pool = fuzz::JournalPool();
  static std::vector<std::byte> journal;  // 64 MiB: cleared in part, not made anew
  fuzz::JournalFromInput({data, size}, journal);
  if (size > 0 && (data[0] & 1) != 0) FixChecksums(journal, pool);
  auto plan = restart::PlanRecovery(journal, pool, fuzz::kJournalGeometry, 1);
  if (plan.ok()) CheckPlan(*plan);
  return 0;
}
