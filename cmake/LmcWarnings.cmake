# lmc_warnings: an INTERFACE target every project target links to.
add_library(lmc_warnings INTERFACE)
target_compile_options(lmc_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough
  $<$<CXX_COMPILER_ID:Clang>:-Wthread-safety -Werror=thread-safety>
  $<$<BOOL:${LMC_WERROR}>:-Werror>)
