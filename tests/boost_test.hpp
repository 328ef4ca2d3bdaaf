// Includes Boost.Test as the build found it: the compiled library where it exists, the header-only
// variant where only the headers are installed (the GPU machine). Define BOOST_TEST_MODULE first.
#pragma once

#ifdef CNN_BOOST_TEST_HEADER_ONLY
#include <boost/test/included/unit_test.hpp>
#else
#include <boost/test/unit_test.hpp>
#endif
