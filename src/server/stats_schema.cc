#include "server/stats_schema.h"

#include <span>
#include <string>

#include "server/stats_schema_tables.h"

namespace lmcache::server {
namespace {

using namespace stats_tables;  // NOLINT: the tables and their row types

constexpr StatGroup kL1Group{"l1", GroupForm::kMap, "", "L1 pool"};
constexpr StatGroup kSizeClassGroup{"size_classes", GroupForm::kArray, "object_bytes",
                                    "L1 size classes (one per object size)"};
constexpr StatGroup kEvictionGroup{"eviction", GroupForm::kMap, "", "L1 eviction"};
constexpr StatGroup kOperationsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                     "Requests, by operation (those called at least once)"};
constexpr StatGroup kRouterGroup{"router", GroupForm::kMap, "", "Transport"};
constexpr StatGroup kInstancesGroup{"instances", GroupForm::kMap, "", "Worker instances"};
constexpr StatGroup kReleasedGroup{"released", GroupForm::kMap, "", "Registrations ended"};
constexpr StatGroup kParkedGroup{"parked", GroupForm::kMap, "", "Parked requests (deferred replies)"};
constexpr StatGroup kParkedOpsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                    "Parked requests, by operation"};
constexpr StatGroup kL2Group{"l2", GroupForm::kMap, "", "L2 (only with --l2-adapter)"};
constexpr StatGroup kAdaptersGroup{"adapters", GroupForm::kArray, "l2_name",
                                   "L2 adapters (l2_name: <type>#<position>, e.g. fs#1)"};
constexpr StatGroup kL2StoreGroup{"store", GroupForm::kMap, "", "L2 write-behind"};
constexpr StatGroup kPrefetchGroup{"prefetch", GroupForm::kMap, "", "L2 prefetch"};
constexpr StatGroup kLookupGroup{"lookup", GroupForm::kMap, "", "Lookups"};
constexpr StatGroup kGpuGroup{"gpu", GroupForm::kMap, "", "GPU (CUDA-IPC path)"};
constexpr StatGroup kKvEventsGroup{"kv_events", GroupForm::kMap, "", "KV events"};
constexpr StatGroup kRestartGroup{"restart", GroupForm::kMap, "", "Warm restart (--takeover) and crash recovery (--recover-pool)"};

template <class E>
void Fields(std::span<const Entry<E>> table, const E* element, StatsVisitor& v) {
  for (const Entry<E>& entry : table) {
    if (element == nullptr) {
      v.Field(entry.field, nullptr);
      continue;
    }
    const StatValue value = entry.get(*element);
    v.Field(entry.field, &value);
  }
}

template <class E>
void Map(const StatGroup& group, std::span<const Entry<E>> table, const E* element,
         StatsVisitor& v) {
  v.BeginGroup(group);
  Fields(table, element, v);
  v.EndGroup();
}

// A repeated group: each element under its label value, or (schema walk) the fields once.
template <class E, class Elements, class LabelOf>
void Repeated(const StatGroup& group, std::span<const Entry<E>> table, const Elements* elements,
              LabelOf label_of, StatsVisitor& v) {
  v.BeginGroup(group);
  if (elements == nullptr) {
    std::string placeholder = "<";
    placeholder.append(group.label).append(">");
    v.BeginElement(placeholder);
    Fields<E>(table, nullptr, v);
    v.EndElement();
  } else {
    std::size_t position = 0;
    for (const auto& item : *elements) {
      const auto [label, element] = label_of(item, position++);
      if (element == nullptr) continue;
      v.BeginElement(label);
      Fields<E>(table, element, v);
      v.EndElement();
    }
  }
  v.EndGroup();
}

void VisitL2(const S* s, StatsVisitor& v) {
  if (s != nullptr && !s->l2) {
    v.AbsentGroup(kL2Group);
    return;
  }
  const L2* l2 = s ? &*s->l2 : nullptr;
  v.BeginGroup(kL2Group);
  Repeated(kAdaptersGroup, kAdapter, l2 ? &l2->adapters : nullptr,
           [](const AdapterRow& a, std::size_t i) {
             return std::pair(a.type + "#" + std::to_string(i + 1), &a);
           },
           v);
  Map(kL2StoreGroup, kL2Store, l2, v);
  Map(kPrefetchGroup, kPrefetch, l2, v);
  v.EndGroup();
}

}  // namespace

std::string_view StatKindName(StatKind kind) {
  switch (kind) {
    case StatKind::kCounter: return "counter";
    case StatKind::kGauge: return "gauge";
    case StatKind::kHistogram: return "histogram";
    case StatKind::kText: return "info";
  }
  return "?";
}

void VisitStats(const StatsSnapshot* s, StatsVisitor& v) {
  Fields(kProcess, s, v);
  v.BeginGroup(kL1Group);
  Fields(kL1, s, v);
  Repeated(kSizeClassGroup, kSizeClass, s ? &s->allocator.classes : nullptr,
           [](const ClassRow& c, std::size_t) { return std::pair(std::to_string(c.object_bytes), &c); },
           v);
  v.EndGroup();
  Map(kEvictionGroup, kEviction, s, v);
  Repeated(kOperationsGroup, kOperation, s ? &s->operations : nullptr,
           [](const OperationRow& o, std::size_t) {
             return std::pair(std::string_view(o.name), o.requests ? &o : nullptr);
           },
           v);
  Fields(kTransportErrors, s, v);
  Map(kRouterGroup, kRouter, s, v);
  v.BeginGroup(kInstancesGroup);
  Fields(kInstances, s, v);
  Map(kReleasedGroup, kReleased, s, v);
  v.EndGroup();
  Fields(kSessions, s, v);
  v.BeginGroup(kParkedGroup);
  Fields(kParked, s, v);
  Repeated(kParkedOpsGroup, kParkedOperation, s ? &s->parked.by_operation : nullptr,
           [](const auto& item, std::size_t) {
             return std::pair(std::string_view(item.first), &item.second);
           },
           v);
  v.EndGroup();
  VisitL2(s, v);
  Map(kLookupGroup, kLookup, s, v);
  Fields(kBlockReports, s, v);
  Map(kGpuGroup, kGpu, s, v);
  Map(kKvEventsGroup, kKvEvents, s, v);
  Map(kRestartGroup, kRestart, s, v);
}

}  // namespace lmcache::server
