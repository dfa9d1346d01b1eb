// The wire forms of the directory feed's two operations (ours, by name,
// served on the fleet endpoint; issue 43):
//   p2p_chunk_events(cursor: int, max_records: int) answers a ChunkPage
//     (chunk_log.h): {incarnation: uint, next_cursor: uint, lost: bool,
//     records: [[seq: uint, change: 0 stored | 1 removed | 2 cleared,
//     chunks: bin]]};
//   p2p_chunk_listing(after: bin, limit: int) answers a ChunkListing:
//     {incarnation, log_cursor, capacity_chunks, chunks: bin, next: bin}.
// Chunk ids travel as a bin of 8-byte little-endian words (8 bytes a chunk:
// the feed's bytes per second are the fleet's cost of a directory,
// docs/scaling.md). Maps are read by field name, unknown fields skipped.
//
// What a peer sends is untrusted: the decoders bound every count and length
// (ChunkFeedLimits) before keeping anything, refuse a chunks bin that is
// not whole words, an unknown change, and records that are not numbered
// consecutively; the feed checks the rest (incarnation, cursor).
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/chunk_log.h"
#include "lmcache/status.h"

namespace lmcache::fleet {

// One page of a listing of a peer's L1: its chunk ids, where the listing
// goes on (`next`, opaque; empty at its end), and, from when the listing
// began, the peer's log position and how many chunks its L1 may hold.
struct ChunkListing {
  std::uint64_t incarnation = 0;
  std::uint64_t log_cursor = 0;
  std::uint64_t capacity_chunks = 0;
  std::vector<ChunkId> chunks;
  std::string next;
  bool operator==(const ChunkListing&) const = default;
};

struct ChunkFeedLimits {
  std::size_t max_records = 4096;
  std::size_t max_chunks = 1u << 20;  // in one page, across its records (8 MiB)
  std::size_t max_next_bytes = 16u << 10;
};

std::string EncodeChunkPage(const ChunkPage& page);
Result<ChunkPage> DecodeChunkPage(std::string_view frame, const ChunkFeedLimits& limits = {});

std::string EncodeChunkListing(const ChunkListing& listing);
Result<ChunkListing> DecodeChunkListing(std::string_view frame, const ChunkFeedLimits& limits = {});

}  // namespace lmcache::fleet
