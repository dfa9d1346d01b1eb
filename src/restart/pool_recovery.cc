#include "restart/pool_recovery.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>

#include "common/parallel.h"

namespace lmcache::restart {
namespace jf = journal_format;
using store::ObjectKey;
using store::ObjectKeyHash;
namespace {

template <typename T>
T CopyAt(std::span<const std::byte> bytes, std::uint64_t offset) {
  T out;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));
  return out;
}

Status Refuse(const std::string& why) {
  return Status(ErrorCode::kLayoutMismatch, "the pool's journal " + why);
}

Status CheckHeader(const jf::Header& h, const JournalGeometry& expected,
                   std::uint64_t journal_bytes) {
  if (h.magic != jf::kMagic || h.version != jf::kVersion) {
    return Refuse("is not a journal of this version");
  }
  if (h.segment_device != expected.segment_device || h.segment_inode != expected.segment_inode) {
    return Refuse("describes another segment of the same name (a cold start replaced it)");
  }
  const store::PoolGeometry found{h.pool_bytes, h.align_bytes, h.page_bytes, h.slab_target_bytes};
  if (const std::string differs = store::PoolGeometryMismatch(expected.pool, found, "in the journal");
      !differs.empty()) {
    return Refuse("was written with another pool geometry: " + differs);
  }
  const jf::Parts parts = jf::PartsFor(h.pool_bytes / h.page_bytes, h.record_capacity);
  if (h.record_capacity != h.pool_bytes / h.align_bytes || parts.file_bytes != journal_bytes ||
      h.records_used > h.record_capacity || h.namespace_bytes > jf::kNamespaceBytes ||
      h.ready_bytes > h.pool_bytes) {
    return Refuse("is malformed (its sizes contradict each other)");
  }
  return Status::Ok();
}

// Namespace entries by their offset; a malformed entry ends the area.
std::unordered_map<std::uint32_t, ObjectKey> ReadNamespaces(std::span<const std::byte> area) {
  std::unordered_map<std::uint32_t, ObjectKey> out;
  std::uint64_t at = 0;
  // `at` may pass the end: an entry's padding is not checked against it.
  while (at <= area.size() && area.size() - at >= sizeof(std::uint32_t)) {
    const auto length = CopyAt<std::uint32_t>(area, at);
    if (length > jf::kMaxNamespaceBody || length > area.size() - at - sizeof(std::uint32_t)) break;
    auto key = DecodeKeyNamespace(area.subspan(at + sizeof(std::uint32_t), length));
    if (key.ok()) out.emplace(static_cast<std::uint32_t>(at), std::move(key).value());
    at += jf::RoundUp(sizeof(std::uint32_t) + length, 8);
  }
  return out;
}

// Recorded slabs that lie in ready pages without overlapping an earlier one,
// by first page.
std::map<std::uint64_t, alloc::SlabRecord> ReadSlabs(std::span<const std::byte> journal,
                                                     const jf::Header& h) {
  std::map<std::uint64_t, alloc::SlabRecord> out;
  const std::uint64_t pages = h.pool_bytes / h.page_bytes;
  const std::uint64_t ready_pages = h.ready_bytes / h.page_bytes;
  const jf::Parts parts = jf::PartsFor(pages, h.record_capacity);
  std::uint64_t covered_to = 0;
  for (std::uint64_t page = 0; page < ready_pages; ++page) {
    const auto entry = CopyAt<jf::SlabEntry>(journal, parts.slabs + page * sizeof(jf::SlabEntry));
    if (entry.object_bytes == 0 || page < covered_to) continue;
    if (entry.object_bytes % h.align_bytes != 0 || entry.num_pages == 0 ||
        entry.num_pages > ready_pages - page ||
        entry.num_pages * h.page_bytes < entry.object_bytes) {
      continue;
    }
    out.emplace(page, alloc::SlabRecord{page, entry.num_pages, entry.object_bytes});
    covered_to = page + entry.num_pages;
  }
  return out;
}

