// Checkpoint versions: a version-2 file carries its run_id and is verified whole by its header; a
// version-1 file (no header, no run_id, as the old writer made it) still loads, verified by its
// dataset checksums and said not to be verified whole, with stale boundary stats cleared, which
// version 2 refuses; an HDF5 file saying version 2 without its header is refused.
#define BOOST_TEST_MODULE checkpoint_versions
#include "boost_test.hpp"

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_test_files.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"

using namespace cnn;
using namespace cnn::checkpoint_test;  // tests/checkpoint_test_files.hpp

namespace {

void set_version_1(hid_t file) {
  const std::int64_t version = 1;
  replace_root_attr(file, "version", H5T_NATIVE_INT64, &version);
  BOOST_REQUIRE(H5Adelete(file, "run_id") >= 0);
}

// A version-1 file as the old writer made it: no user block, version 1, no run_id. libhdf5 takes the
// bytes after the header (it finds its superblock at 0 and rebases), and the edit rewrites the superblock.
void make_version_1(const std::string& path) {
  std::vector<char> bytes = file_bytes(path);
  bytes.erase(bytes.begin(), bytes.begin() + 512);
  write_bytes(path, bytes);
  edit_file(path, set_version_1, false);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(run_id_round_trips) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "sgd", kFilters);
  state.run_id = "20250301T123456Z-5f3a9c1e";
  write_checkpoint(f.path, state, f.layout);
  const CheckpointState loaded = read_checkpoint(f.path, f.layout);
  BOOST_CHECK_EQUAL(loaded.run_id, state.run_id);
  BOOST_CHECK(loaded.verified_whole);
}

// ---- version 1 ------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(version_1_files_load_not_verified_whole) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  state.run_id = "dropped-by-version-1";
  write_checkpoint(f.path, state, f.layout);
  make_version_1(f.path);
  BOOST_CHECK_EQUAL(read_checkpoint_config(f.path).filters, kFilters);
  const CheckpointState loaded = read_checkpoint(f.path, f.layout);
  BOOST_CHECK(!loaded.verified_whole);
  BOOST_CHECK_EQUAL(loaded.run_id, "");
  BOOST_CHECK(bitwise_equal(loaded.params, state.params));
  BOOST_CHECK_EQUAL(loaded.progress.global_step, 197);
}

void add_stale_boundary_stats(hid_t file) {
  const hid_t progress = H5Gopen2(file, "/progress", H5P_DEFAULT);
  const std::pair<const char*, std::int64_t> values[] = {
      {"epoch", 4}, {"step_in_epoch", 0}, {"global_step", 240}, {"samples_seen", 240000}, {"epoch_correct", 500},
      {"epoch_samples", 700}};
  for (const auto& [name, value] : values) {
    const hid_t attr = H5Aopen(progress, name, H5P_DEFAULT);
    BOOST_REQUIRE(H5Awrite(attr, H5T_NATIVE_INT64, &value) >= 0);
    H5Aclose(attr);
  }
  const std::int64_t step = 240;
  const hid_t optimizer = H5Gopen2(file, "/optimizer", H5P_DEFAULT);
  const hid_t attr = H5Aopen(optimizer, "step", H5P_DEFAULT);
  BOOST_REQUIRE(H5Awrite(attr, H5T_NATIVE_INT64, &step) >= 0);
  H5Aclose(attr);
  H5Gclose(optimizer);
  H5Gclose(progress);
}

// Version-1 writers carried a resumed run's partial-epoch stats into later boundary checkpoints: such
// a file loads with them cleared (they would be added to the next epoch's loss), a version-2 one not.
BOOST_AUTO_TEST_CASE(stale_boundary_stats_cleared_in_version_1_refused_in_version_2) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  edit_file(f.path, add_stale_boundary_stats);
  expect_failure<InputError>(f.path, "epoch_correct 500 and epoch_samples 700 are out of range",
                             [&] { read_checkpoint(f.path, f.layout); });
  make_version_1(f.path);
  const CheckpointState loaded = read_checkpoint(f.path, f.layout);
  BOOST_CHECK_EQUAL(loaded.progress.epoch_samples, 0);
  BOOST_CHECK_EQUAL(loaded.progress.epoch, 4);
}

BOOST_AUTO_TEST_CASE(version_1_without_its_version_or_version_2_without_its_header) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  std::vector<char> bytes = file_bytes(f.path);
  bytes.erase(bytes.begin(), bytes.begin() + 512);  // the header stripped: an HDF5 file saying version 2
  write_bytes(f.path, bytes);
  expect_failure<InputError>(f.path, "the version attribute says 2 but the file has no version-2 header",
                             [&] { read_checkpoint_config(f.path); });
}

BOOST_AUTO_TEST_SUITE_END()
