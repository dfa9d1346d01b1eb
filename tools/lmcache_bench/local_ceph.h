// LocalCeph: a single-node Ceph cluster with its S3 gateway, started by the
// benchmark through tools/ceph_s3.sh (the script the tests use) in a
// temporary directory, with one bucket, and stopped (the directory removed)
// when the object dies. Used by the s3 L2 phase. kNotFound when Ceph is not
// installed (the phase is then skipped, as the p2p phase is without UCX).
// Thread-safety: one owner.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "lmcache/status.h"

namespace lmcache::bench {

class LocalCeph {
 public:
  // `memstore_bytes`: the OSD's in-memory store (it holds every object; the
  // script's default of 1 GiB is too small for a benchmark's rounds).
  static Result<std::unique_ptr<LocalCeph>> Start(const std::string& script,
                                                  const std::string& bucket,
                                                  std::uint64_t memstore_bytes);
  ~LocalCeph();
  LocalCeph(const LocalCeph&) = delete;
  LocalCeph& operator=(const LocalCeph&) = delete;

  // What the script wrote to s3.env: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION.
  std::string env(const std::string& name) const;

 private:
  LocalCeph(std::string script, std::string dir)
      : script_(std::move(script)), dir_(std::move(dir)) {}
  std::string script_;
  std::string dir_;
  std::map<std::string, std::string> env_;
};

}  // namespace lmcache::bench
