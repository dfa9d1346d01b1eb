// LMC_CHECK / LMC_DCHECK: assertions of invariants the code relies on.
//
// A failed check is a bug in this server, never a consequence of client
// input (input is validated and answered with a Status). LMC_CHECK is always
// on and aborts with the condition and its location; use it where the test is
// cheap. LMC_DCHECK is compiled only without NDEBUG (the sanitizer builds of
// tools/dev.sh keep assertions on) for checks too costly for release builds.
// Thread-safety: macros; the failure path writes to stderr and aborts.
#pragma once

namespace lmcache::internal {
[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);
}  // namespace lmcache::internal

#define LMC_CHECK(condition)                                                 \
  do {                                                                       \
    if (!(condition)) ::lmcache::internal::CheckFailed(#condition, __FILE__, __LINE__); \
  } while (0)

#ifdef NDEBUG
#define LMC_DCHECK(condition) \
  do {                        \
  } while (0)
#else
#define LMC_DCHECK(condition) LMC_CHECK(condition)
#endif
