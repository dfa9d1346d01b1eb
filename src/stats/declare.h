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
//   - the atomics that count them and the copy of those into the struct
//     (LMC_STATS_COUNTERS: every member; LMC_STATS_COUNTED: the kCounter
//     members, where the component measures its gauges when asked),
//   - the schema rows the exporters walk (LMC_STATS_ROWS).
// So a new counter is one line: it cannot reach the struct and miss the
// snapshot, or reach the snapshot and miss /metrics.
//
// Thread-safety: the generated counters are relaxed atomics, bumped from
// any thread; a snapshot is not a cut across them.
#pragma once

#include <atomic>
#include <span>

#include "stats/field.h"

#define LMC_STATS_NONE_(...)
#define LMC_STATS_MEMBER_(member, key, type, ...) type member{};
#define LMC_STATS_ATOMIC_(member, key, type, ...) std::atomic<type> member{};
#define LMC_STATS_LOAD_(member, ...) out->member = member.load(std::memory_order_relaxed);
#define LMC_STATS_ROW_(member, key, type, kind, ...)                                 \
  ::lmcache::stats::Row<Struct_>{                                                      \
      ::lmcache::stats::Field{key, ::lmcache::stats::Kind::kind, __VA_ARGS__},         \
      [](const Struct_& s) { return ::lmcache::stats::ValueOf(s.member); }},
#define LMC_STATS_DERIVED_ROW_(accessor, key, kind, ...)                             \
  ::lmcache::stats::Row<Struct_>{                                                      \
      ::lmcache::stats::Field{key, ::lmcache::stats::Kind::kind, __VA_ARGS__},         \
      [](const Struct_& s) { return ::lmcache::stats::ValueOf(s.accessor); }},

// Of a list whose gauges the component measures when asked: atomics and
// loads for its counters only.
#define LMC_STATS_COUNTER_ATOMIC_(member, key, type, kind, ...) \
  LMC_STATS_IF_COUNTER_##kind(std::atomic<type> member{};)
#define LMC_STATS_COUNTER_LOAD_(member, key, type, kind, ...) \
  LMC_STATS_IF_COUNTER_##kind(out->member = member.load(std::memory_order_relaxed);)
#define LMC_STATS_IF_COUNTER_kCounter(...) __VA_ARGS__
#define LMC_STATS_IF_COUNTER_kGauge(...)
#define LMC_STATS_IF_COUNTER_kHistogram(...)
#define LMC_STATS_IF_COUNTER_kText(...)

// The members of LIST, inside the struct that holds them.
#define LMC_STATS_MEMBERS(LIST) LIST(LMC_STATS_MEMBER_, LMC_STATS_NONE_)

// `struct NAME` of one atomic per member of LIST, with CopyTo(STRUCT*) filling
// those members of the struct (and no others).
#define LMC_STATS_COUNTERS(NAME, STRUCT, LIST)                                   \
  struct NAME {                                                                  \
    LIST(LMC_STATS_ATOMIC_, LMC_STATS_NONE_)                                     \
    void CopyTo(STRUCT* out) const { LIST(LMC_STATS_LOAD_, LMC_STATS_NONE_) }    \
  }

// `struct NAME` of one atomic per kCounter member of LIST, with CopyTo(STRUCT*)
// filling those: for a component that counts its counters and measures its
// gauges (queue depths, levels) when a snapshot is taken.
#define LMC_STATS_COUNTED(NAME, STRUCT, LIST)                                            \
  struct NAME {                                                                          \
    LIST(LMC_STATS_COUNTER_ATOMIC_, LMC_STATS_NONE_)                                     \
    void CopyTo(STRUCT* out) const { LIST(LMC_STATS_COUNTER_LOAD_, LMC_STATS_NONE_) }    \
  }

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