struct Candidate {
  std::uint64_t sequence = 0;
  jf::RecordState state = jf::kFree;
  jf::Record record{};
  std::uint64_t slot_bytes = 0;
  bool verified = false;
};

// Whether `offset` starts a slot of a recorded slab whose objects are `aligned` bytes.
bool StartsSlot(const std::map<std::uint64_t, alloc::SlabRecord>& slabs, std::uint64_t page_bytes,
                std::uint64_t offset, std::uint64_t aligned) {
  auto it = slabs.upper_bound(offset / page_bytes);
  if (it == slabs.begin()) return false;
  const alloc::SlabRecord& slab = std::prev(it)->second;
  const std::uint64_t start = slab.first_page * page_bytes;
  const std::uint64_t slots = slab.num_pages * page_bytes / slab.object_bytes;
  return slab.object_bytes == aligned && (offset - start) % aligned == 0 &&
         (offset - start) / aligned < slots;
}

}  // namespace

Result<RecoveryPlan> PlanRecovery(std::span<const std::byte> journal,
                                  std::span<const std::byte> pool, const JournalGeometry& expected,
                                  unsigned threads) {
  if (journal.size() < jf::kPartAlign) return Refuse("is truncated");
  const auto h = CopyAt<jf::Header>(journal, 0);
  LMC_RETURN_IF_ERROR(CheckHeader(h, expected, journal.size()));
  if (pool.size() != h.pool_bytes) return Refuse("describes a pool of another size");
  const jf::Parts parts = jf::PartsFor(h.pool_bytes / h.page_bytes, h.record_capacity);
  const auto namespaces = ReadNamespaces(journal.subspan(parts.namespaces, h.namespace_bytes));
  const auto slabs = ReadSlabs(journal, h);

  RecoveryPlan plan;
  plan.image.ready_bytes = h.ready_bytes / h.page_bytes * h.page_bytes;
  RecoveryReport& report = plan.report;
  // The newest record of each slot.
  std::unordered_map<std::uint64_t, Candidate> by_slot;
  for (std::uint64_t i = 0; i < h.records_used; ++i) {
    Candidate c;
    c.record = CopyAt<jf::Record>(journal, parts.records + i * sizeof(jf::Record));
    c.state = static_cast<jf::RecordState>(c.record.state & 3);
    c.sequence = c.record.state >> jf::kStateBits;
    if (c.state == jf::kFree) continue;
    report.records += 1;
    const jf::Record& r = c.record;
    const std::uint64_t aligned = jf::RoundUp(std::max<std::uint64_t>(r.size, 1), h.align_bytes);
    if (r.size == 0 || r.offset > h.pool_bytes || r.size > h.pool_bytes - r.offset ||
        !StartsSlot(slabs, h.page_bytes, r.offset, aligned)) {
      report.outside_slabs += 1;
      continue;
    }
    c.slot_bytes = aligned;
    auto [it, fresh] = by_slot.try_emplace(r.offset, c);
    if (!fresh) {
      report.superseded += 1;
      if (c.sequence > it->second.sequence) it->second = c;
    }
  }

  std::vector<Candidate*> sealed;
  for (auto& [offset, c] : by_slot) {
    if (c.state == jf::kSealed) sealed.push_back(&c);
  }
  ParallelFor(sealed.size(), 64, threads, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const jf::Record& r = sealed[i]->record;
      sealed[i]->verified = XXH3_64bits(pool.data() + r.offset, r.size) == r.checksum;
    }
  });

  // Keys named twice: the newest verified record serves, the others are held.
  std::vector<Candidate*> order;
  order.reserve(by_slot.size());
  for (auto& [offset, c] : by_slot) order.push_back(&c);
  std::sort(order.begin(), order.end(),
            [](const Candidate* a, const Candidate* b) { return a->sequence > b->sequence; });
  std::unordered_map<ObjectKey, bool, ObjectKeyHash> served;
  auto hold = [&](const Candidate& c) {
    // A slot the dead server itself held since an earlier recovery keeps
    // that hold's end (the table bounds it by a write TTL from now).
    const TimeMs until = c.state == jf::kLent ? c.record.held_until_ms : 0;
    plan.image.table.held.push_back({c.record.offset, c.record.size, std::max<TimeMs>(until, 0)});
    report.held_slots += 1;
    report.held_bytes += c.slot_bytes;
  };
  for (Candidate* c : order) {
    if (c->state == jf::kLent) {
      report.staged += 1;
    } else if (c->state == jf::kCommitted) {
      report.unsealed += 1;
    } else if (!c->verified) {
      report.checksum_mismatches += 1;
    } else if (auto ns = namespaces.find(c->record.key_namespace); ns == namespaces.end()) {
      report.undecodable += 1;
    } else {
      ObjectKey key = ns->second;
      std::memcpy(key.chunk_hash.data(), c->record.chunk_hash, key.chunk_hash.size());
      if (served.emplace(key, true).second) {
        plan.image.table.resident.push_back(
            {std::move(key), c->record.offset, c->record.size, false, c->record.checksum});
        report.objects += 1;
        report.bytes += c->slot_bytes;
        continue;
      }
      report.superseded += 1;
    }
    hold(*c);
  }
  // Newest first above; the image lists residents oldest first.
  std::reverse(plan.image.table.resident.begin(), plan.image.table.resident.end());
  for (const auto& [page, slab] : slabs) plan.image.slabs.push_back(slab);
  return plan;
}

