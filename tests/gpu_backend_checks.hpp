// The tolerance the seed model's GPU tests hold the cuda backend to against its CPU twins and `seq`
// (gpu_backend, gpu_backend_kernels, gpu_backend_randomness), and the check that prints the error.
#pragma once

#include "boost_test.hpp"
#include "gpu_test_util.hpp"

namespace cnn::gpu_test {

// The numerical contract of DESIGN.md is 1e-5 for whole steps; single kernels are held to 1e-4
// relative L2 error (fp32 sums in a different order than the CPU).
constexpr double kTolerance = 1e-4;

}  // namespace cnn::gpu_test

// relative_error(got, want) <= kTolerance, one Boost.Test check in the context `what` (in a file that
// uses namespace cnn::gpu_test).
#define CHECK_CLOSE_REL(got, want, what)                                                       \
  do {                                                                                         \
    const double err_ = relative_error(got, want);                                             \
    BOOST_TEST_CONTEXT(what) { BOOST_TEST(err_ <= kTolerance, what << ": relative error " << err_); } \
  } while (0)
