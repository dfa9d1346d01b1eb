// The translation unit that makes the tests' shared precompiled header
// (lmc_add_test_pch in cmake/LmcHelpers.cmake); it has no test of its own.
#include <gtest/gtest.h>
