// The L2 phases of lmcache-bench: the same bytes stored through a server
// with an L2 adapter (written behind to the tier) and loaded back by lookups
// after L1 was cleared, against a plain reference that moves the same bytes
// to the same place (sequential direct I/O to the same directory for fs; raw
// SET/GET through hiredis for resp), round by round, interleaved.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

// Moves one round's bytes the plain way; each call returns GB/s.
class L2Reference {
 public:
  virtual ~L2Reference() = default;
  virtual Result<double> Write(const std::vector<std::span<const std::byte>>& objects) = 0;
  virtual Result<double> Read(const std::vector<std::span<std::byte>>& objects) = 0;
};

// Sequential O_DIRECT writes (one fdatasync at the end) and reads of one
// file in `dir`: what `dd oflag=direct` / `iflag=direct` measures.
std::unique_ptr<L2Reference> MakeDiskReference(const std::string& dir);
// Raw SET/GET of the same values through hiredis on the Redis at `socket_path`.
std::unique_ptr<L2Reference> MakeRawRedisReference(const std::string& socket_path);

// An S3 bucket (path-style) as the s3 phase reaches it.
struct S3Target {
  std::string endpoint;  // http://host:port
  std::string bucket;
  std::string region;
  std::string access_key;
  std::string secret_key;
};
// The gateway's own PUT and GET of the same objects (all in flight at once,
// on as many connections as the adapter opens), with none of the adapter's
// work (header, checksum, index): what the server's s3 tier is measured
// against. kNotSupported in a build without the s3 adapter.
Result<std::unique_ptr<L2Reference>> MakeRawS3Reference(const S3Target& target);

struct L2Figures {
  std::vector<double> store_gbps;  // per round: store until written behind
  std::vector<double> load_gbps;   // per round: lookups that load from L2
  std::vector<double> reference_write_gbps;
  std::vector<double> reference_read_gbps;
  std::vector<double> cross_node_gbps;  // resp only: stored on node A, looked up and retrieved on B
  double rebuild_seconds = 0;  // fs only: index rebuild of `rebuild_objects` files
  std::uint64_t rebuild_objects = 0;
};

// Runs the phase with a server started with `server_args` (which name the
// L2 adapter) and `reference`.
Result<L2Figures> MeasureL2Phase(const BenchOptions& options, const std::string& server_binary,
                                 const std::vector<std::string>& server_args,
                                 L2Reference& reference);

// Two servers ("nodes") with the same `server_args` (a shared resp adapter):
// each round stores its prompts through A, waits until A wrote them behind,
// then times lookups (loading from the shared tier) and retrieves through B,
// verifying every byte. GB/s per round into *out.
Status MeasureCrossNode(const BenchOptions& options, const std::string& server_binary,
                        const std::vector<std::string>& server_args, std::vector<double>* out);

// The time the fs adapter takes to rebuild its index of `objects` files
// stored by a server before, read from the restarted server's stats.
Status MeasureFsRebuild(const BenchOptions& options, const std::string& server_binary,
                        const std::string& dir, std::uint64_t objects, L2Figures* out);

}  // namespace lmcache::bench
