// FsAdapter: an L2 tier of one file per object under a directory on local
// disk or NVMe (`{"type":"fs","base_path":...}`), surviving restarts.
//
// A store writes the object (header + payload, object_format.h) to a
// temporary file under <base>/.tmp, fsyncs it, and renames it to its name
// (fs_key_codec.h): an object is visible only once complete and durable, and
// a crash leaves at most a temporary file, removed at the next start. A load
// reads the header and payload and verifies both against the key it was
// asked for; a mismatch is a miss, the file is deleted and counted. Capacity
// (`max_size_gb`) is kept by evicting least recently used files, and each
// tenant's quota (EnforceQuotas) by evicting that tenant's own. At startup
// the index is rebuilt from the directory (each file's header is read and
// checked against its name and size; partial, foreign or corrupt files are
// removed) and the time it took is logged.
//
// With `use_odirect`, reads and writes of aligned objects bypass the page
// cache (the header is padded to 4096 bytes for it); objects whose L1 buffer
// or size is not 4096-aligned go through the page cache.
//
// Loads go through io_uring (uring_reads.h) where the kernel allows it: a
// batch's reads are all in flight at once, and the load completes from the
// ring's completion thread (`io_engine`: "auto" by default, falling back to
// blocking reads with one log line saying why; "io_uring" refuses to start
// without it; "sync" never uses it). Stores stay blocking calls on the
// write-behind workers: each is a write, an fdatasync and a rename.
//
// A full disk, a read-only or deleted directory: the failing stores and
// loads are counted, the condition is logged once (ConditionLog) and
// recovery is logged when an operation succeeds again; a deleted directory is
// recreated at the next store.
//
// Thread-safety: internally synchronised; any number of threads may call it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <variant>

#include "common/condition_log.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "tier/l2_adapter.h"
#include "tier/l2_index.h"
#include "tier/fs/uring_reads.h"

namespace lmcache::tier {

enum class FsIoEngine : std::uint8_t {
  kAuto,   // io_uring where available, else blocking reads
  kUring,  // io_uring or refuse to start
  kSync,   // blocking reads on the caller's thread
};

struct FsAdapterConfig {
  std::filesystem::path base_path;
  std::uint64_t max_size_bytes = 0;  // 0 = bounded only by the disk
  bool use_odirect = false;
  bool fsync = true;  // fsync each file before its rename (durability across power loss)
  FsIoEngine io_engine = FsIoEngine::kAuto;
  // Take over a non-empty directory that has no marker of ours ("adopt":
  // true): its object files are indexed, nothing else in it is touched.
  bool adopt = false;
};

// The file that marks a directory as an fs adapter's own, written when the
// adapter first takes it.
inline constexpr const char* kFsMarkerName = ".lmcache-l2-fs";

struct FsRebuildReport {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;
  std::uint64_t removed = 0;  // our partial, corrupt or temporary files
  std::uint64_t foreign = 0;  // files not of ours, left alone
  double seconds = 0;
};

class FsAdapter final : public L2Adapter {
 public:
  // Creates base_path if missing, rebuilds the index from it and sets up
  // io_uring as configured. Fails when the directory cannot be created or
  // read, or io_uring was demanded and is not available; and, so that it
  // never deletes what it did not write (issue 62, section 3), when
  // base_path or its .tmp is a symbolic link, is not owned by this
  // process's user or is writable by others, or when base_path has no
  // marker of ours (kFsMarkerName), holds files an fs tier did not write,
  // and "adopt" is not set (an unmarked directory of only our files, as an
  // earlier version left it, is marked and taken).
  // It removes only files it names itself whose content is ours: a
  // temporary file (<pid>-<n>.tmp in .tmp) and an object file (its name's
  // shape, and our header's magic) that is partial, corrupt or under
  // another key's name.
  static Result<std::unique_ptr<FsAdapter>> Create(const FsAdapterConfig& config);

  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void Unlock(std::span<const store::ObjectKey> keys) override;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override;
  L2AdapterStats Stats() const override;
  bool CompletesAsynchronously() const override { return uring_ != nullptr; }
  void ObserveRemovals(RemovalObserver observer) override { removal_observer_ = std::move(observer); }
  void EnforceQuotas(const store::TenantLedger* ledger) override;
  Result<std::vector<ListedL2Object>> List(const store::ObjectKey* after, std::size_t limit,
                                           const KeyFilter& keep) const override;
  Result<std::vector<L2Deletion>> Delete(std::span<const store::ObjectKey> keys,
                                         bool force) override;

