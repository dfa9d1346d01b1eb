#include "shm/huge_pages.h"

#include <sys/statfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace lmcache::shm {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(separator, start), text.size());
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// "huge=within_size" in "rw,size=8g,huge=within_size" -> "within_size"; "never" when absent.
std::string TmpfsHugeOption(std::string_view options) {
  for (std::string_view option : Split(options, ',')) {
    if (option.substr(0, 5) == "huge=") return std::string(option.substr(5));
  }
  return "never";
}

// The bracketed choice of /sys/kernel/mm/transparent_hugepage/shmem_enabled.
std::string Selected(std::string_view choices) {
  const std::size_t open = choices.find('[');
  const std::size_t close = choices.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return "";
  return std::string(choices.substr(open + 1, close - open - 1));
}

bool IsUnder(std::string_view path, std::string_view mount_point) {
  if (mount_point == "/") return true;
  if (path.substr(0, mount_point.size()) != mount_point) return false;
  return path.size() == mount_point.size() || path[mount_point.size()] == '/';
}

std::string Fix(const std::string& shm_dir) {
  return "Fix: remount it with huge pages (mount -o remount,huge=within_size " + shm_dir +
         "), mount hugetlbfs there (Kubernetes: an emptyDir with medium: HugePages-2Mi at " +
         shm_dir + " and a hugepages-2Mi resource limit), let the kernel force them (echo force "
         "> /sys/kernel/mm/transparent_hugepage/shmem_enabled), or use --l1-hugepages auto";
}

HugePagePlan TmpfsPlan(HugePageMode mode, const std::string& shm_dir, const HugePageFacts& f) {
  HugePagePlan plan;
  const std::string kernel = Selected(f.shmem_enabled);
  const std::string mount = TmpfsHugeOption(f.mount_options);
  const std::string where = "tmpfs " + shm_dir + " (huge=" + mount + ", shmem_enabled=" +
                            (kernel.empty() ? "unknown" : kernel) + ")";
  if (kernel == "deny") {
    plan.how = "no huge pages: the kernel denies them to tmpfs, " + where;
  } else if (kernel == "force" || mount == "always" || mount == "within_size") {
    plan.huge = true;
    plan.how = "2 MiB pages from " + where;
  } else if (mount == "advise" && mode != HugePageMode::kOff) {
    plan.huge = plan.advise = true;
    plan.how = "2 MiB pages from " + where + " by MADV_HUGEPAGE";
  } else {
    plan.how = "4 KiB pages: " + where + (mode == HugePageMode::kOff ? ", --l1-hugepages off" : "");
  }
  return plan;
}

}  // namespace

Result<HugePageMode> ParseHugePageMode(std::string_view text) {
  if (text == "auto") return HugePageMode::kAuto;
  if (text == "on") return HugePageMode::kOn;
  if (text == "off") return HugePageMode::kOff;
  return Status(ErrorCode::kInvalidConfig,
                "--l1-hugepages must be auto, on or off, got '" + std::string(text) + "'");
}

std::string MountOptionsOf(std::string_view mountinfo, const std::string& path) {
  std::size_t best_length = 0;
  std::string options;
  for (std::string_view line : Split(mountinfo, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const std::vector<std::string_view> fields = Split(line, ' ');
    if (fields.size() < 10) continue;
    const std::string_view mount_point = fields[4];
    std::size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 3 >= fields.size()) continue;  // no super options
    if (!IsUnder(path, mount_point) || mount_point.size() < best_length) continue;
    best_length = mount_point.size();  // a later mount on the same point hides an earlier one
    options = std::string(fields[dash + 3]);
  }
  return options;
}

Result<HugePageFacts> ReadHugePageFacts(const std::string& shm_dir) {
  struct statfs fs {};
  if (statfs(shm_dir.c_str(), &fs) != 0) {
    return Status(ErrorCode::kIoError,
                  "statfs(" + shm_dir + ") failed: " + std::string(std::strerror(errno)));
  }
  HugePageFacts facts;
  facts.fs_magic = static_cast<long>(fs.f_type);
  facts.fs_block_bytes = static_cast<std::uint64_t>(fs.f_bsize);
  std::error_code ignored;
  const std::filesystem::path real = std::filesystem::canonical(shm_dir, ignored);
  facts.mount_options =
      MountOptionsOf(ReadWholeFile("/proc/self/mountinfo"), real.empty() ? shm_dir : real.string());
  facts.shmem_enabled = ReadWholeFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  return facts;
}

Result<HugePagePlan> PlanHugePages(HugePageMode mode, const std::string& shm_dir,
                                   const HugePageFacts& facts) {
  HugePagePlan plan;
  if (facts.fs_magic == kHugetlbfsMagic) {
    plan.huge = true;
    plan.page_bytes = facts.fs_block_bytes;
    plan.how = std::to_string(facts.fs_block_bytes >> 20) + " MiB pages from hugetlbfs " + shm_dir;
  } else if (facts.fs_magic == kTmpfsMagic) {
    plan = TmpfsPlan(mode, shm_dir, facts);
  } else {
    plan.how = "4 KiB pages: " + shm_dir + " is neither tmpfs nor hugetlbfs";
  }
  if (mode == HugePageMode::kOn && !plan.huge) {
    return Status(ErrorCode::kInvalidConfig,
                  "--l1-hugepages on, but the pool would get " + plan.how + ". " + Fix(shm_dir));
  }
  return plan;
}

std::uint64_t HugeMappedBytes(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  std::ostringstream start;
  start << std::hex << reinterpret_cast<std::uintptr_t>(base) << '-';
  const std::string header = start.str();
  std::string line;
  bool inside = false;
  std::uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    const bool is_header = !line.empty() && line.find(':') > line.find(' ');
    if (is_header) {
      if (inside) break;  // the next mapping
      inside = line.compare(0, header.size(), header) == 0;
      continue;
    }
    if (!inside) continue;
    for (const char* field : {"ShmemPmdMapped:", "FilePmdMapped:", "Shared_Hugetlb:",
                              "Private_Hugetlb:"}) {
      if (line.compare(0, std::strlen(field), field) == 0) {
        kib += std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
      }
    }
  }
  return kib << 10;
}

}  // namespace lmcache::shm
