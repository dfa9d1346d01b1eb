// One include, compiled with exactly the include path of one layer's library
// (tests/layering/CMakeLists.txt names the layer and LMC_PROBE_HEADER). The
// layering check builds it and expects a "not found" for a header of a layer
// above or beside, and a clean compile for a header of a layer below.
// Thread-safety: nothing runs; this file only compiles.
#include LMC_PROBE_HEADER
