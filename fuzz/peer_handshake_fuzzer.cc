// libFuzzer target: what a peer sends in the P2P handshake and its directory
// feed, untrusted input from another server. The first byte picks the
// decoder: 0, a UCX descriptor (fleet/ucx_descriptor.h); 1, a server_info
// reply carrying the handshake's map (fleet/peer_info.h); 2, a p2p_hello
// frame (PeerHello); 3, a p2p_chunk_events page; 4, a p2p_chunk_listing page
// (fleet/chunk_feed_codec.h).
// Beyond "no crash, no sanitizer report": a descriptor that parses has a
// bounded address and a pool, and re-encodes to exactly the bytes it came
// from; a handshake or hello that parses has every field within its bounds,
// and a hello reads back the same from its own encoding; a page or listing
// that parses is within the limits, its records numbered consecutively, and
// reads back the same from its own encoding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fleet/chunk_feed_codec.h"
#include "fleet/peer_info.h"
#include "fleet/ucx_descriptor.h"

namespace {

void Descriptor(std::string_view bytes) {
  auto parsed = lmcache::fleet::UcxDescriptor::Parse(bytes);
  if (!parsed.ok()) return;
  if (parsed->worker_address.empty() || parsed->worker_address.size() > 64 * 1024 ||
      parsed->size == 0 || parsed->Encode() != bytes) {
    std::abort();
  }
}

void Handshake(std::string_view bytes) {
  auto info = lmcache::fleet::PeerInfo::FromServerInfo(bytes);
  if (!info.ok()) return;
  if (info->chunk_size <= 0 || info->none_hash.size() != 32 || info->boot_id.size() > 1024 ||
      info->advertise_url.size() > 1024 || info->data_channel.size == 0 ||
      info->data_channel.worker_address.empty() || info->model_chunk_sizes.size() > 1024) {
    std::abort();
  }
  for (const auto& [model, size] : info->model_chunk_sizes) {
    if (model.empty() || size < 1 || size > lmcache::store::kMaxChunkSize) std::abort();
  }
  // What membership makes of it: the per-model agreement, bounded by its input.
  const lmcache::fleet::ChunkAgreement chunks{lmcache::store::ChunkSizes(256), info->chunk_sizes()};
  (void)chunks.AgreesOnAny();
  (void)chunks.Differences();
}

void Hello(std::string_view bytes) {
  auto hello = lmcache::fleet::PeerHello::Decode(bytes);
  if (!hello.ok()) return;
  if (hello->advertise_url.empty() || hello->boot_id.empty() ||
      hello->advertise_url.size() > 1024 || hello->boot_id.size() > 1024) {
    std::abort();
  }
  auto again = lmcache::fleet::PeerHello::Decode(hello->Encode());
  if (!again.ok() || again->advertise_url != hello->advertise_url ||
      again->boot_id != hello->boot_id) {
    std::abort();
  }
}

void ChunkPage(std::string_view bytes) {
  const lmcache::fleet::ChunkFeedLimits limits;
  auto page = lmcache::fleet::DecodeChunkPage(bytes, limits);
  if (!page.ok()) return;
  std::size_t chunks = 0;
  for (std::size_t i = 0; i < page->records.size(); ++i) {
    chunks += page->records[i].chunks.size();
    if (i > 0 && page->records[i].seq != page->records[i - 1].seq + 1) std::abort();
  }
  if (page->records.size() > limits.max_records || chunks > limits.max_chunks ||
      page->incarnation == 0) {
    std::abort();
  }
  auto again = lmcache::fleet::DecodeChunkPage(lmcache::fleet::EncodeChunkPage(*page), limits);
  if (!again.ok() || !(*again == *page)) std::abort();
}

void ChunkListing(std::string_view bytes) {
  const lmcache::fleet::ChunkFeedLimits limits;
  auto listing = lmcache::fleet::DecodeChunkListing(bytes, limits);
  if (!listing.ok()) return;
  if (listing->chunks.size() > limits.max_chunks || listing->next.size() > limits.max_next_bytes ||
      listing->incarnation == 0) {
    std::abort();
  }
  auto again =
      lmcache::fleet::DecodeChunkListing(lmcache::fleet::EncodeChunkListing(*listing), limits);
  if (!again.ok() || !(*again == *listing)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: Descriptor(bytes); break;
    case 1: Handshake(bytes); break;
    case 2: Hello(bytes); break;
    case 3: ChunkPage(bytes); break;
    default: ChunkListing(bytes); break;
  }
  return 0;
}
