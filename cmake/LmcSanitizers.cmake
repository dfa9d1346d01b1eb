# lmc_sanitizers: INTERFACE target carrying -fsanitize flags from LMC_SANITIZE.
add_library(lmc_sanitizers INTERFACE)
if(LMC_SANITIZE)
  if(LMC_SANITIZE MATCHES "thread" AND LMC_SANITIZE MATCHES "address")
    message(FATAL_ERROR "LMC_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  set(_lmc_san_flags -fsanitize=${LMC_SANITIZE} -fno-omit-frame-pointer -g)
  if(LMC_SANITIZE MATCHES "undefined")
    list(APPEND _lmc_san_flags -fno-sanitize-recover=undefined)
  endif()
  target_compile_options(lmc_sanitizers INTERFACE ${_lmc_san_flags})
  target_link_options(lmc_sanitizers INTERFACE ${_lmc_san_flags})
  message(STATUS "lmcache: sanitizers enabled: ${LMC_SANITIZE}")
endif()

# Fuzz targets: the whole tree carries libFuzzer's coverage instrumentation;
# only the fuzz executables link libFuzzer's main (fuzz/CMakeLists.txt).
if(LMC_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LMC_BUILD_FUZZERS needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  target_compile_options(lmc_sanitizers INTERFACE -fsanitize=fuzzer-no-link)
  target_link_options(lmc_sanitizers INTERFACE -fsanitize=fuzzer-no-link)
endif()
