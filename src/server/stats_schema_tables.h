// The stats schema's field tables (stats_schema.cc walks them), and what
// their entries are made of. Internal to the server layer: the exporters see
// only stats_schema.h.
//
// Thread-safety: immutable tables.
#pragma once

#include <span>

#include "server/stats_schema.h"

namespace lmcache::server::stats_tables {

// One field and how to read it from the struct its group walks.
template <class T>
struct Entry {
  StatField field;
  StatValue (*get)(const T&);
};

inline StatValue U(std::uint64_t v) { return StatValue(std::in_place_type<std::uint64_t>, v); }
inline StatValue F(double v) { return StatValue(std::in_place_type<double>, v); }
inline StatValue B(bool v) { return StatValue(std::in_place_type<bool>, v); }
inline StatValue T(std::string_view v) { return StatValue(std::in_place_type<std::string_view>, v); }
inline StatValue H(const LatencyHistogram::Snapshot& h) { return StatValue(&h); }

using S = StatsSnapshot;
using K = StatKind;
inline constexpr StatReach kDerived = StatReach::kPrometheusOnly;
inline constexpr StatReach kElementLabel = StatReach::kElementLabel;
inline constexpr StatReach kBoth = StatReach::kEverywhere;
using ClassRow = alloc::ClassStats;
using OperationRow = OperationStats;
using ParkedRow = ParkedOpStats;
using AdapterRow = tier::L2AdapterStats;
using L2 = tier::L2Stats;

// stats_fields_l1.cc
extern const std::span<const Entry<S>> kProcess, kL1, kEviction;
extern const std::span<const Entry<ClassRow>> kSizeClass;
// stats_fields_service.cc
extern const std::span<const Entry<OperationRow>> kOperation;
extern const std::span<const Entry<S>> kTransportErrors, kRouter, kInstances, kReleased, kSessions,
    kParked, kLookup, kBlockReports, kGpu, kKvEvents, kRestart;
extern const std::span<const Entry<ParkedRow>> kParkedOperation;
// stats_fields_l2.cc
extern const std::span<const Entry<AdapterRow>> kAdapter;
extern const std::span<const Entry<L2>> kL2Store, kPrefetch;

}  // namespace lmcache::server::stats_tables
