// How a component declares its figures once. A figure list is an X-macro,
// written next to the component's code:
//
//   #define LMC_FLOW_STATS(X, D)
//     X(admitted_objects, "admitted_objects", std::uint64_t, kCounter,
//       "objects", "l1_write_total", "Objects admitted into L1 ...",
//       {"source", "client"}, stats::kEverywhere, {}, stats::kReference)
//     X(admitted_bytes, ...)
//
// (each line of the macro ending in a backslash)
//
// A list takes two macros: X for a member, D for a derived figure (a ratio,
// a sum, an element of an array: it has a row, and no member or counter of
// its own). An X entry is (member, exported key, C++ type, stats::Kind,
// unit, Prometheus family, help[, label, reach, histogram form, reference]),
// the tail being stats::Field's; a D entry is (accessor, key, kind, ...),
// the accessor read as `s.accessor` (a member function call, an element).
// From the one list the macros below make
//   - the stats struct's members (LMC_STATS_MEMBERS),
//   - the live counters (atomics; a LatencyHistogram for a histogram) and
//     the copy of those into the struct (LMC_STATS_COUNTERS: every member;
//     LMC_STATS_COUNTED: the counters and histograms, where the component
//     measures its gauges when asked; its AddTo adds instead of copying),
//   - the schema rows the exporters walk (LMC_STATS_ROWS),
//   - the sum of several structs of one list (LMC_STATS_SUM).
// So a new counter is one line: it cannot reach the struct and miss the
// snapshot, or reach the snapshot and miss /metrics. A Stats() that copies
// its atomics member by member is refused by tools/check_stats_copies.py
// (a ctest): what a component counts lives in one of these structs.
//
// Thread-safety: the generated counters are relaxed atomics, bumped from
// any thread; a snapshot is not a cut across them.
#pragma once

#include <atomic>
#include <cstddef>
#include <span>

#include "common/histogram.h"
#include "stats/field.h"

namespace lmcache::stats {

// What counts a figure of type T while the component runs: an atomic for a
// number, a LatencyHistogram for its snapshot; Load reads it.
template <class T>
struct Live {
  using type = std::atomic<T>;
};
template <>
struct Live<LatencyHistogram::Snapshot> {
  using type = LatencyHistogram;
};
template <class T>
using LiveOf = typename Live<T>::type;

template <class T>
T Load(const std::atomic<T>& counter) {
  return counter.load(std::memory_order_relaxed);
}
inline LatencyHistogram::Snapshot Load(const LatencyHistogram& histogram) {
  return histogram.Take();
}

// Adds what `live` counted to `out`.
template <class T>
void AddTo(T* out, const std::atomic<T>& live) {
  *out += live.load(std::memory_order_relaxed);
}
inline void AddTo(LatencyHistogram::Snapshot* out, const LatencyHistogram& live) {
  const LatencyHistogram::Snapshot taken = live.Take();
  for (std::size_t i = 0; i < out->buckets.size(); ++i) out->buckets[i] += taken.buckets[i];
  out->count += taken.count;
  out->sum_us += taken.sum_us;
}

}  // namespace lmcache::stats

#define LMC_STATS_NONE_(...)
#define LMC_STATS_MEMBER_(member, key, type, ...) type member{};
#define LMC_STATS_ATOMIC_(member, key, type, ...) ::lmcache::stats::LiveOf<type> member{};
#define LMC_STATS_LOAD_(member, ...) out->member = ::lmcache::stats::Load(member);
#define LMC_STATS_SUM_(member, ...) out->member += in.member;
#define LMC_STATS_ROW_(member, key, type, kind, ...)                                 \
  ::lmcache::stats::Row<Struct_>{                                                      \
      ::lmcache::stats::Field{key, ::lmcache::stats::Kind::kind, __VA_ARGS__},         \
      [](const Struct_& s) { return ::lmcache::stats::ValueOf(s.member); }},
