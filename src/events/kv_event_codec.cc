#include "events/kv_event_codec.h"

#include "common/msgpack_codec.h"

namespace lmcache::events {
namespace {

std::string_view AsBytes(const store::ChunkHash& hash) {
  return {reinterpret_cast<const char*>(hash.data()), hash.size()};
}

void EncodeRecord(msgpk::Encoder& out, const KvEvent& event) {
  msgpk::MapWriter m;
  m.Field("seq").Uint(event.seq);
  m.Field("kind").Str(KindName(event.kind));
  m.Field("medium").Str(event.medium);
  m.Field("model_name").Str(event.model_name);
  msgpk::Encoder& hashes = m.Field("block_hashes").Array(static_cast<std::uint32_t>(event.block_hashes.size()));
  for (const store::ChunkHash& hash : event.block_hashes) hashes.Bin(AsBytes(hash));
  if (event.parent_block_hash) {
    m.Field("parent_block_hash").Bin(AsBytes(*event.parent_block_hash));
  } else {
    m.Field("parent_block_hash").Nil();
  }
  m.Field("token_ids").UintArray(event.token_ids());
  m.Field("block_size").Uint(event.block_size);
  m.Field("location").Str(event.location);
  m.Field("tenant").Str(event.tenant);
  out.Raw(m.Take());
}

void EncodeHash(msgpk::Encoder& out, const store::ChunkHash& hash, VllmHashFormat format) {
  if (format == VllmHashFormat::kBytes) {
    out.Bin(AsBytes(hash));
  } else {
    out.Uint(VllmIntHash(hash));
  }
}

void EncodeVllmHashes(msgpk::MapWriter& m, const KvEvent& event, VllmHashFormat format) {
  msgpk::Encoder& hashes = m.Field("block_hashes").Array(static_cast<std::uint32_t>(event.block_hashes.size()));
  for (const store::ChunkHash& hash : event.block_hashes) EncodeHash(hashes, hash, format);
}

void EncodeVllmEvent(msgpk::Encoder& out, const KvEvent& event, const VllmBatchOptions& options) {
  msgpk::MapWriter m;
  switch (event.kind) {
    case KvEventKind::kStored: {
      m.Field("type").Str("BlockStored");
      EncodeVllmHashes(m, event, options.hashes);
      msgpk::Encoder& parent = m.Field("parent_block_hash");
      if (event.parent_block_hash) {
        EncodeHash(parent, *event.parent_block_hash, options.hashes);
      } else {
        parent.Nil();
      }
      m.Field("token_ids").UintArray(event.token_ids());
      m.Field("block_size").Uint(event.block_size);
      m.Field("lora_id").Nil();
      m.Field("medium").Str(event.medium);
      m.Field("lora_name").Nil();
      if (!event.tenant.empty()) {
        // One entry per block (vLLM puts the cache salt there; we put its tenant name).
        msgpk::Encoder& extra = m.Field("extra_keys").Array(static_cast<std::uint32_t>(event.block_hashes.size()));
        for (std::size_t i = 0; i < event.block_hashes.size(); ++i) extra.Array(1).Str(event.tenant);
      }
      break;
    }
    case KvEventKind::kRemoved: {
      m.Field("type").Str("BlockRemoved");
      EncodeVllmHashes(m, event, options.hashes);
      m.Field("medium").Str(event.medium);
      break;
    }
    case KvEventKind::kCleared: m.Field("type").Str("AllBlocksCleared"); break;
  }
  out.Raw(m.Take());
}

}  // namespace

std::uint64_t VllmIntHash(const store::ChunkHash& hash) {
  std::uint64_t value = 0;
  for (std::size_t i = hash.size() - 8; i < hash.size(); ++i) value = (value << 8) | hash[i];
  return value;
}

std::string EncodeKvEventPage(const KvEventPage& page) {
  msgpk::MapWriter m;
  m.Field("enabled").Bool(page.enabled);
  m.Field("incarnation").Uint(page.incarnation);
  m.Field("next_cursor").Uint(page.next_cursor);
  m.Field("lost").Bool(page.lost);
  msgpk::Encoder& events = m.Field("events").Array(static_cast<std::uint32_t>(page.events.size()));
  for (const KvEvent& event : page.events) EncodeRecord(events, event);
  return m.Take();
}

std::string EncodeVllmBatch(std::span<const KvEvent* const> events, double timestamp,
                            const VllmBatchOptions& options) {
  msgpk::Encoder out;
  out.Array(3).Float(timestamp).Array(static_cast<std::uint32_t>(events.size()));
  for (const KvEvent* event : events) EncodeVllmEvent(out, *event, options);
  if (options.data_parallel_rank) {
    out.Int(*options.data_parallel_rank);
  } else {
    out.Nil();
  }
  return out.Take();
}

}  // namespace lmcache::events
