#include "server/stats_schema.h"

#include <span>
#include <string>
#include <utility>

#include "common/check.h"

namespace lmcache::server {
namespace {

using stats::Group;
using stats::GroupForm;
using stats::Row;
using S = StatsSnapshot;

constexpr Group kL1Group{"l1", GroupForm::kMap, "", "L1 pool"};
constexpr Group kSizeClassGroup{"size_classes", GroupForm::kArray, "object_bytes",
                                "L1 size classes (one per object size)"};
constexpr Group kEvictionGroup{"eviction", GroupForm::kMap, "", "L1 eviction"};
constexpr Group kQuotaGroup{"quota", GroupForm::kMap, "", "Per-tenant L1 quotas (--quota-mode)"};
constexpr Group kTenantsGroup{"tenants", GroupForm::kKeyedMap, "tenant",
                              "Tenants with a quota (tenant: the cache_salt; _default: the empty one)"};
constexpr Group kOperationsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                 "Requests, by operation (those called at least once)"};
constexpr Group kRouterGroup{"router", GroupForm::kMap, "", "Transport"};
constexpr Group kInstancesGroup{"instances", GroupForm::kMap, "", "Worker instances"};
constexpr Group kReleasedGroup{"released", GroupForm::kMap, "", "Registrations ended"};
constexpr Group kParkedGroup{"parked", GroupForm::kMap, "", "Parked requests (deferred replies)"};
constexpr Group kParkedOpsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                "Parked requests, by operation"};
constexpr Group kL2Group{"l2", GroupForm::kMap, "", "L2 (only with --l2-adapter)"};
constexpr Group kAdaptersGroup{"adapters", GroupForm::kArray, "l2_name",
                               "L2 adapters in cascade order (l2_name: the adapter's \"name\", "
                               "or <type>-<n>, e.g. fs-1)"};
constexpr Group kCascadeGroup{"cascade", GroupForm::kMap, "",
                              "L2 adapters added and removed at runtime"};
constexpr Group kL2StoreGroup{"store", GroupForm::kMap, "", "L2 write-behind"};
constexpr Group kPrefetchGroup{"prefetch", GroupForm::kMap, "", "L2 prefetch"};
constexpr Group kLookupGroup{"lookup", GroupForm::kMap, "", "Lookups"};
constexpr Group kGpuGroup{"gpu", GroupForm::kMap, "", "GPU (CUDA-IPC path)"};
constexpr Group kKvEventsGroup{"kv_events", GroupForm::kMap, "", "KV events"};
constexpr Group kP2pGroup{"p2p", GroupForm::kMap, "", "P2P (cross-node sharing)"};
constexpr Group kP2pServedGroup{"served", GroupForm::kMap, "", "Peers' lookups on this L1"};
constexpr Group kP2pPeersGroup{"peers", GroupForm::kMap, "", "The peers of --p2p-peers"};
constexpr Group kP2pRpcGroup{"rpc", GroupForm::kMap, "", "Calls to peers"};
constexpr Group kP2pChannelGroup{"channel", GroupForm::kMap, "", "The UCX data channel"};
constexpr Group kP2pDirectoryGroup{"directory", GroupForm::kMap, "",
                                   "Which peers may hold which chunks, and our chunk log"};
constexpr Group kP2pLookupsGroup{"lookups", GroupForm::kMap, "",
                                 "What the p2p adapter's lookups asked and found"};
constexpr Group kP2pEtcdGroup{"etcd", GroupForm::kMap, "",
                              "Membership through etcd (etcd:// peers)"};
constexpr Group kRestartGroup{"restart", GroupForm::kMap, "",
                              "Warm restart (--takeover) and crash recovery (--recover-pool)"};

// The rows of `rows` from the one keyed `first` to the one keyed `last` (the
// first such after it): a group of the reply interleaves its components'
// figures, and the reply's order is kept as it was first published.
template <class T>
std::span<const Row<T>> Slice(std::span<const Row<T>> rows, std::string_view first,
                              std::string_view last) {
  std::size_t begin = 0;
  while (begin < rows.size() && rows[begin].field.key != first) ++begin;
  std::size_t end = begin;
  while (end < rows.size() && rows[end].field.key != last) ++end;
  LMC_CHECK(end < rows.size());  // both keys are in the list, in this order
  return rows.subspan(begin, end - begin + 1);
}

// The fields of `rows`, read from `element` (null: the schema alone).
template <class T>
void Fields(std::span<const Row<T>> rows, const T* element, stats::Visitor& v) {
  for (const Row<T>& row : rows) {
    if (element == nullptr) {
      v.Field(row.field, nullptr);
      continue;
    }
    const stats::Value value = row.get(*element);
    v.Field(row.field, &value);
  }
}

// A member of the snapshot, or null in a schema walk.
template <class T>
const T* Of(const S* s, const T S::*member) {
  return s == nullptr ? nullptr : &(s->*member);
}