#define LMC_STATS_DERIVED_ROW_(accessor, key, kind, ...)                             \
  ::lmcache::stats::Row<Struct_>{                                                      \
      ::lmcache::stats::Field{key, ::lmcache::stats::Kind::kind, __VA_ARGS__},         \
      [](const Struct_& s) { return ::lmcache::stats::ValueOf(s.accessor); }},

// Of a list whose gauges the component measures when asked: live counters
// and loads for what it accumulates only (its counters and histograms).
#define LMC_STATS_COUNTER_ATOMIC_(member, key, type, kind, ...) \
  LMC_STATS_IF_COUNTER_##kind(::lmcache::stats::LiveOf<type> member{};)
#define LMC_STATS_COUNTER_LOAD_(member, key, type, kind, ...) \
  LMC_STATS_IF_COUNTER_##kind(out->member = ::lmcache::stats::Load(member);)
#define LMC_STATS_COUNTER_ADD_(member, key, type, kind, ...) \
  LMC_STATS_IF_COUNTER_##kind(::lmcache::stats::AddTo(&out->member, member);)
#define LMC_STATS_IF_COUNTER_kCounter(...) __VA_ARGS__
#define LMC_STATS_IF_COUNTER_kGauge(...)
#define LMC_STATS_IF_COUNTER_kHistogram(...) __VA_ARGS__
#define LMC_STATS_IF_COUNTER_kText(...)

// The members of LIST, inside the struct that holds them.
#define LMC_STATS_MEMBERS(LIST) LIST(LMC_STATS_MEMBER_, LMC_STATS_NONE_)

// `struct NAME` of one live counter per member of LIST (an atomic; a
// LatencyHistogram for a histogram's snapshot), with CopyTo(STRUCT*) filling
// those members of the struct (and no others).
#define LMC_STATS_COUNTERS(NAME, STRUCT, LIST)                                   \
  struct NAME {                                                                  \
    LIST(LMC_STATS_ATOMIC_, LMC_STATS_NONE_)                                     \
    void CopyTo(STRUCT* out) const { LIST(LMC_STATS_LOAD_, LMC_STATS_NONE_) }    \
  }

// `struct NAME` of one live counter per kCounter and kHistogram member of
// LIST, with CopyTo(STRUCT*) filling those: for a component that counts its
// counters and measures its gauges (queue depths, levels) when a snapshot
// is taken.
// AddTo(STRUCT*) adds them instead: for a figure two components count
// (each its part), as a sum.
#define LMC_STATS_COUNTED(NAME, STRUCT, LIST)                                         \
  struct NAME {                                                                       \
    LIST(LMC_STATS_COUNTER_ATOMIC_, LMC_STATS_NONE_)                                  \
    void CopyTo(STRUCT* out) const { LIST(LMC_STATS_COUNTER_LOAD_, LMC_STATS_NONE_) } \
    void AddTo(STRUCT* out) const { LIST(LMC_STATS_COUNTER_ADD_, LMC_STATS_NONE_) }   \
  }

// Defines `void FUNCTION(STRUCT* out, const STRUCT& in)`, adding every
// member of LIST of `in` to `out` (a list of numbers only): the totals of
// several components of one kind.
#define LMC_STATS_SUM(FUNCTION, STRUCT, LIST) \
  inline void FUNCTION(STRUCT* out, const STRUCT& in) { LIST(LMC_STATS_SUM_, LMC_STATS_NONE_) }

// Defines `std::span<const stats::Row<STRUCT>> FUNCTION()`: LIST's rows, in
// list order, its derived entries among them (in a .cc; the header declares
// the function).
#define LMC_STATS_ROWS(FUNCTION, STRUCT, LIST)                                           \
  std::span<const ::lmcache::stats::Row<STRUCT>> FUNCTION() {                             \
    using Struct_ = STRUCT;                                                               \
    static const ::lmcache::stats::Row<Struct_> kRows[] = {                               \
        LIST(LMC_STATS_ROW_, LMC_STATS_DERIVED_ROW_)};                                    \
    return kRows;                                                                         \
  }
