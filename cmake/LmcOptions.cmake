# Every build option of the project, in one place.
option(LMC_BUILD_TESTS "Build the GoogleTest suite" ON)
option(LMC_BUILD_BENCH "Build the Google Benchmark micro-benchmarks" ON)
option(LMC_BUILD_TOOLS "Build lmcache-bench and lmcache-soak (tools/)" ON)
option(LMC_L2_RESP "The resp L2 adapter type (Redis, Valkey; needs libhiredis-dev)" ON)
option(LMC_L2_S3 "The s3 L2 adapter type (S3, Ceph RGW; needs libcurl4-openssl-dev)" ON)
option(LMC_IO_URING "The fs L2 adapter's loads through io_uring (needs liburing-dev)" ON)
option(LMC_WERROR "Treat compiler warnings as errors" OFF)
option(LMC_USE_LLD "Link with lld (Debian's lld) when the compiler can use it" ON)
set(LMC_ENABLE_CUDA "AUTO" CACHE STRING "Build the CUDA kernels in csrc/: AUTO (if nvcc works), ON, OFF")
set_property(CACHE LMC_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LMC_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")
# Off where another tree of the same run builds and runs them: tools/dev.sh's
# full suite builds them in the ASan tree only, as they are about half the
# test compile time (the TSan tree never builds them; see lmc_add_test).
option(LMC_BUILD_SINGLE_THREADED_TESTS
       "Build the tests of LMC_SINGLE_THREADED_TESTS (tests/CMakeLists.txt)" ON)
option(LMC_BUILD_FUZZERS "Build the libFuzzer targets (clang; instruments the whole tree)" OFF)
