// Which sanitizer this test binary was built with, for the few tests whose
// bounds depend on it (a sanitizer runs the code several times slower, and
// TSan's shadow pages count as the process's page faults). gcc defines
// __SANITIZE_*__, clang answers __has_feature.
// Thread-safety: constants only.
#pragma once

#if defined(__has_feature)
#define LMC_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define LMC_TEST_HAS_FEATURE(x) 0
#endif

namespace lmcache::testing {

#if defined(__SANITIZE_THREAD__) || LMC_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || LMC_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace lmcache::testing
