# lmc_add_library(name FOLDER <src folder> [SRCS ...] DEPS ...): the library of one
# layer folder. Its include path exposes only that folder (through a directory
# holding one link to it); a layer sees the folders of the layers it depends
# on through their libraries, and no other. So an include that runs upward, or
# sideways to a layer not depended on, fails to build. A folder without
# sources (an interface-only layer) makes an INTERFACE library.
function(lmc_add_library name)
  cmake_parse_arguments(ARG "" "FOLDER" "SRCS;DEPS" ${ARGN})
  set(view ${PROJECT_BINARY_DIR}/layers/${ARG_FOLDER})
  file(MAKE_DIRECTORY ${view})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${ARG_FOLDER} ${view}/${ARG_FOLDER} SYMBOLIC)
  if(ARG_SRCS)
    add_library(${name} STATIC ${ARG_SRCS})
    target_include_directories(${name} PUBLIC ${view} ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} PUBLIC ${ARG_DEPS} lmc_sanitizers PRIVATE lmc_warnings)
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${view} ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# Environment of every test: sanitizer options (the TSan build suppresses reports
# inside the uninstrumented libzmq, see tools/tsan.supp).
#
# A sanitizer build needs llvm-symbolizer (Debian's llvm-14, which clang does
# not pull in): without it a report names no function, so it cannot be read,
# and TSan's suppressions by function name (tools/tsan.supp) match nothing; on
# a fresh Debian 12 router_loop_test then failed on every run. The tests are
# given its path, so they do not depend on it being on PATH.
set(LMC_TEST_ENV "")
if(LMC_SANITIZE)
  find_program(LMC_LLVM_SYMBOLIZER NAMES llvm-symbolizer llvm-symbolizer-14
               HINTS /usr/lib/llvm-14/bin)
  if(NOT LMC_LLVM_SYMBOLIZER)
    message(FATAL_ERROR "LMC_SANITIZE=${LMC_SANITIZE} needs llvm-symbolizer, to name the functions "
            "of a report and to apply tools/tsan.supp: apt install llvm-14 (tools/dev.sh does)")
  endif()
  set(_lmc_symbolizer "external_symbolizer_path=${LMC_LLVM_SYMBOLIZER}")
endif()
if(LMC_SANITIZE MATCHES "thread")
  set(LMC_TEST_ENV "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tools/tsan.supp:halt_on_error=1:second_deadlock_stack=1:${_lmc_symbolizer}")
elseif(LMC_SANITIZE MATCHES "address")
  set(LMC_TEST_ENV "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:${_lmc_symbolizer};UBSAN_OPTIONS=print_stacktrace=1:${_lmc_symbolizer}")
endif()

# The test binaries share one precompiled header of GoogleTest and GoogleMock:
# those two headers cost about 2 of the 2.8 s a small test file takes to
# compile, and the suite has some 150 test files, built three times in CI
# (Release, ASan, TSan). The header is made once per build, by lmc_test_pch,
# with the flags every test has (sanitizers, warnings, PIE); a test's own -D
# and -I do not invalidate it (neither GCC nor Clang requires them to match
# when the header's content does not use them). One -D does matter, as glibc's
# headers read it: hiredis's pkg-config adds _FILE_OFFSET_BITS=64 to whatever
# links the resp adapter, so every test and the header define it (on the
# 64-bit hosts we build for it changes nothing else).
function(lmc_add_test_pch)
  add_executable(lmc_test_pch EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/tests/pch_anchor.cc)
  target_compile_options(lmc_test_pch PRIVATE ${LMC_TEST_CODE_OPTIMIZATION})
  target_link_libraries(lmc_test_pch PRIVATE GTest::gtest GTest::gtest_main lmc_sanitizers lmc_warnings)
  target_compile_definitions(lmc_test_pch PRIVATE _FILE_OFFSET_BITS=64)
  target_precompile_headers(lmc_test_pch PRIVATE <gtest/gtest.h> <gmock/gmock.h>)
endfunction()

# The test files' own code is optimised less than the code they test, which
# the layers' libraries hold, built as the build type says: -O1 where the
# build type optimises (GCC compiles a test file in about 30 % less time than
# at -O3), -O0 under a sanitizer (Clang: about 25 % less than -O1; every
# access is instrumented all the same). Test files are over half of each
# tree's compile time, and CI compiles them three times. The precompiled
# header gets the same level: Clang refuses one made at another.
if(LMC_SANITIZE)
  set(LMC_TEST_CODE_OPTIMIZATION -O0)
elseif(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
  set(LMC_TEST_CODE_OPTIMIZATION -O1)
else()
  set(LMC_TEST_CODE_OPTIMIZATION "")
endif()

# The tests whose process never starts a second thread or another process
# are listed in LMC_SINGLE_THREADED_TESTS (tests/CMakeLists.txt). A data race
# needs two threads, so the TSan tree builds none of them; a tree configured
# with LMC_BUILD_SINGLE_THREADED_TESTS=OFF (tools/dev.sh's full suite does so
# for Release, as its ASan tree runs them) builds none either. Where they are
# not built each is left out of `all`, disabled, and labelled single_thread
# (tools/dev.sh runs those trees' suites with -LE single_thread). Where they
# are built, each is linked with tests/fakes/single_thread_guard.cc, which
# fails it the moment it starts a thread or a process, so the list cannot
# silently go stale (under ASan too: its runtime's pthread_create and fork
# are weak, and it starts its own threads and symbolizer without them).

# lmc_add_test(name SRCS ... DEPS ... [LABELS ...]): one GoogleTest binary, registered with CTest.
function(lmc_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_definitions(${name} PRIVATE _FILE_OFFSET_BITS=64)
  target_precompile_headers(${name} REUSE_FROM lmc_test_pch)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main lmc_warnings)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  target_compile_options(${name} PRIVATE ${LMC_TEST_CODE_OPTIMIZATION})
  set(single_threaded OFF)
  if(name IN_LIST LMC_SINGLE_THREADED_TESTS)
    set(single_threaded ON)
    list(APPEND ARG_LABELS single_thread)
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fakes/single_thread_guard.cc)
  endif()
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT "${LMC_TEST_ENV}")
  if(single_threaded AND (NOT LMC_BUILD_SINGLE_THREADED_TESTS OR LMC_SANITIZE MATCHES "thread"))
    set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL ON)
    set_tests_properties(${name} PROPERTIES DISABLED ON)
  endif()
endfunction()

# lmc_add_bench(name SRCS ... DEPS ...): one Google Benchmark binary.
function(lmc_add_bench name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark lmc_warnings)
endfunction()
