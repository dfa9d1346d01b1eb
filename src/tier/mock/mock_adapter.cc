#include "tier/mock/mock_adapter.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "tier/object_format.h"

namespace lmcache::tier {

MockAdapter::MockAdapter(const MockAdapterConfig& config)
    : config_(config), index_(config.max_size_bytes) {}

void MockAdapter::Transfer(std::uint64_t bytes) const {
  if (config_.bandwidth_gb_per_s <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(
      static_cast<double>(bytes) / (config_.bandwidth_gb_per_s * 1e9)));
}

Status MockAdapter::AttachMemory(std::span<std::byte> pool) {
  attached_bytes_.store(pool.size());
  return Status::Ok();
}

std::vector<Status> MockAdapter::StoreNow(std::span<const L2Write> objects) {
  std::vector<Status> results;
  for (const L2Write& object : objects) {
    const store::ObjectKey& key = *object.key;
    if (index_.Contains(key)) {
      results.push_back(Status::Ok());
      continue;
    }
    std::string value = EncodeObjectHeader(key, object.bytes, 8, object.encoding);
    const std::size_t header = value.size();
    value.resize(header + object.bytes.size());
    std::memcpy(value.data() + header, object.bytes.data(), object.bytes.size());
    const L2Index::Reservation reserved = index_.Reserve(key.cache_salt, value.size(), [this](const store::ObjectKey& victim,
                                                          std::uint64_t bytes) {
      MutexLock lock(&mu_);
      objects_.erase(victim);
      counters_.evicted_objects.fetch_add(1, std::memory_order_relaxed);
      counters_.evicted_bytes.fetch_add(bytes, std::memory_order_relaxed);
    });
    if (reserved != L2Index::Reservation::kReserved) {
      const bool over_quota = reserved == L2Index::Reservation::kOverQuota;
      (over_quota ? counters_.over_quota_stores : counters_.store_failures)
          .fetch_add(1, std::memory_order_relaxed);
      results.push_back(Status(ErrorCode::kResourceExhausted,
                               over_quota ? "the tenant is at its quota" : "mock L2 is full"));
      continue;
    }
    Transfer(value.size());
    const std::uint64_t bytes = value.size();
    {
      MutexLock lock(&mu_);
      objects_[key] = std::move(value);
    }
    index_.Commit(key, bytes);
    counters_.stored_objects.fetch_add(1, std::memory_order_relaxed);
    counters_.stored_bytes.fetch_add(object.bytes.size(), std::memory_order_relaxed);
    results.push_back(Status::Ok());
  }
  return results;
}

std::vector<bool> MockAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  return index_.LookupAndLock(keys);
}

void MockAdapter::Unlock(std::span<const store::ObjectKey> keys) { index_.Unlock(keys); }

std::vector<L2LoadOutcome> MockAdapter::LoadNow(std::span<const L2Read> reads) {
  std::vector<L2LoadOutcome> outcomes;
  for (const L2Read& read : reads) {
    std::string value;
    {
      MutexLock lock(&mu_);
      auto it = objects_.find(*read.key);
      if (it != objects_.end()) value = it->second;
    }
    L2LoadOutcome outcome = L2LoadOutcome::kMissing;
    if (!value.empty()) {
      Transfer(value.size());
      const auto bytes = std::as_bytes(std::span(value.data(), value.size()));
      auto header = ParseObjectHeader(bytes);
      Status verified = header.status();
      if ((header.ok() && header->object_bytes() != read.out.size()) ||
          (!header.ok() && header.status().code() == ErrorCode::kNotSupported)) {
        outcome = L2LoadOutcome::kMissing;  // another layout's object, or a newer server's
      } else {
        if (header.ok() && bytes.size() != header->header_bytes + header->payload_bytes) {
          verified = Status(ErrorCode::kCorrupt, "L2 object: truncated");
        } else if (header.ok()) {
          std::memcpy(read.out.data(), bytes.data() + header->header_bytes, header->payload_bytes);
          verified = VerifyAndDecode(*header, *read.key, read.out);
        }
        outcome = verified.ok() ? L2LoadOutcome::kLoaded : L2LoadOutcome::kCorrupt;
        if (!verified.ok()) {
          index_.Erase(*read.key);
          MutexLock lock(&mu_);
          objects_.erase(*read.key);
        }
      }
    }
    counters_.CountLoad(outcome, read.out.size());
    outcomes.push_back(outcome);
  }
  return outcomes;
}

bool MockAdapter::CorruptForTest(const store::ObjectKey& key) {
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return false;
  it->second.back() = static_cast<char>(it->second.back() ^ 0x5a);
  return true;
}

L2AdapterStats MockAdapter::Stats() const {
  L2AdapterStats s;
  counters_.CopyTo(&s);
  s.type = "mock";
  s.description = "mock";
  s.objects = index_.objects();
  s.usage_bytes = index_.usage_bytes();
  s.capacity_bytes = index_.capacity_bytes();
  return s;
}

Result<std::vector<L2Deletion>> MockAdapter::Delete(std::span<const store::ObjectKey> keys,
                                                    bool force) {
  return DeleteIndexed(index_, keys, force, [this](const store::ObjectKey& gone, std::uint64_t) {
    MutexLock lock(&mu_);
    objects_.erase(gone);
  });
}

}  // namespace lmcache::tier
