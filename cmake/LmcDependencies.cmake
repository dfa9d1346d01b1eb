# All third-party dependencies, from Debian 12 packages, found by CMake.
#   libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libspdlog-dev libcli11-dev libssl-dev libucx-dev
#   libgtest-dev libbenchmark-dev   (tools/dev.sh installs them)
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(cppzmq REQUIRED)
# libabsl-dev: the object table's hash maps (Swiss tables: a probe of a large
# index costs fewer cache misses than std::unordered_map's; docs/performance.md,
# "Chunk size 1").
find_package(absl REQUIRED CONFIG)
find_package(nlohmann_json REQUIRED)  # nlohmann-json3-dev: --l2-adapter JSON, HTTP replies
# libssl-dev: HMAC-SHA256 (libcrypto) derives the fleet's CURVE keys from
# --p2p-auth-key-file (fleet/fleet_key.h).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# libucx-dev: the P2P data channel (fleet/ucx_channel.h): the L1 pool
# registered once, peers read with one-sided gets.
find_package(ucx CONFIG REQUIRED)
# libcpp-httplib-dev: the HTTP endpoint. Debian ships it compiled (a shared
# library with its OpenSSL/zlib/brotli options), found through pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# prometheus-cpp-dev: /metrics is rendered by its text serializer (core
# library only; the server links no civetweb or curl).
find_package(prometheus-cpp CONFIG REQUIRED)
# libhiredis-dev: the resp L2 adapter (Redis/Valkey, standalone and Cluster,
# LMC_L2_RESP) and lmcache-bench's Redis paths; a server built without them
# needs no hiredis. Through pkg-config: Debian 12's HiredisConfigVersion.cmake
# breaks when no version is requested.
if(LMC_L2_RESP OR (LMC_BUILD_TOOLS AND NOT LMC_SANITIZE))
  pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
endif()
# libcurl4-openssl-dev: the s3 L2 adapter's HTTP(S) (LMC_L2_S3): its multi
# interface keeps many requests in flight on one thread, with the system's CA
# store for https; SigV4 is ours (tier/s3/sigv4.h, OpenSSL's HMAC).
if(LMC_L2_S3)
  find_package(CURL REQUIRED)
endif()
# liburing-dev: the fs L2 adapter's loads through io_uring (LMC_IO_URING);
# without it the adapter reads with blocking calls.
if(LMC_IO_URING)
  pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
endif()
# lld: each build links about 150 test, fuzz and tool binaries, and GNU ld
# is slow at it on two cores; lld is about ten times faster (five TSan test
# binaries: 28.9 s against 2.8 s). Used only where the compiler links with
# it (a machine without lld links with its default linker).
if(LMC_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" LMC_LINKER_LLD)
  if(LMC_LINKER_LLD)
    add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>")
  endif()
endif()
# Debian 12's libmsgpack-cxx-dev ships its config as "msgpack" (target msgpackc-cxx).
find_package(msgpack REQUIRED CONFIG PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/msgpackc-cxx)
if(LMC_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(LMC_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA is optional: AUTO enables it only when a CUDA compiler works.
set(LMC_HAVE_CUDA OFF)
if(NOT LMC_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(LMC_HAVE_CUDA ON)
    # The runtime comes with the toolkit and is linked statically
    # (CUDA::cudart_static): the installed server needs no toolkit at run time,
    # and the driver (libcuda) is loaded only at the first CUDA call, so it
    # starts on machines without a GPU or a driver.
    find_package(CUDAToolkit REQUIRED)
  elseif(LMC_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LMC_ENABLE_CUDA=ON but no working CUDA compiler was found")
  endif()
endif()
message(STATUS "lmcache: CUDA support: ${LMC_HAVE_CUDA}")

# libxxhash-dev: XXH3 for the chunk-hash cache and checksums (header plus static library).
find_path(LMC_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(LMC_XXHASH_LIBRARY NAMES libxxhash.a xxhash REQUIRED)
add_library(lmc_xxhash INTERFACE)
target_include_directories(lmc_xxhash SYSTEM INTERFACE ${LMC_XXHASH_INCLUDE_DIR})
target_link_libraries(lmc_xxhash INTERFACE ${LMC_XXHASH_LIBRARY})

# libzstd-dev: the lossless serde of the L2 tiers (tier/payload_codec.h),
# linked statically as xxhash is, so the server needs no more runtime packages.
find_path(LMC_ZSTD_INCLUDE_DIR zstd.h REQUIRED)
find_library(LMC_ZSTD_LIBRARY NAMES libzstd.a zstd REQUIRED)
add_library(lmc_zstd INTERFACE)
target_include_directories(lmc_zstd SYSTEM INTERFACE ${LMC_ZSTD_INCLUDE_DIR})
target_link_libraries(lmc_zstd INTERFACE ${LMC_ZSTD_LIBRARY})

# The official BLAKE3 C implementation, built from the sources Debian's
# librust-blake3-dev installs (its c/ directory): a dependency found on the
# system, not code copied into this tree. Its runtime dispatch picks the
# SSE2/SSE4.1/AVX2/AVX-512 kernels the CPU has.
file(GLOB _lmc_blake3_dirs LIST_DIRECTORIES true /usr/share/cargo/registry/blake3-*/c)
find_path(LMC_BLAKE3_SOURCE_DIR blake3_dispatch.c HINTS ${_lmc_blake3_dirs} NO_DEFAULT_PATH)
if(NOT LMC_BLAKE3_SOURCE_DIR)
  message(FATAL_ERROR "the BLAKE3 C sources were not found under /usr/share/cargo/registry: "
                      "apt install librust-blake3-dev (tools/dev.sh deps does)")
endif()
set(_lmc_blake3_srcs blake3.c blake3_dispatch.c blake3_portable.c)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  enable_language(ASM)
  list(APPEND _lmc_blake3_srcs blake3_sse2_x86-64_unix.S blake3_sse41_x86-64_unix.S
       blake3_avx2_x86-64_unix.S blake3_avx512_x86-64_unix.S)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  list(APPEND _lmc_blake3_srcs blake3_neon.c)
else()
  set(_lmc_blake3_defs BLAKE3_NO_SSE2 BLAKE3_NO_SSE41 BLAKE3_NO_AVX2 BLAKE3_NO_AVX512)
endif()
list(TRANSFORM _lmc_blake3_srcs PREPEND ${LMC_BLAKE3_SOURCE_DIR}/)
add_library(lmc_blake3 STATIC ${_lmc_blake3_srcs})
target_include_directories(lmc_blake3 SYSTEM PUBLIC ${LMC_BLAKE3_SOURCE_DIR})
target_compile_definitions(lmc_blake3 PRIVATE ${_lmc_blake3_defs})
set_target_properties(lmc_blake3 PROPERTIES POSITION_INDEPENDENT_CODE ON)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  target_compile_definitions(lmc_blake3 PRIVATE BLAKE3_USE_NEON=1)
endif()
message(STATUS "lmcache: BLAKE3 C sources: ${LMC_BLAKE3_SOURCE_DIR}")
