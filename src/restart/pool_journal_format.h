// The byte layout of the crash-recovery journal (pool_journal.h), shared by
// its writer and by recovery's reader (pool_recovery.h). Not for use outside
// src/restart/pool_*.cc.
//
// The file, in order, each part starting on a 4 KiB boundary:
//   header       geometry, the segment's identity, how far pre-faulting got,
//                and the high-water marks of the two areas below
//   slab table   one SlabEntry per pool page; a live slab's entry sits at its
//                first page (object_bytes 0: no slab starts there)
//   namespaces   append-only: each entry a u32 body length and the body, every
//                entry padded to 8 bytes; an entry is named by its byte offset
//   records      one Record per slot lent to a writer or resident
// All integers are little-endian host order (the file never leaves the node).
//
// Thread-safety: plain layout; see pool_journal.h for who writes what.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lmcache::restart::journal_format {

inline constexpr std::uint64_t kMagic = 0x314c4e524a434d4cull;  // "LMCJRNL1"
// Version 2 added Record::held_until_ms; a version-1 journal is refused (a
// cold start: only the first crash after the upgrade loses the cache).
inline constexpr std::uint64_t kVersion = 2;
inline constexpr std::uint64_t kPartAlign = 4096;
// Sparse like the rest: a node's few models and tag sets take a few KiB, and
// the room is for per-tenant cache salts (about 60 bytes each: a million).
// Entries are never reclaimed; a key that finds the area full is not
// recorded (journal_unrecorded) and its object is not recoverable.
inline constexpr std::uint64_t kNamespaceBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxNamespaceBody = 16ull << 10;

struct Header {
  std::uint64_t magic;
  std::uint64_t version;
  std::uint64_t pool_bytes;
  std::uint64_t align_bytes;
  std::uint64_t page_bytes;
  std::uint64_t slab_target_bytes;
  std::uint64_t segment_device;
  std::uint64_t segment_inode;
  std::uint64_t record_capacity;
  std::uint64_t ready_bytes;      // pages below it may hold slabs
  std::uint64_t records_used;     // high-water mark of record indices
  std::uint64_t namespace_bytes;  // bytes of complete namespace entries
};

struct SlabEntry {
  std::uint64_t object_bytes;  // written last; 0 = no slab
  std::uint64_t num_pages;
};

// A record's state word: sequence << 2 | state. The sequence is new every
// time a slot is lent, so a checksum computed for one life of a record is never sealed
// into the next.
enum RecordState : std::uint64_t { kFree = 0, kLent = 1, kCommitted = 2, kSealed = 3 };
inline constexpr std::uint64_t kStateBits = 2;

struct Record {
  std::uint64_t state;  // written last, with release ordering
  std::uint64_t offset;
  std::uint64_t size;      // bytes the writer asked for
  std::uint64_t checksum;  // XXH3-64 of [offset, offset + size); valid when sealed
  std::uint32_t key_namespace;
  std::uint32_t reserved;
  std::uint8_t chunk_hash[32];
  // Lent only: a slot a recovery kept from reuse, until this time on the
  // host's CLOCK_MONOTONIC in ms (the table's SteadyClock, which every
  // process of the host shares). A later recovery holds it no longer than
  // that: without it, a server killed again within a write TTL held every
  // such slot for a whole new TTL, and repeated crashes shrank the pool.
  // 0: lent to a writer, or withdrawn; held a write TTL from the recovery.
  std::int64_t held_until_ms;
};

// The writer updates the words marked "written last" (and the header's
// marks) through std::atomic_ref, so the structs stay trivially copyable for
// the reader, which copies them out of a file nobody writes any more.
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);
static_assert(std::is_trivially_copyable_v<Header> && std::is_trivially_copyable_v<Record>);
static_assert(sizeof(Header) <= kPartAlign);
static_assert(sizeof(SlabEntry) == 16 && sizeof(Record) == 80);

inline constexpr std::uint64_t RoundUp(std::uint64_t n, std::uint64_t to) {
  return (n + to - 1) / to * to;
}

// Where each part starts, and the file's size, for a pool's geometry.
struct Parts {
  std::uint64_t slabs = 0;
  std::uint64_t namespaces = 0;
  std::uint64_t records = 0;
  std::uint64_t file_bytes = 0;
};
inline Parts PartsFor(std::uint64_t num_pages, std::uint64_t record_capacity) {
  Parts parts;
  parts.slabs = kPartAlign;
  parts.namespaces = parts.slabs + RoundUp(num_pages * sizeof(SlabEntry), kPartAlign);
  parts.records = parts.namespaces + kNamespaceBytes;
  parts.file_bytes = parts.records + RoundUp(record_capacity * sizeof(Record), kPartAlign);
  return parts;
}

}  // namespace lmcache::restart::journal_format
