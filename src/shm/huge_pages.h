// Huge pages for the L1 pool: whether the segment's filesystem gives 2 MiB
// pages, how to ask for them, and how many of the pool's bytes really got them.
//
// The pool lives at /dev/shm/<name> because every client (the reference's
// Python one included) opens it by name there, so huge pages come from how
// that directory is mounted, never from a flag of our own mmap alone:
//   - hugetlbfs at /dev/shm (Kubernetes: an emptyDir with medium HugePages-2Mi;
//     Docker: a bind mount of a hugetlbfs mount): always huge, sized in huge pages;
//   - tmpfs with huge=always or huge=within_size (or the kernel's
//     shmem_enabled=force): huge whenever a 2 MiB range is written;
//   - tmpfs with huge=advise: huge once the creator asks with MADV_HUGEPAGE.
// Clients need nothing: their mappings of a huge page map it with one entry.
// Thread-safety: stateless functions, safe anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache::shm {

enum class HugePageMode {
  kAuto,  // use them where the mount allows, say in the log which it was
  kOn,    // refuse to start without them, naming the fix
  kOff,   // never ask (a mount that always gives them still does)
};

Result<HugePageMode> ParseHugePageMode(std::string_view text);  // auto | on | off

inline constexpr long kTmpfsMagic = 0x01021994;
inline constexpr long kHugetlbfsMagic = 0x958458f6;

struct HugePagePlan {
  bool huge = false;           // the pool's pages will be huge
  bool advise = false;         // ask for them with MADV_HUGEPAGE after mapping
  std::uint64_t page_bytes = 4096;  // the pool's size must be a multiple of this
  std::string how;             // for the log: which mount gives them, or why none
};

// What the system says, read by ReadHugePageFacts (kept apart so the plan is testable).
struct HugePageFacts {
  long fs_magic = 0;                 // statfs(shm_dir).f_type
  std::uint64_t fs_block_bytes = 0;  // statfs(shm_dir).f_bsize: the page of hugetlbfs
  std::string mount_options;         // the super options of shm_dir's mount ("rw,size=..,huge=..")
  std::string shmem_enabled;         // /sys/kernel/mm/transparent_hugepage/shmem_enabled
};

Result<HugePageFacts> ReadHugePageFacts(const std::string& shm_dir);
// kOn without huge pages: kInvalidConfig, with what to change.
Result<HugePagePlan> PlanHugePages(HugePageMode mode, const std::string& shm_dir,
                                   const HugePageFacts& facts);

// The super options of the mount that holds `path`, from /proc/self/mountinfo text.
std::string MountOptionsOf(std::string_view mountinfo, const std::string& path);

// Bytes of the mapping that starts at `base` that are mapped with huge pages
// (ShmemPmdMapped, FilePmdMapped, *_Hugetlb in /proc/self/smaps). It walks the
// mapping's page tables: call it once (after pre-faulting), not per request.
std::uint64_t HugeMappedBytes(const void* base);

}  // namespace lmcache::shm
