#include "fleet/chunk_feed_codec.h"

#include <cstring>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"

namespace lmcache::fleet {
namespace {

std::string PackIds(const std::vector<ChunkId>& ids) {
  std::string out(ids.size() * sizeof(ChunkId), '\0');
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());  // little-endian hosts only
  return out;
}

Result<std::vector<ChunkId>> UnpackIds(std::string_view bytes, std::string_view what,
                                       std::size_t* budget) {
  if (bytes.size() % sizeof(ChunkId) != 0) {
    return msgpk::Malformed(what, "is not a whole number of 8-byte chunk ids");
  }
  const std::size_t count = bytes.size() / sizeof(ChunkId);
  if (count > *budget) return Status(ErrorCode::kTooLarge, std::string(what) + ": too many chunks");
  *budget -= count;
  std::vector<ChunkId> ids(count);
  if (count > 0) std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

Result<ChunkRecord> ReadRecord(msgpk::MsgpackCursor& in, std::size_t* budget) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader("chunk record"));
  if (n != 3) return msgpk::Malformed("chunk record", "is not [seq, change, chunks]");
  ChunkRecord record;
  LMC_ASSIGN_OR_RETURN(record.seq, in.ReadUint("chunk record seq"));
  LMC_ASSIGN_OR_RETURN(const std::uint64_t change, in.ReadUint("chunk record change"));
  if (change > 2) return msgpk::Malformed("chunk record change", "is not 0, 1 or 2");
  record.change = static_cast<DirectoryChange>(change);
  LMC_ASSIGN_OR_RETURN(const std::string_view bytes, in.ReadBytes("chunk record chunks"));
  LMC_ASSIGN_OR_RETURN(record.chunks, UnpackIds(bytes, "chunk record chunks", budget));
  return record;
}

// Each field's bit in a decoder's `seen` (0: a field it skips): a field
// named twice (a second `records` would pass max_records) is refused.
std::uint32_t PageFieldBit(std::string_view name) {
  if (name == "incarnation") return 1;
  if (name == "next_cursor") return 2;
  if (name == "lost") return 4;
  if (name == "records") return 8;
  return 0;
}

std::uint32_t ListingFieldBit(std::string_view name) {
  if (name == "incarnation") return 1;
  if (name == "log_cursor") return 2;
  if (name == "capacity_chunks") return 4;
  if (name == "chunks") return 8;
  if (name == "next") return 16;
  return 0;
}

}  // namespace

std::string EncodeChunkPage(const ChunkPage& page) {
  msgpk::Encoder out;
  out.Map(4);
  out.Str("incarnation").Uint(page.incarnation);
  out.Str("next_cursor").Uint(page.next_cursor);
  out.Str("lost").Bool(page.lost);
  out.Str("records").Array(static_cast<std::uint32_t>(page.records.size()));
  for (const ChunkRecord& record : page.records) {
    out.Array(3).Uint(record.seq).Uint(static_cast<std::uint64_t>(record.change));
    out.Bin(PackIds(record.chunks));
  }
  return out.Take();
}