  const FsRebuildReport& rebuild_report() const { return rebuild_; }
  // "io_uring" or "sync": how loads are read.
  const char* io_engine() const { return uring_ ? "io_uring" : "sync"; }
  std::filesystem::path PathOf(const store::ObjectKey& key) const;

 private:
  explicit FsAdapter(const FsAdapterConfig& config);
  Status Rebuild();
  // Opens base_path (created if missing) and its .tmp, checks they are ours,
  // marks or refuses base_path; then empties .tmp of our temporary files.
  Result<UniqueFd> OpenBase();
  Status CleanTemporaries(int base_fd);
  Status SetUpIo();
  // An object written to its temporary file, not yet synced and renamed.
  struct PendingFile {
    std::filesystem::path tmp;
    UniqueFd fd;
    std::uint64_t file_bytes = 0;  // reserved in the index
    std::string salt;              // the tenant it is reserved for
    bool over_quota = false;       // refused: the tenant is at its quota here
  };
  Status WriteTemporary(const L2Write& object, PendingFile* file);
  Status Publish(const L2Write& object, PendingFile* file);
  // Writes header and payload to file->tmp; 0 or the errno of what failed.
  int WriteFile(const L2Write& object, const std::string& header, PendingFile* file);
  // Counts and logs a failed write, removes its file, gives its space back.
  Status Fail(int error, std::string what, PendingFile* file);
  // Bytes aligned for O_DIRECT, freed when they go.
  struct FreeBytes {
    void operator()(std::byte* p) const;
  };
  using AlignedBytes = std::unique_ptr<std::byte, FreeBytes>;
  static AlignedBytes AllocateAligned(std::size_t bytes);
  // A load's file, opened, once the index says it is held at the read's size.
  struct OpenedObject {
    UniqueFd fd;
    std::size_t header_bytes = 0;
    AlignedBytes header;
    // Where the payload is read: the whole L1 buffer, or the start of it
    // for an encoded object (decoded in place once verified).
    std::span<std::byte> payload;
  };
  struct AsyncLoad;
  // Opens the object's file; an outcome instead where the load ends here.
  std::variant<OpenedObject, L2LoadOutcome> Open(const L2Read& read);
  // Checks what was read (1 all bytes, 0 the file was short, -errno).
  L2LoadOutcome Finish(const L2Read& read, const OpenedObject& object, int read_result);
  std::vector<L2LoadOutcome> LoadNow(std::span<const L2Read> reads);
  std::vector<Status> StoreNow(std::span<const L2Write> objects);
  // Deletes the object's file and forgets it.
  void Remove(const store::ObjectKey& key);
  // Deletes the file of an object the index evicted, and counts it.
  void DropEvicted(const store::ObjectKey& key, std::uint64_t bytes);
  // Records a failed operation's condition from its errno.
  void NoteFailure(int error, const std::string& what);

  const FsAdapterConfig config_;
  const std::filesystem::path tmp_dir_;
  L2Index index_;
  L2Counters counters_;
  ConditionLog condition_;
  RateLimitedLog corrupt_log_{std::chrono::seconds(10)};
  FsRebuildReport rebuild_;
  RemovalObserver removal_observer_;  // set before use
  std::atomic<std::uint64_t> next_tmp_{0};
  // Last: destroyed first, it waits for the loads in flight, whose
  // completions use the members above.
  std::unique_ptr<UringReads> uring_;
};

}  // namespace lmcache::tier
