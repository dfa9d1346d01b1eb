#include "restart/handover_codec.h"

#include <cstring>

#include "common/byte_codec.h"

namespace lmcache::restart {
namespace {

void PutGeometry(ByteWriter& w, const TakeoverGeometry& g) {
  w.PutString(g.shm_name);
  w.Put(g.pool.pool_bytes);
  w.Put(g.pool.align_bytes);
  w.Put(g.pool.page_bytes);
  w.Put(g.pool.slab_target_bytes);
  w.Put(g.chunk_sizes.default_size());
}

// The models' own chunk sizes follow the hello's last field, only when
// there are any: a hello without them is the one the previous version
// sends and reads.
void PutModelChunkSizes(ByteWriter& w, const store::ChunkSizes& sizes) {
  if (sizes.overrides().empty()) return;
  w.Put(static_cast<std::uint64_t>(sizes.overrides().size()));
  for (const auto& [model, size] : sizes.overrides()) {
    w.PutString(model);
    w.Put(size);
  }
}

// One encoding per hello, as PutModelChunkSizes writes it: a tail only with
// models in it, the models in increasing order (so each once).
Status GetModelChunkSizes(ByteReader& r, store::ChunkSizes* sizes) {
  if (r.AtEnd()) return Status::Ok();
  std::uint64_t count = 0;
  LMC_RETURN_IF_ERROR(r.GetCount(&count, sizeof(std::uint32_t) + sizeof(std::int64_t),
                                 "geometry.model_chunk_sizes"));
  if (count == 0) return r.Bad("geometry.model_chunk_sizes", "is present with no model");
  store::ChunkSizes::Overrides overrides;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::string model;
    std::int64_t size = 0;
    LMC_RETURN_IF_ERROR(r.GetString(&model, "geometry.model_chunk_sizes"));
    LMC_RETURN_IF_ERROR(r.Get(&size, "geometry.model_chunk_sizes"));
    if (Status valid = store::CheckModelChunkSize(model, size); !valid.ok()) {
      return r.Bad("geometry.model_chunk_sizes", valid.message());
    }
    if (!overrides.empty() && model <= overrides.rbegin()->first) {
      return r.Bad("geometry.model_chunk_sizes", "is not in increasing order of models");
    }
    overrides.emplace(std::move(model), size);
  }
  *sizes = store::ChunkSizes(sizes->default_size(), std::move(overrides));
  return Status::Ok();
}

Status GetGeometry(ByteReader& r, TakeoverGeometry* g) {
  LMC_RETURN_IF_ERROR(r.GetString(&g->shm_name, "geometry.shm_name"));
  LMC_RETURN_IF_ERROR(r.Get(&g->pool.pool_bytes, "geometry.size_bytes"));
  LMC_RETURN_IF_ERROR(r.Get(&g->pool.align_bytes, "geometry.align_bytes"));
  LMC_RETURN_IF_ERROR(r.Get(&g->pool.page_bytes, "geometry.page_bytes"));
  LMC_RETURN_IF_ERROR(r.Get(&g->pool.slab_target_bytes, "geometry.slab_target_bytes"));
  std::int64_t chunk_size = 0;
  LMC_RETURN_IF_ERROR(r.Get(&chunk_size, "geometry.chunk_size"));
  g->chunk_sizes = store::ChunkSizes(chunk_size);
  return Status::Ok();
}

void PutKey(ByteWriter& w, const store::ObjectKey& key) {
  w.PutString(std::string_view(reinterpret_cast<const char*>(key.chunk_hash.data()),
                               key.chunk_hash.size()));
  w.PutString(key.model_name);
  w.Put(key.kv_rank);
  w.Put(key.object_group_id);
  w.PutString(key.cache_salt);
  w.Put(key.layout_namespace);
  w.PutString(key.tags);
}

Status GetKey(ByteReader& r, store::ObjectKey* key) {
  std::string hash;
  LMC_RETURN_IF_ERROR(r.GetString(&hash, "object.chunk_hash"));
  if (hash.size() != key->chunk_hash.size()) return r.Bad("object.chunk_hash", "is not 32 bytes");
  std::memcpy(key->chunk_hash.data(), hash.data(), hash.size());
  LMC_RETURN_IF_ERROR(r.GetString(&key->model_name, "object.model_name"));
  LMC_RETURN_IF_ERROR(r.Get(&key->kv_rank, "object.kv_rank"));
  LMC_RETURN_IF_ERROR(r.Get(&key->object_group_id, "object.object_group_id"));
  LMC_RETURN_IF_ERROR(r.GetString(&key->cache_salt, "object.cache_salt"));
  LMC_RETURN_IF_ERROR(r.Get(&key->layout_namespace, "object.layout_namespace"));
  return r.GetString(&key->tags, "object.tags");
}

void PutLayout(ByteWriter& w, const worker::ChunkLayout& l) {
  w.Put(l.num_layers);
  w.Put(l.hidden_dim);
  w.Put(l.chunk_size);
  w.PutString(l.dtype);
  w.Put(static_cast<std::uint8_t>(l.use_mla));
  w.PutInts(l.shape);
  w.Put(static_cast<std::uint64_t>(l.parts.size()));
  for (const worker::ObjectPart& part : l.parts) {
    w.PutInts(part.shape);
    w.PutString(part.dtype);
  }
  w.Put(l.object_bytes);
  w.Put(l.object_namespace);
}

Status GetLayout(ByteReader& r, worker::ChunkLayout* l) {
  LMC_RETURN_IF_ERROR(r.Get(&l->num_layers, "layout.num_layers"));
  LMC_RETURN_IF_ERROR(r.Get(&l->hidden_dim, "layout.hidden_dim"));
  LMC_RETURN_IF_ERROR(r.Get(&l->chunk_size, "layout.chunk_size"));
  LMC_RETURN_IF_ERROR(r.GetString(&l->dtype, "layout.dtype"));
  LMC_RETURN_IF_ERROR(r.GetBool(&l->use_mla, "layout.use_mla"));
  LMC_RETURN_IF_ERROR(r.GetInts(&l->shape, "layout.shape"));
  std::uint64_t parts = 0;
  LMC_RETURN_IF_ERROR(r.GetCount(&parts, 8 + 4, "layout.parts"));
  l->parts.resize(parts);
  for (worker::ObjectPart& part : l->parts) {
    LMC_RETURN_IF_ERROR(r.GetInts(&part.shape, "layout.parts.shape"));
    LMC_RETURN_IF_ERROR(r.GetString(&part.dtype, "layout.parts.dtype"));
  }
  LMC_RETURN_IF_ERROR(r.Get(&l->object_bytes, "layout.object_bytes"));
  return r.Get(&l->object_namespace, "layout.object_namespace");
}

}  // namespace