Result<ChunkPage> DecodeChunkPage(std::string_view frame, const ChunkFeedLimits& limits) {
  msgpk::MsgpackCursor in(frame);
  ChunkPage page;
  std::uint32_t seen = 0;
  std::size_t budget = limits.max_chunks;
  LMC_RETURN_IF_ERROR(in.ReadFields("chunk page", [&](std::string_view name) -> Result<bool> {
    if (const std::uint32_t bit = PageFieldBit(name); (seen & bit) != 0) {
      return msgpk::Malformed("chunk page", "names a field twice");
    }
    if (name == "incarnation") {
      LMC_ASSIGN_OR_RETURN(page.incarnation, in.ReadUint("chunk page incarnation"));
      seen |= 1;
    } else if (name == "next_cursor") {
      LMC_ASSIGN_OR_RETURN(page.next_cursor, in.ReadUint("chunk page next_cursor"));
      seen |= 2;
    } else if (name == "lost") {
      LMC_ASSIGN_OR_RETURN(page.lost, in.ReadBool("chunk page lost"));
      seen |= 4;
    } else if (name == "records") {
      LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader("chunk page records"));
      if (n > limits.max_records) {
        return Status(ErrorCode::kTooLarge,
                      "chunk page: more than " + std::to_string(limits.max_records) + " records");
      }
      page.records.reserve(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        LMC_ASSIGN_OR_RETURN(ChunkRecord record, ReadRecord(in, &budget));
        if (!page.records.empty() && record.seq != page.records.back().seq + 1) {
          return msgpk::Malformed("chunk page records", "are not numbered consecutively");
        }
        page.records.push_back(std::move(record));
      }
      seen |= 8;
    } else {
      return false;
    }
    return true;
  }));
  if (!in.AtEnd()) return msgpk::Malformed("chunk page", "is followed by more bytes");
  if (seen != 15) {
    return msgpk::Malformed("chunk page",
                            "lacks a field (incarnation, next_cursor, lost, records)");
  }
  if (page.incarnation == 0) return msgpk::Malformed("chunk page incarnation", "is 0");
  if (!page.records.empty() && page.next_cursor != page.records.back().seq) {
    return msgpk::Malformed("chunk page next_cursor", "is not its last record's");
  }
  return page;
}

std::string EncodeChunkListing(const ChunkListing& listing) {
  msgpk::Encoder out;
  out.Map(5);
  out.Str("incarnation").Uint(listing.incarnation);
  out.Str("log_cursor").Uint(listing.log_cursor);
  out.Str("capacity_chunks").Uint(listing.capacity_chunks);
  out.Str("chunks").Bin(PackIds(listing.chunks));
  out.Str("next").Bin(listing.next);
  return out.Take();
}

Result<ChunkListing> DecodeChunkListing(std::string_view frame, const ChunkFeedLimits& limits) {
  msgpk::MsgpackCursor in(frame);
  ChunkListing listing;
  std::uint32_t seen = 0;
  std::size_t budget = limits.max_chunks;
  LMC_RETURN_IF_ERROR(in.ReadFields("chunk listing", [&](std::string_view name) -> Result<bool> {
    if (const std::uint32_t bit = ListingFieldBit(name); (seen & bit) != 0) {
      return msgpk::Malformed("chunk listing", "names a field twice");
    }
    if (name == "incarnation") {
      LMC_ASSIGN_OR_RETURN(listing.incarnation, in.ReadUint("chunk listing incarnation"));
      seen |= 1;
    } else if (name == "log_cursor") {
      LMC_ASSIGN_OR_RETURN(listing.log_cursor, in.ReadUint("chunk listing log_cursor"));
      seen |= 2;
    } else if (name == "capacity_chunks") {
      LMC_ASSIGN_OR_RETURN(listing.capacity_chunks, in.ReadUint("chunk listing capacity_chunks"));
      seen |= 4;
    } else if (name == "chunks") {
      LMC_ASSIGN_OR_RETURN(const std::string_view bytes, in.ReadBytes("chunk listing chunks"));
      LMC_ASSIGN_OR_RETURN(listing.chunks, UnpackIds(bytes, "chunk listing chunks", &budget));
      seen |= 8;
    } else if (name == "next") {
      LMC_ASSIGN_OR_RETURN(const std::string_view next, in.ReadBytes("chunk listing next"));
      if (next.size() > limits.max_next_bytes) {
        return Status(ErrorCode::kTooLarge, "chunk listing next: longer than " +
                                                std::to_string(limits.max_next_bytes) + " bytes");
      }
      listing.next = std::string(next);
      seen |= 16;
    } else {
      return false;
    }
    return true;
  }));
  if (!in.AtEnd()) return msgpk::Malformed("chunk listing", "is followed by more bytes");
  if (seen != 31) {
    return msgpk::Malformed("chunk listing",
                            "lacks a field (incarnation, log_cursor, "
                            "capacity_chunks, chunks, next)");
  }
  if (listing.incarnation == 0) return msgpk::Malformed("chunk listing incarnation", "is 0");
  return listing;
}

}  // namespace lmcache::fleet