template <class T>
void Map(const Group& group, std::span<const Row<T>> rows, const T* element, stats::Visitor& v) {
  v.BeginGroup(group);
  Fields(rows, element, v);
  v.EndGroup();
}

// A repeated group: each element under its label value, or (schema walk) the fields once.
template <class T, class Elements, class LabelOf>
void Repeated(const Group& group, std::span<const Row<T>> rows, const Elements* elements,
              LabelOf label_of, stats::Visitor& v) {
  v.BeginGroup(group);
  if (elements == nullptr) {
    std::string placeholder = "<";
    placeholder.append(group.label).append(">");
    v.BeginElement(placeholder);
    Fields<T>(rows, nullptr, v);
    v.EndElement();
  } else {
    std::size_t position = 0;
    for (const auto& item : *elements) {
      const auto [label, element] = label_of(item, position++);
      if (element == nullptr) continue;
      v.BeginElement(label);
      Fields<T>(rows, element, v);
      v.EndElement();
    }
  }
  v.EndGroup();
}

void VisitL1(const S* s, stats::Visitor& v) {
  const auto allocator = alloc::AllocatorStatRows();
  const auto* a = Of(s, &S::allocator);
  v.BeginGroup(kL1Group);
  Fields(Slice(allocator, "capacity_bytes", "usage_ratio"), a, v);
  Fields(Slice(store::TableStatRows(), "resident_bytes", "expired_writes_reclaimed"),
         Of(s, &S::table), v);
  Fields(Slice(store::TableStatRows(), "served_once_objects", "served_once_dropped"),
         Of(s, &S::table), v);
  Fields(Slice(store::TableStatRows(), "pinned_objects", "pinned_bytes"), Of(s, &S::table), v);
  Fields(Slice(store::FlowStatRows(), "admitted_objects", "deleted_bytes"), Of(s, &S::flow), v);
  Fields(Slice(allocator, "largest_allocatable_bytes", "unready_bytes"), a, v);
  Fields(store::PrefaultStatRows(), Of(s, &S::prefault), v);
  Fields(Slice(allocator, "allocations", "failed_allocations"), a, v);
  Repeated(kSizeClassGroup, alloc::SizeClassStatRows(), a ? &a->classes : nullptr,
           [](const alloc::ClassStats& c, std::size_t) {
             return std::pair(std::to_string(c.object_bytes), &c);
           },
           v);
  v.EndGroup();
}

void VisitEviction(const S* s, stats::Visitor& v) {
  const auto evictor = store::EvictorStatRows();
  const auto* e = Of(s, &S::evictor);
  v.BeginGroup(kEvictionGroup);
  Fields(Slice(evictor, "passes", "errors"), e, v);
  Fields(Slice(store::FlowStatRows(), "evicted_objects", "evicted_bytes"), Of(s, &S::flow), v);
  Fields(Slice(evictor, "background_evicted_objects", "reclaimed_objects"), e, v);
  Fields(Slice(store::TableStatRows(), "on_demand_evictions", "on_demand_evictions"),
         Of(s, &S::table), v);
  Fields(Slice(evictor, "last_success_unix_seconds", "last_success_unix_seconds"), e, v);
  Fields(Slice(evictor, "last_copy_checked", "last_copies_spared"), e, v);
  v.EndGroup();
}

void VisitTransport(const S* s, stats::Visitor& v) {
  Repeated(kOperationsGroup, OperationStatRows(), Of(s, &S::operations),
           [](const OperationStats& o, std::size_t) {
             return std::pair(std::string_view(o.name), o.requests ? &o : nullptr);
           },
           v);
  Fields(Slice(ServiceCountedStatRows(), "transport_errors", "transport_errors"), s, v);
  const auto counted = transport::TransportCountedStatRows();
  const auto* t = Of(s, &S::transport);
  v.BeginGroup(kRouterGroup);
  Fields(Slice(counted, "received", "overloaded"), t, v);
  Fields(transport::TransportQueueStatRows(), t, v);
  Fields(Slice(counted, "connections", "capped_connections"), t, v);
  v.EndGroup();
}

void VisitWorkers(const S* s, stats::Visitor& v) {
  v.BeginGroup(kInstancesGroup);
  Fields(worker::RegistryStatRows(), Of(s, &S::instances), v);
  Fields(Slice(ReleasedStatRows(), "reaped", "departed"), s, v);
  Map(kReleasedGroup, Slice(ReleasedStatRows(), "unregistered", "replaced"), s, v);
  v.EndGroup();
  Fields(Slice(ServiceStatRows(), "sessions", "sessions_dropped_for_memory"), s, v);
  const ParkedStats* parked = Of(s, &S::parked);
  v.BeginGroup(kParkedGroup);
  Fields(ParkedStatRows(), parked, v);
  Repeated(kParkedOpsGroup, ParkedOperationStatRows(), parked ? &parked->by_operation : nullptr,
           [](const auto& item, std::size_t) {
             return std::pair(std::string_view(item.first), &item.second);
           },
           v);
  v.EndGroup();
}