Result<std::unique_ptr<store::L1Cache>> RecoverPool(const store::L1Config& config,
                                                    const Clock* clock, RecoveryReport* report) {
  LMC_ASSIGN_OR_RETURN(auto segment, shm::ShmSegment::Reopen(config.shm_name, config.size_bytes));
  LMC_ASSIGN_OR_RETURN(const JournalFile journal, JournalFile::Open(config.shm_name));
  LMC_ASSIGN_OR_RETURN(const JournalGeometry geometry,
                       JournalGeometryOf(segment->fd(), store::GeometryOf(config)));
  LMC_ASSIGN_OR_RETURN(RecoveryPlan plan, PlanRecovery(journal.bytes(), segment->bytes(), geometry,
                                                       config.prefault_threads));
  *report = plan.report;
  store::AdoptionReport adopted;
  auto cache = store::L1Cache::Adopt(config, clock, std::move(segment), plan.image, &adopted);
  // What the table holds now: a hold an earlier recovery began and that has
  // ended by now was freed instead.
  report->held_slots = adopted.held_slots;
  report->held_bytes = adopted.held_bytes;
  report->holds_ended = adopted.holds_ended;
  return cache;
}

Result<JournalFile> JournalFile::Open(const std::string& pool_name) {
  const std::string name = JournalName(pool_name);
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0));
  if (!fd.valid()) {
    const ErrorCode code = errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError;
    return Status(code, "cannot open the journal " + name + ": " + std::strerror(errno));
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || info.st_size <= 0) {
    return Status(ErrorCode::kIoError, "the journal " + name + " is empty or unreadable");
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return Status(ErrorCode::kIoError,
                  "cannot map the journal " + name + ": " + std::strerror(errno));
  }
  return JournalFile(std::move(fd), static_cast<const std::byte*>(base), size);
}

JournalFile::JournalFile(JournalFile&& other) noexcept
    : fd_(std::move(other.fd_)), base_(other.base_), size_(other.size_) {
  other.base_ = nullptr;
  other.size_ = 0;
}

JournalFile::~JournalFile() {
  if (base_ != nullptr) munmap(const_cast<std::byte*>(base_), size_);
}

}  // namespace lmcache::restart
