#include "fleet/chunk_log.h"

#include <algorithm>
#include <string>
#include <unordered_set>

namespace lmcache::fleet {

std::vector<ChunkId> ChunkIdsOf(std::span<const store::ObjectKey> keys) {
  std::vector<ChunkId> ids;
  ids.reserve(keys.size());
  // One digest per run of keys of one model and tenant (a callback's keys
  // are almost always one model's and one tenant's).
  const store::ObjectKey* run = nullptr;
  ChunkId seed = 0;
  for (const store::ObjectKey& key : keys) {
    if (run == nullptr || run->model_name != key.model_name ||
        run->cache_salt != key.cache_salt) {
      run = &key;
      seed = PeerDirectory::ModelSeed(key.model_name, key.cache_salt);
    }
    ids.push_back(PeerDirectory::ChunkIdOf(seed, key.chunk_hash));
  }
  return ids;
}

std::vector<ChunkId> DistinctChunkIds(std::span<const store::ObjectKey> keys) {
  return Distinct(ChunkIdsOf(keys));
}

std::vector<ChunkId> Distinct(std::vector<ChunkId> ids) {
  std::unordered_set<ChunkId> seen;
  std::erase_if(ids, [&seen](ChunkId id) { return !seen.insert(id).second; });
  return ids;
}

ChunkLog::ChunkLog(const ChunkLogConfig& config, std::uint64_t incarnation)
    : config_(config), incarnation_(incarnation == 0 ? 1 : incarnation) {}

void ChunkLog::OnAdmitted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t>,
                          store::AdmissionSource) {
  Append(DirectoryChange::kStored, keys);
}

void ChunkLog::OnEvicted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t>) {
  Append(DirectoryChange::kRemoved, keys);
}

void ChunkLog::OnDeleted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t>) {
  Append(DirectoryChange::kRemoved, keys);
}

void ChunkLog::Seed(std::span<const store::ObjectKey> keys) {
  const std::vector<ChunkId> ids = ChunkIdsOf(keys);
  MutexLock lock(&mu_);
  for (const ChunkId id : ids) resident_[id] += 1;
}

void ChunkLog::Append(DirectoryChange change, std::span<const store::ObjectKey> keys) {
  if (keys.empty()) return;
  const std::vector<ChunkId> objects = ChunkIdsOf(keys);  // hashed outside the lock
  std::vector<ChunkRecord> dropped;                       // freed outside it
  MutexLock lock(&mu_);
  // Only a chunk's first object in, or its last out, changes what a peer
  // should be asked for.
  std::vector<ChunkId> ids;
  for (const ChunkId id : objects) {
    if (change == DirectoryChange::kStored) {
      if (resident_[id]++ == 0) ids.push_back(id);
      continue;
    }
    auto it = resident_.find(id);
    // An object the log never counted (none should be) is taken as the last.
    if (it == resident_.end() || --it->second == 0) {
      if (it != resident_.end()) resident_.erase(it);
      ids.push_back(id);
    }
  }
  if (ids.empty()) return;
  for (std::size_t at = 0; at < ids.size(); at += kMaxRecordChunks) {
    const std::size_t end = std::min(ids.size(), at + kMaxRecordChunks);
    ChunkRecord& record = records_.emplace_back();
    record.seq = next_seq_++;
    record.change = change;
    record.chunks.assign(ids.begin() + static_cast<std::ptrdiff_t>(at),
                         ids.begin() + static_cast<std::ptrdiff_t>(end));
    chunks_ += record.chunks.size();
  }
  // The newest record stays even when it alone is past the bound.
  while (records_.size() > 1 && chunks_ > config_.max_chunks) {
    chunks_ -= records_.front().chunks.size();
    dropped.push_back(std::move(records_.front()));
    records_.pop_front();
    dropped_ += 1;
  }
}

std::uint64_t ChunkLog::last_seq() const {
  MutexLock lock(&mu_);
  return next_seq_ - 1;
}

ChunkPage ChunkLog::ReadAfter(std::uint64_t cursor, std::size_t max_records,
                              std::size_t max_chunks) const {
  ChunkPage page;
  page.incarnation = incarnation_;
  page.next_cursor = cursor;
  MutexLock lock(&mu_);
  const std::uint64_t last = next_seq_ - 1;
  if (cursor > last) {  // a previous life's cursor
    page.lost = true;
    page.next_cursor = last;
    return page;
  }
  const std::uint64_t first = records_.empty() ? next_seq_ : records_.front().seq;
  if (cursor + 1 < first) page.lost = true;  // what it had not read was dropped
  std::size_t index = cursor + 1 >= first ? static_cast<std::size_t>(cursor + 1 - first) : 0;
  std::size_t chunks = 0;
  for (; index < records_.size() && page.records.size() < max_records; ++index) {
    const ChunkRecord& record = records_[index];
    if (!page.records.empty() && chunks + record.chunks.size() > max_chunks) break;
    chunks += record.chunks.size();
    page.records.push_back(record);
    page.next_cursor = record.seq;
  }
  return page;
}

ChunkLogStats ChunkLog::Stats() const {
  MutexLock lock(&mu_);
  return {next_seq_ - 1, records_.size(), chunks_, dropped_};
}

}  // namespace lmcache::fleet
