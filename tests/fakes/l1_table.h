// L1Table: a real ObjectTable over heap memory (no shared memory), with
// helpers the L2 tests share: store an object with known bytes, read an
// object's bytes, and check that every lease and lock is gone.
// Thread-safety: the table is internally synchronised; the helpers are not.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "alloc/slab_allocator.h"
#include "fakes/aligned_buffer.h"
#include "fakes/fake_clock.h"
#include "store/eviction_policy.h"
#include "store/object_table.h"

namespace lmcache::testing {

// Deterministic bytes of object `seed`.
inline std::vector<std::byte> ObjectBytes(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> bytes(size);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = std::byte(static_cast<unsigned char>(x));
  }
  return bytes;
}

class L1Table {
 public:
  explicit L1Table(std::uint64_t pool_bytes, bool on_demand_eviction = true)
      : buffer_(pool_bytes) {
    alloc::SlabAllocatorConfig alloc_config;
    alloc_config.slab_target_bytes = 2 << 20;
    allocator_ = std::move(alloc::SlabAllocator::Create(buffer_.span(), alloc_config)).value();
    store::ObjectTableConfig config;
    config.on_demand_eviction = on_demand_eviction;
    table_ = std::make_unique<store::ObjectTable>(allocator_.get(), &lru_, &clock_, config);
  }

  store::ObjectTable& table() { return *table_; }
  alloc::SlabAllocator& allocator() { return *allocator_; }

  // Stores `key` with ObjectBytes(size, seed), as a client's write.
  void Store(const store::ObjectKey& key, std::size_t size, std::uint64_t seed) {
    auto lease = table_->ReserveWrite(std::span(&key, 1), size, store::Owner::Instance(1),
                                      store::AllocationMode::kAllOrNothing);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->reserved, 1u);
    const auto bytes = ObjectBytes(size, seed);
    std::memcpy(*allocator_->Resolve(lease->offsets[0], size), bytes.data(), size);
    ASSERT_EQ(table_->FinishWrite(lease->lease).admitted, 1u);
  }
  // The bytes of a resident object (empty when not resident).
  std::vector<std::byte> Read(const store::ObjectKey& key) const {
    auto info = table_->Find(key);
    if (!info || info->state != store::ObjectState::kResident) return {};
    const std::byte* p = *allocator_->Resolve(info->offset, info->size);
    return std::vector<std::byte>(p, p + info->size);
  }
  std::uint32_t Locks(const store::ObjectKey& key) const {
    auto info = table_->Find(key);
    return info ? info->read_locks : 0;
  }
  // No lease, lock or staged copy is left.
  void ExpectBalanced() const {
    const store::TableStats s = table_->Stats();
    EXPECT_EQ(s.read_leases, 0u);
    EXPECT_EQ(s.write_leases, 0u);
    EXPECT_EQ(s.read_locks, 0u);
    EXPECT_EQ(s.staging_objects, 0u);
    EXPECT_EQ(s.retired_objects, 0u);
  }

 private:
  AlignedBuffer buffer_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  FakeClock clock_;
  store::LruPolicy lru_;
  std::unique_ptr<store::ObjectTable> table_;
};

}  // namespace lmcache::testing
