// The `fs` L2 adapter type: its `--l2-adapter` fields and its factory
// (registered through l2_adapter_types.h; src/CMakeLists.txt lists it).
#include "tier/fs/fs_adapter.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {
namespace {

Result<FsAdapterConfig> ParseFs(L2ConfigFields& f, L2AdapterSpec* spec) {
  FsAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(const std::string base, f.String("base_path", true));
  if (base.empty()) return f.Error("base_path", "must name a directory");
  c.base_path = base;
  // Two fs adapters over one directory would each index, evict and rebuild
  // the other's files: the cascade refuses the second.
  std::error_code ignored;
  spec->exclusive = "fs:" + std::filesystem::weakly_canonical(c.base_path, ignored).string();
  if (ignored) spec->exclusive = "fs:" + c.base_path.lexically_normal().string();
  LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_size_gb", 0, 0, 1e6));
  c.max_size_bytes = static_cast<std::uint64_t>(gb * kConfigGiB);
  LMC_ASSIGN_OR_RETURN(c.use_odirect, f.Bool("use_odirect", false));
  LMC_ASSIGN_OR_RETURN(c.fsync, f.Bool("fsync", true));
  LMC_ASSIGN_OR_RETURN(c.adopt, f.Bool("adopt", false));
  LMC_ASSIGN_OR_RETURN(const std::string engine, f.String("io_engine", false));
  if (engine.empty() || engine == "auto") {
    c.io_engine = FsIoEngine::kAuto;
  } else if (engine == "io_uring") {
    c.io_engine = FsIoEngine::kUring;
  } else if (engine == "sync") {
    c.io_engine = FsIoEngine::kSync;
  } else {
    return f.Error("io_engine", "must be \"auto\", \"io_uring\" or \"sync\"");
  }
  LMC_ASSIGN_OR_RETURN(const std::string checksum, f.String("checksum", false));
  if (!checksum.empty() && checksum != "none" && checksum != "crc32" && checksum != "xxh3") {
    return f.Error("checksum", "must be \"none\", \"crc32\" or \"xxh3\"");
  }
  if (!checksum.empty() && checksum != "xxh3") {
    spec->ignored_keys.push_back("checksum (every object carries an XXH3 checksum, always verified)");
  }
  f.Ignore({"relative_tmp_dir", "read_ahead_size"}, &spec->ignored_keys);
  return c;
}

}  // namespace

void RegisterFsAdapterType(L2AdapterTypes& types) {
  types.Add(TypedL2AdapterType<FsAdapterConfig>(
      "fs", {}, ParseFs, [](const FsAdapterConfig& config) -> Result<std::unique_ptr<L2Adapter>> {
        LMC_ASSIGN_OR_RETURN(auto adapter, FsAdapter::Create(config));
        return std::unique_ptr<L2Adapter>(std::move(adapter));
      }));
}

}  // namespace lmcache::tier
