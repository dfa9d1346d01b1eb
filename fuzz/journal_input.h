// JournalInput: the format the journal fuzzer and its seed generator share.
//
// A journal (restart/pool_journal_format.h) of a fixed tiny pool: 256 KiB in
// pages of 16 KiB, objects aligned to 4 KiB, whose bytes are PoolByte(i).
// The input supplies what a dead server would have written:
//   byte 0      bit 0: replace the checksum of every sealed record by the
//               true one of its bytes, so the verified path is reached
//   bytes 1-24  the header's ready_bytes, records_used, namespace_bytes (u64 each)
//   then        the slab table (16 entries of 16 bytes), the first 512 bytes
//               of the namespace area, and the records (up to 64 of 72 bytes),
//               each part cut short where the input ends
// Thread-safety: plain functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "restart/pool_journal.h"
#include "restart/pool_journal_format.h"

namespace lmcache::fuzz {

inline constexpr std::uint64_t kJournalPoolBytes = 256 << 10;
inline const restart::JournalGeometry kJournalGeometry{
    {kJournalPoolBytes, 4 << 10, 16 << 10, 32 << 10}, 1, 2};
inline constexpr std::size_t kNamespacePrefix = 512;

inline std::byte PoolByte(std::size_t i) { return std::byte((i * 131 + (i >> 12)) & 0xff); }

inline std::vector<std::byte> JournalPool() {
  std::vector<std::byte> pool(kJournalPoolBytes);
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = PoolByte(i);
  return pool;
}

inline restart::journal_format::Parts JournalParts() {
  return restart::journal_format::PartsFor(kJournalPoolBytes / kJournalGeometry.pool.page_bytes,
                                         kJournalPoolBytes / kJournalGeometry.pool.align_bytes);
}

// The journal file an input describes (header geometry always valid), in
// `journal` (the whole file's size: only the parts an input reaches are
// cleared, so a mark within the namespace area is cut to the part an input
// can fill; one beyond the area stays, to be refused).
inline void JournalFromInput(std::span<const std::uint8_t> in, std::vector<std::byte>& journal) {
  namespace jf = restart::journal_format;
  const jf::Parts parts = JournalParts();
  journal.resize(parts.file_bytes);
  std::memset(journal.data(), 0, parts.namespaces + kNamespacePrefix);
  std::memset(journal.data() + parts.records, 0, parts.file_bytes - parts.records);
  jf::Header h{};
  h.magic = jf::kMagic;
  h.version = jf::kVersion;
  h.pool_bytes = kJournalGeometry.pool.pool_bytes;
  h.align_bytes = kJournalGeometry.pool.align_bytes;
  h.page_bytes = kJournalGeometry.pool.page_bytes;
  h.slab_target_bytes = kJournalGeometry.pool.slab_target_bytes;
  h.segment_device = kJournalGeometry.segment_device;
  h.segment_inode = kJournalGeometry.segment_inode;
  h.record_capacity = kJournalPoolBytes / kJournalGeometry.pool.align_bytes;
  std::size_t pos = 1;
  auto take = [&](void* to, std::size_t n) {
    const std::size_t k = pos < in.size() ? std::min(n, in.size() - pos) : 0;
    if (k > 0) std::memcpy(to, in.data() + pos, k);
    pos += n;
  };
  take(&h.ready_bytes, 8);
  take(&h.records_used, 8);
  take(&h.namespace_bytes, 8);
  if (h.namespace_bytes <= jf::kNamespaceBytes) {
    h.namespace_bytes = std::min<std::uint64_t>(h.namespace_bytes, kNamespacePrefix);
  }
  std::memcpy(journal.data(), &h, sizeof(h));
  const std::size_t pages = kJournalPoolBytes / kJournalGeometry.pool.page_bytes;
  take(journal.data() + parts.slabs, pages * sizeof(jf::SlabEntry));
  take(journal.data() + parts.namespaces, kNamespacePrefix);
  take(journal.data() + parts.records, h.record_capacity * sizeof(jf::Record));
}

// The input that reproduces `journal` (the seed generator's side).
inline std::string InputFromJournal(std::span<const std::byte> journal) {
  namespace jf = restart::journal_format;
  const jf::Parts parts = JournalParts();
  jf::Header h{};
  std::memcpy(&h, journal.data(), sizeof(h));
  std::string out(1, '\0');
  out.append(reinterpret_cast<const char*>(&h.ready_bytes), 8);
  out.append(reinterpret_cast<const char*>(&h.records_used), 8);
  out.append(reinterpret_cast<const char*>(&h.namespace_bytes), 8);
  const std::size_t pages = kJournalPoolBytes / kJournalGeometry.pool.page_bytes;
  out.append(reinterpret_cast<const char*>(journal.data() + parts.slabs),
             pages * sizeof(jf::SlabEntry));
  out.append(reinterpret_cast<const char*>(journal.data() + parts.namespaces), kNamespacePrefix);
  out.append(reinterpret_cast<const char*>(journal.data() + parts.records),
             h.records_used * sizeof(jf::Record));
  return out;
}

}  // namespace lmcache::fuzz
