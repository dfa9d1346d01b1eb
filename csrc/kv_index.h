// kv_index.h: the index math of the KV block copies between a paged KV cache
// and an L1 object, shared by the CUDA kernels (csrc/kv_copy.cu) and the host
// emulation (src/gpu/host_kv_copy.cc), so the emulation checks the very
// arithmetic the GPU runs. Everything here is __host__ __device__ and free of
// the standard library.
//
// A chunk copy moves `tokens` tokens of every layer and plane between
//   paged:  per layer, a base address; token t of the chunk lives in block
//           block_ids[t / block_size] at row t % block_size (spec 10.1), its
//           head h at PagedByte(geometry, plane, block, row, h), each axis
//           with its own byte stride (every KV format reduces to these);
//           a negative block id is a block the copy leaves alone (the
//           engine's null block on retrieve);
//   object: [planes, layers, chunk_tokens, heads * head_bytes] (spec 5.8),
//           one KV group's part of an L1 object.
// in units: one unit is one run of bytes contiguous on both sides (one head,
// or all heads of a token where the cache keeps them adjacent, as NHD does).
//
// Thread-safety: pure functions.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define LMC_HD __host__ __device__
#else
#define LMC_HD
#endif

namespace lmcache::kv {

// Where one layer's paged cache keeps a head of a token, in bytes.
struct PagedGeometry {
  int64_t planes;        // 2 (K then V) or 1 (MLA)
  int64_t num_blocks;
  int64_t block_size;    // tokens per block
  int64_t heads;         // KV heads (1 for MLA)
  int64_t head_bytes;    // one head of one token (MLA: the whole latent vector)
  int64_t plane_stride;  // bytes between K and V of one slot
  int64_t block_stride;
  int64_t token_stride;  // between rows of one block
  int64_t head_stride;   // between heads of one token
};

// One object: [planes, layers, chunk_tokens, heads * head_bytes].
struct ObjectGeometry {
  int64_t planes;
  int64_t layers;
  int64_t chunk_tokens;
  int64_t token_bytes;  // heads * head_bytes
};

// One chunk's copy: the first `tokens` tokens of the object; on scatter, the
// tokens before `skip_tokens` are left alone (APC-shared blocks, spec 10.3).
struct ChunkCopy {
  PagedGeometry paged;
  ObjectGeometry object;
  const int32_t* block_ids;  // the chunk's blocks, tokens / block_size rounded up
  int64_t tokens;
  int64_t skip_tokens;
};

// How many heads one unit covers: all of a token's when they are adjacent.
LMC_HD inline int64_t HeadsPerRun(const PagedGeometry& g) {
  return (g.heads == 1 || g.head_stride == g.head_bytes) ? g.heads : 1;
}
LMC_HD inline int64_t RunBytes(const PagedGeometry& g) { return HeadsPerRun(g) * g.head_bytes; }
LMC_HD inline int64_t RunsPerToken(const PagedGeometry& g) { return g.heads / HeadsPerRun(g); }

LMC_HD inline int64_t UnitCount(const ChunkCopy& c) {
  return c.object.planes * c.object.layers * c.tokens * RunsPerToken(c.paged);
}

LMC_HD inline int64_t PagedByte(const PagedGeometry& g, int64_t plane, int64_t block, int64_t row,
                                int64_t head) {
  return plane * g.plane_stride + block * g.block_stride + row * g.token_stride +
         head * g.head_stride;
}

LMC_HD inline int64_t ObjectByte(const ObjectGeometry& o, int64_t plane, int64_t layer,
                                 int64_t token, int64_t byte_in_token) {
  return ((plane * o.layers + layer) * o.chunk_tokens + token) * o.token_bytes + byte_in_token;
}

// The addresses of unit `u` (0 <= u < UnitCount): its layer, its byte offset
// from that layer's base, and its byte offset in the object. Units run token
// fastest within a layer and plane, so neighbouring units of one block are
// neighbours in memory on both sides.
struct UnitAddress {
  int64_t layer;
  int64_t token;
  int64_t block;  // negative: not copied
  int64_t paged;
  int64_t object;
};
LMC_HD inline UnitAddress Locate(const ChunkCopy& c, int64_t u) {
  const int64_t runs = RunsPerToken(c.paged);
  const int64_t run = u % runs;
  const int64_t token = (u / runs) % c.tokens;
  const int64_t layer = (u / runs / c.tokens) % c.object.layers;
  const int64_t plane = u / runs / c.tokens / c.object.layers;
  const int64_t block = c.block_ids[token / c.paged.block_size];
  const int64_t head = run * HeadsPerRun(c.paged);
  UnitAddress a;
  a.layer = layer;
  a.token = token;
  a.block = block;
  a.paged = PagedByte(c.paged, plane, block, token % c.paged.block_size, head);
  a.object = ObjectByte(c.object, plane, layer, token, head * c.paged.head_bytes);
  return a;
}

// Whether unit `a` is copied: not a skipped token (scatter), not a null block.
LMC_HD inline bool Copied(const ChunkCopy& c, const UnitAddress& a, bool gather) {
  return a.block >= 0 && (gather || a.token >= c.skip_tokens);
}

}  // namespace lmcache::kv
