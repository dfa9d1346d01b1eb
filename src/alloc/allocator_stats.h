// The allocator's figures: per size class, and of the whole pool (its
// usage, free space and calls), each declared once (stats/declare.h).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "stats/declare.h"

namespace lmcache::alloc {

// ClassStats's figures, each declared once (stats/declare.h).
#define LMC_SIZE_CLASS_STATS(X, D) \
  X(object_bytes, "object_bytes", std::uint64_t, kGauge, "bytes", "", \
      "The class's object size.", {}, stats::kElementLabel) \
  X(objects_per_slab, "objects_per_slab", std::uint64_t, kGauge, "objects", \
      "l1_size_class_objects_per_slab", "Objects one slab of the size class holds.") \
  X(slabs, "slabs", std::uint64_t, kGauge, "slabs", "l1_size_class_slabs", \
      "Slabs the size class holds.") \
  X(used_objects, "used_objects", std::uint64_t, kGauge, "objects", \
      "l1_size_class_used_objects", "Live objects in the size class.") \
  X(free_objects, "free_objects", std::uint64_t, kGauge, "objects", \
      "l1_size_class_free_objects", "Free slots inside the size class's slabs.")

struct ClassStats {
  LMC_STATS_MEMBERS(LMC_SIZE_CLASS_STATS)
};
std::span<const stats::Row<ClassStats>> SizeClassStatRows();

// AllocatorStats's figures, each declared once (stats/declare.h).
#define LMC_ALLOCATOR_STATS(X, D) \
  X(capacity_bytes, "capacity_bytes", std::uint64_t, kGauge, "bytes", "l1_capacity_bytes", \
      "L1 pool size.") \
  X(used_bytes, "used_bytes", std::uint64_t, kGauge, "bytes", "l1_memory_usage_bytes", \
      "L1 bytes held by objects (resident, staging, retired).", {}, stats::kEverywhere, {}, \
      stats::kReference) \
  D(UsageRatio(), "usage_ratio", kGauge, "ratio", "l1_usage_ratio", \
      "L1 bytes in use over the pool size.", {}, stats::kPrometheusOnly, {}, \
      stats::kReference) \
  X(largest_allocatable_bytes, "largest_allocatable_bytes", std::uint64_t, kGauge, "bytes", \
      "l1_largest_allocatable_bytes", "The largest object one allocation is sure to get now " \
      "(a free page run, or a free slot of an existing size class).") \
  X(largest_free_run_bytes, "largest_free_run_bytes", std::uint64_t, kGauge, "bytes", \
      "l1_largest_free_run_bytes", "The longest run of free pages in no slab.") \
  X(pool_free_bytes, "pool_free_bytes", std::uint64_t, kGauge, "bytes", "l1_pool_free_bytes", \
      "Usable pages in no slab.") \
  X(slab_slack_bytes, "slab_slack_bytes", std::uint64_t, kGauge, "bytes", \
      "l1_slab_slack_bytes", "Free slots and tails inside slabs.") \
  X(fragmentation, "fragmentation", double, kGauge, "ratio", "l1_fragmentation_ratio", \
      "1 - largest free page run / free pages.") \
  X(unready_bytes, "unready_bytes", std::uint64_t, kGauge, "bytes", "l1_unready_bytes", \
      "Pool bytes not yet usable (pre-faulting at startup).") \
  X(allocations, "allocations", std::uint64_t, kCounter, "allocations", \
      "l1_allocations_total", "Allocations made.") \
  X(frees, "frees", std::uint64_t, kCounter, "allocations", "l1_frees_total", \
      "Allocations freed.") \
  X(failed_allocations, "failed_allocations", std::uint64_t, kCounter, "allocations", \
      "l1_allocation_failure_total", "Allocations that found no memory.", {}, \
      stats::kEverywhere, {}, stats::kReference)

struct AllocatorStats {
  LMC_STATS_MEMBERS(LMC_ALLOCATOR_STATS)
  double UsageRatio() const;  // used over capacity (0 for no pool)
  std::uint64_t free_bytes = 0;        // capacity - used
  std::vector<ClassStats> classes;  // ordered by object size
};
std::span<const stats::Row<AllocatorStats>> AllocatorStatRows();

}  // namespace lmcache::alloc