std::string GeometryMismatch(const TakeoverGeometry& ours, const TakeoverGeometry& successor) {
  if (ours.shm_name != successor.shm_name) {
    return "the pool's name: " + ours.shm_name + " here, " + successor.shm_name +
           " in the successor";
  }
  if (std::string differs = store::PoolGeometryMismatch(ours.pool, successor.pool, "in the successor");
      !differs.empty()) {
    return differs;
  }
  if (ours.chunk_sizes != successor.chunk_sizes) {
    return "the chunk sizes (--chunk-size, --model-chunk-size): " + ours.chunk_sizes.Describe() +
           " here, " + successor.chunk_sizes.Describe() + " in the successor";
  }
  return "";
}

std::string EncodeHello(const TakeoverHello& hello) {
  ByteWriter w;
  w.Put(hello.version);
  PutGeometry(w, hello.geometry);
  w.Put(static_cast<std::uint8_t>(hello.cold_if_incompatible));
  PutModelChunkSizes(w, hello.geometry.chunk_sizes);
  return w.Take();
}

Result<TakeoverHello> DecodeHello(std::string_view bytes) {
  ByteReader r(bytes, "takeover hello");
  TakeoverHello hello;
  LMC_RETURN_IF_ERROR(r.Get(&hello.version, "version"));
  if (hello.version != kHandoverVersion) {
    return r.Bad("version", std::to_string(hello.version) + " is not this server's " +
                                std::to_string(kHandoverVersion));
  }
  LMC_RETURN_IF_ERROR(GetGeometry(r, &hello.geometry));
  LMC_RETURN_IF_ERROR(r.GetBool(&hello.cold_if_incompatible, "cold_if_incompatible"));
  LMC_RETURN_IF_ERROR(GetModelChunkSizes(r, &hello.geometry.chunk_sizes));
  LMC_RETURN_IF_ERROR(r.Finish());
  return hello;
}

std::string EncodeVerdict(const TakeoverVerdict& verdict) {
  ByteWriter w;
  w.Put(static_cast<std::uint8_t>(verdict.verdict));
  w.PutString(verdict.message);
  return w.Take();
}

Result<TakeoverVerdict> DecodeVerdict(std::string_view bytes) {
  ByteReader r(bytes, "takeover verdict");
  TakeoverVerdict verdict;
  std::uint8_t kind = 0;
  LMC_RETURN_IF_ERROR(r.Get(&kind, "verdict"));
  if (kind < 1 || kind > 3) return r.Bad("verdict", std::to_string(kind) + " is unknown");
  verdict.verdict = static_cast<Verdict>(kind);
  LMC_RETURN_IF_ERROR(r.GetString(&verdict.message, "message"));
  LMC_RETURN_IF_ERROR(r.Finish());
  return verdict;
}

