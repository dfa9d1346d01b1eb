# Every build option of the project, in one place.
option(LMC_BUILD_TESTS "Build the GoogleTest suite" ON)
option(LMC_BUILD_BENCH "Build the Google Benchmark micro-benchmarks" ON)
option(LMC_BUILD_TOOLS "Build lmcache-bench and lmcache-soak (tools/)" ON)
option(LMC_WERROR "Treat compiler warnings as errors" OFF)
set(LMC_ENABLE_CUDA "AUTO" CACHE STRING "Build the CUDA kernels in csrc/: AUTO (if nvcc works), ON, OFF")
set_property(CACHE LMC_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LMC_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")
option(LMC_BUILD_FUZZERS "Build the libFuzzer targets (clang; instruments the whole tree)" OFF)