void VisitQuota(const S* s, stats::Visitor& v) {
  const store::QuotaStats* q = Of(s, &S::quota);
  v.BeginGroup(kQuotaGroup);
  Fields(store::QuotaStatRows(), q, v);
  Fields(Slice(store::TableStatRows(), "over_quota_objects", "quota_evictions"),
         Of(s, &S::table), v);
  Repeated(kTenantsGroup, store::TenantQuotaStatRows(), q ? &q->tenants : nullptr,
           [](const store::TenantQuotaStats& t, std::size_t) { return std::pair(t.salt, &t); }, v);
  v.EndGroup();
}

void VisitL2(const S* s, stats::Visitor& v) {
  if (s != nullptr && !s->l2) {
    v.AbsentGroup(kL2Group);
    return;
  }
  const tier::L2Stats* l2 = s ? &*s->l2 : nullptr;
  v.BeginGroup(kL2Group);
  Repeated(kAdaptersGroup, tier::L2AdapterStatRows(), l2 ? &l2->adapters : nullptr,
           [](const tier::L2AdapterStats& a, std::size_t i) {
             return std::pair(a.name.empty() ? a.type + "-" + std::to_string(i + 1) : a.name, &a);
           },
           v);
  Map(kCascadeGroup, tier::L2CascadeStatRows(), l2 ? &l2->cascade : nullptr, v);
  Map(kL2StoreGroup, tier::StoreControllerStatRows(), l2 ? &l2->store : nullptr, v);
  Map(kPrefetchGroup, tier::PrefetchControllerStatRows(), l2 ? &l2->prefetch : nullptr, v);
  v.EndGroup();
}

void VisitKvEvents(const S* s, stats::Visitor& v) {
  const KvEventsStats* k = Of(s, &S::kv_events);
  const auto log = events::KvEventLogStatRows();
  v.BeginGroup(kKvEventsGroup);
  Fields(Slice(log, "enabled", "dropped"), k ? &k->log : nullptr, v);
  Fields(events::KvEventRecorderStatRows(), k ? &k->recorder : nullptr, v);
  Fields(Slice(log, "subscribers", "subscribers"), k ? &k->log : nullptr, v);
  Fields(KvEventStreamStatRows(), k ? &k->streams : nullptr, v);
  Fields(events::VllmPublisherStatRows(), k ? &k->publisher : nullptr, v);
  v.EndGroup();
}

}  // namespace

void VisitStats(const S* s, stats::Visitor& v) {
  Fields(Slice(ServiceStatRows(), "version", "uptime_seconds"), s, v);
  VisitL1(s, v);
  VisitEviction(s, v);
  VisitQuota(s, v);
  VisitTransport(s, v);
  VisitWorkers(s, v);
  VisitL2(s, v);
  const auto counted = ServiceCountedStatRows();
  v.BeginGroup(kLookupGroup);
  Fields(Slice(counted, "lookups", "lock_latency"), s, v);
  Fields(worker::ChunkHasherStatRows(), Of(s, &S::hash_cache), v);
  v.EndGroup();
  Fields(Slice(counted, "block_allocation_reports", "block_allocation_reports"), s, v);
  Map(kGpuGroup, gpu::GpuStatRows(), Of(s, &S::gpu), v);
  VisitKvEvents(s, v);
  v.BeginGroup(kRestartGroup);
  Fields(RestartStatRows(), Of(s, &S::restart), v);
  Fields(store::JournalStatRows(), Of(s, &S::journal), v);
  v.EndGroup();
  v.BeginGroup(kP2pGroup);
  Fields(Slice(transport::TransportCountedStatRows(), "fleet_admitted", "fleet_refused"),
         Of(s, &S::transport), v);
  Map(kP2pServedGroup, fleet::PeerTaskStatRows(), Of(s, &S::p2p_served), v);
  Map(kP2pPeersGroup, fleet::MembershipStatRows(), Of(s, &S::p2p_peers), v);
  Map(kP2pRpcGroup, fleet::PeerRpcStatRows(), Of(s, &S::p2p_rpc), v);
  Map(kP2pChannelGroup, fleet::UcxChannelStatRows(), Of(s, &S::p2p_channel), v);
  Map(kP2pDirectoryGroup, fleet::P2pDirectoryStatRows(), Of(s, &S::p2p_directory), v);
  Map(kP2pLookupsGroup, fleet::P2pLookupStatRows(), Of(s, &S::p2p_lookups), v);
  Map(kP2pEtcdGroup, fleet::EtcdStatRows(), Of(s, &S::p2p_etcd), v);
  v.EndGroup();
}

}  // namespace lmcache::server