std::string EncodeImage(const HandoverImage& image) {
  ByteWriter w;
  // About a hundred bytes per object (the key's strings are short): one
  // allocation for the whole image in the common case.
  w.Reserve(4096 + image.pool.slabs.size() * 24 + image.pool.table.resident.size() * 128 +
            image.pool.table.held.size() * 16);
  w.PutString(image.boot_id);
  w.PutString(image.shm_name);
  w.Put(image.pool.ready_bytes);
  w.Put(static_cast<std::uint64_t>(image.pool.slabs.size()));
  for (const alloc::SlabRecord& slab : image.pool.slabs) {
    w.Put(slab.first_page);
    w.Put(slab.num_pages);
    w.Put(slab.object_bytes);
  }
  w.Put(static_cast<std::uint64_t>(image.pool.table.resident.size()));
  for (const store::AdoptedObject& object : image.pool.table.resident) {
    PutKey(w, object.key);
    w.Put(object.offset);
    w.Put(object.size);
    w.Put(static_cast<std::uint8_t>(object.read_locked));
  }
  w.Put(static_cast<std::uint64_t>(image.pool.table.held.size()));
  for (const store::HeldSlot& slot : image.pool.table.held) {
    w.Put(slot.offset);
    w.Put(slot.size);
  }
  w.Put(static_cast<std::uint64_t>(image.registrations.size()));
  for (const worker::CarriedRegistration& reg : image.registrations) {
    w.Put(reg.instance_id);
    w.PutString(reg.model_name);
    w.Put(reg.world_size);
    PutLayout(w, reg.layout);
  }
  return w.Take();
}

Result<HandoverImage> DecodeImage(std::string_view bytes) {
  ByteReader r(bytes, "handover image");
  HandoverImage image;
  LMC_RETURN_IF_ERROR(r.GetString(&image.boot_id, "boot_id"));
  LMC_RETURN_IF_ERROR(r.GetString(&image.shm_name, "shm_name"));
  LMC_RETURN_IF_ERROR(r.Get(&image.pool.ready_bytes, "ready_bytes"));
  std::uint64_t count = 0;
  LMC_RETURN_IF_ERROR(r.GetCount(&count, 24, "slabs"));
  image.pool.slabs.resize(count);
  for (alloc::SlabRecord& slab : image.pool.slabs) {
    LMC_RETURN_IF_ERROR(r.Get(&slab.first_page, "slab.first_page"));
    LMC_RETURN_IF_ERROR(r.Get(&slab.num_pages, "slab.num_pages"));
    LMC_RETURN_IF_ERROR(r.Get(&slab.object_bytes, "slab.object_bytes"));
  }
  // A key is at least its five length or width fields and its hash.
  LMC_RETURN_IF_ERROR(r.GetCount(&count, 32 + 4 * 4 + 8 + 4 + 4 + 17, "resident"));
  image.pool.table.resident.resize(count);
  for (store::AdoptedObject& object : image.pool.table.resident) {
    LMC_RETURN_IF_ERROR(GetKey(r, &object.key));
    LMC_RETURN_IF_ERROR(r.Get(&object.offset, "object.offset"));
    LMC_RETURN_IF_ERROR(r.Get(&object.size, "object.size"));
    LMC_RETURN_IF_ERROR(r.GetBool(&object.read_locked, "object.read_locked"));
  }
  LMC_RETURN_IF_ERROR(r.GetCount(&count, 16, "held"));
  image.pool.table.held.resize(count);
  for (store::HeldSlot& slot : image.pool.table.held) {
    LMC_RETURN_IF_ERROR(r.Get(&slot.offset, "held.offset"));
    LMC_RETURN_IF_ERROR(r.Get(&slot.size, "held.size"));
  }
  LMC_RETURN_IF_ERROR(r.GetCount(&count, 8 + 4 + 8, "registrations"));
  image.registrations.resize(count);
  for (worker::CarriedRegistration& reg : image.registrations) {
    LMC_RETURN_IF_ERROR(r.Get(&reg.instance_id, "registration.instance_id"));
    LMC_RETURN_IF_ERROR(r.GetString(&reg.model_name, "registration.model_name"));
    LMC_RETURN_IF_ERROR(r.Get(&reg.world_size, "registration.world_size"));
    LMC_RETURN_IF_ERROR(GetLayout(r, &reg.layout));
  }
  LMC_RETURN_IF_ERROR(r.Finish());
  return image;
}

}  // namespace lmcache::restart
