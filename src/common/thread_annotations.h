// Clang thread-safety annotations (no-ops on other compilers).
//
// Every mutex-protected field is marked LMC_GUARDED_BY and every function that
// expects a lock held is marked LMC_REQUIRES, so the clang build
// (-Wthread-safety -Werror=thread-safety) checks the discipline documented in
// docs/threading.md. Thread-safety: macros only.
#pragma once

#if defined(__clang__)
#define LMC_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define LMC_THREAD_ANNOTATION(x)
#endif

#define LMC_CAPABILITY(x) LMC_THREAD_ANNOTATION(capability(x))
#define LMC_SCOPED_CAPABILITY LMC_THREAD_ANNOTATION(scoped_lockable)
#define LMC_GUARDED_BY(x) LMC_THREAD_ANNOTATION(guarded_by(x))
#define LMC_PT_GUARDED_BY(x) LMC_THREAD_ANNOTATION(pt_guarded_by(x))
#define LMC_ACQUIRED_BEFORE(...) LMC_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define LMC_REQUIRES(...) LMC_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define LMC_ACQUIRE(...) LMC_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define LMC_RELEASE(...) LMC_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define LMC_EXCLUDES(...) LMC_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define LMC_ASSERT_CAPABILITY(x) LMC_THREAD_ANNOTATION(assert_capability(x))
#define LMC_NO_THREAD_SAFETY_ANALYSIS LMC_THREAD_ANNOTATION(no_thread_safety_analysis)
