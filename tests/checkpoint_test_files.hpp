// What the checkpoint file tests share (test_checkpoint, test_checkpoint_refusals,
// test_checkpoint_progress, test_checkpoint_versions): a seed-model state to write, a scratch
// directory per test, a file's bytes, the check that a bad file is refused with one clear line and
// left as it was, and edits with the raw HDF5 API (resealed so that the reader's inner checks are
// reached). Include boost_test.hpp (after BOOST_TEST_MODULE) first.
#pragma once

#include <hdf5.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/model.hpp"
#include "cnn/presets.hpp"
#include "cnn/rng.hpp"

namespace cnn::checkpoint_test {

namespace fs = std::filesystem;

constexpr int kFilters = 32;

inline SeedModel seed_model(int filters) { return SeedModel{{1, 28, 28}, 3, filters, 10}; }

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cnn_ckpt_XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Arbitrary but reproducible bit patterns, including negative values and tiny exponents.
inline void fill(std::vector<float>& values, std::uint64_t key) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = (draw_unit_float(key, i) - 0.5f) * static_cast<float>(1 + i % 7) * 1e-3f;
  }
}

inline CheckpointState make_state(const ParamLayout& layout, const std::string& optimizer, int filters) {
  CheckpointState state;
  CheckpointConfig& c = state.config;
  c.model = "seed";
  c.spec = preset_spec("seed", filters, 10);
  c.filters = filters;
  c.input = {1, 28, 28};
  c.classes = 10;
  c.global_batch = 1000;
  c.lr = 0.1;
  c.optimizer = optimizer;
  c.momentum = 0.9;
  c.beta1 = 0.85;
  c.beta2 = 0.995;
  c.eps = 1e-7;
  c.seed = 42;
  c.dataset = "fashion";
  c.dataset_digest = 0xfedcba9876543210ULL;
  c.train_samples = 60000;
  state.progress = {3, 17, 197, 197000, 4};
  state.metrics = {0.4321, 0.5123, 0.8765};
  state.optimizer_step = 197;
  state.params.resize(static_cast<std::size_t>(layout.total()));
  fill(state.params, 1);
  const std::size_t copies = optimizer == "sgd" ? 0 : optimizer == "momentum" ? 1 : 2;
  state.optimizer_state.resize(copies * state.params.size());
  fill(state.optimizer_state, 2);
  return state;
}

inline std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE(out.good());
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp, not ==: NaN payloads and the sign of zero count too. Empty vectors may have null data().
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs `call`, which must throw E whose message names `path` and contains `expected`, and must leave
// `path` as it was: byte for byte for a file, present or absent for anything else.
template <class E, class Call>
void expect_failure(const std::string& path, const std::string& expected, Call call) {
  const bool existed = fs::exists(path);
  const bool is_file = fs::is_regular_file(path);
  const std::vector<char> before = is_file ? file_bytes(path) : std::vector<char>{};
  bool thrown = false;
  try {
    call();
  } catch (const E& e) {
    thrown = true;
    const std::string message = e.what();
    BOOST_TEST_MESSAGE("  error: " << message);
    BOOST_CHECK_MESSAGE(message.find(expected) != std::string::npos, "'" << message << "' lacks '" << expected << "'");
    BOOST_CHECK_MESSAGE(message.find(path) != std::string::npos, "'" << message << "' does not name " << path);
    BOOST_CHECK_MESSAGE(message.find('\n') == std::string::npos, "message is not one line");
  }
  BOOST_CHECK_MESSAGE(thrown, "expected an exception with '" << expected << "'");
  BOOST_CHECK_EQUAL(fs::exists(path), existed);
  if (is_file) BOOST_CHECK_MESSAGE(file_bytes(path) == before, path << " was modified");
}

// ---- independent edits with the raw HDF5 API, to damage files the way the world does -------------

// An edit through libhdf5 changes bytes the version-2 digest covers: `seal` rewrites the header after
// it, so that the reader's inner checks are reached (as tests/ckpt_seal.py does for h5py edits).
inline void edit_file(const std::string& path, void (*edit)(hid_t file), bool seal = true) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  edit(file);
  BOOST_REQUIRE(H5Fclose(file) >= 0);
  if (seal) reseal_checkpoint(path);
}

// Replaces attribute `name` of `file` (the file, or any object in it).
inline void replace_root_attr(hid_t file, const char* name, hid_t type, const void* value) {
  BOOST_REQUIRE(H5Adelete(file, name) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attr >= 0);
  BOOST_REQUIRE(H5Awrite(attr, type, value) >= 0);
  H5Aclose(attr);
  H5Sclose(space);
}

// File offset of a contiguous dataset's raw data, found independently of our reader.
inline haddr_t data_offset(const std::string& path, const char* dataset_path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, dataset_path, H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(dataset);
  H5Dclose(dataset);
  H5Fclose(file);
  return offset;
}

struct Fixture {
  TempDir tmp;
  ParamLayout layout = seed_model(kFilters).layout();
  std::string path = tmp / "ckpt.h5";
};

}  // namespace cnn::checkpoint_test
