// AlignedBuffer: a heap span for allocator tests (the allocator never needs shm).
// Thread-safety: plain memory; not synchronised.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>

namespace lmcache::testing {

class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t size, std::size_t align = 1 << 21)
      : size_(size), data_(static_cast<std::byte*>(std::aligned_alloc(align, size))) {}
  std::span<std::byte> span() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::size_t size_;
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace lmcache::testing
