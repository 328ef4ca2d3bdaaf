// Helpers shared by the tests that write files for a reader to refuse or accept: a scratch
// directory, and the message of the exception a call is expected to throw. Include boost_test.hpp
// (after BOOST_TEST_MODULE) first.
#pragma once

#include <stdlib.h>

#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cnn::test {

// A fresh directory (mkdtemp), removed with everything in it when the object goes.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnn_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// The message of the E that f() throws; a test error (and "") when it throws something else or
// nothing.
template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
    return "";
  }
  BOOST_ERROR("no exception");
  return "";
}

}  // namespace cnn::test
