// HDF5 checkpoints written and read back: bitwise round trips of every optimizer's state and of every
// /config attribute (older files without the newer ones, h5py's fixed-length strings), a failed or
// full-disk write that leaves the previous file, readability by h5py, and the write time. The files a
// reader refuses: test_checkpoint_refusals.cpp; /progress ranges: test_checkpoint_progress.cpp;
// version 1: test_checkpoint_versions.cpp; the run directory: test_checkpoint_dir.cpp.
#define BOOST_TEST_MODULE checkpoint
#include "boost_test.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_test_files.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"

namespace fs = std::filesystem;
using namespace cnn;
using namespace cnn::checkpoint_test;  // tests/checkpoint_test_files.hpp

namespace {

constexpr int kBenchFilters = 256;  // the paper's largest model: ~435k parameters
constexpr int kBenchRepeats = 5;

// h5py writes np.bytes_ values as fixed-length, space- or NUL-padded strings.
void make_model_name_fixed_length(hid_t file) {
  const hid_t config = H5Gopen2(file, "/config", H5P_DEFAULT);
  BOOST_REQUIRE(H5Adelete(config, "model") >= 0);
  const char padded[8] = {'s', 'e', 'e', 'd', ' ', ' ', ' ', ' '};
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, sizeof(padded));
  H5Tset_strpad(type, H5T_STR_SPACEPAD);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(config, "model", type, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attr >= 0);
  BOOST_REQUIRE(H5Awrite(attr, type, padded) >= 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Gclose(config);
}

// An interpreter with h5py, or "" (tests using it then skip with a message). The pyenv python3 first
// on PATH may lack it while the Debian one has it.
std::string python_with_h5py() {
  for (const std::string python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import h5py' >/dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

}  // namespace

// ---- round trips --------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(round_trip)

void check_round_trip(const std::string& optimizer) {
  Fixture f;
  CheckpointState saved = make_state(f.layout, optimizer, kFilters);
  saved.config.precision = optimizer == "adam" ? "bf16" : "tf32";
  if (optimizer != "sgd") {  // the options of docs/TRAINING.md, set (sgd keeps their defaults)
    saved.config.lr_schedule = "step:3,7/0.25";
    saved.config.warmup_steps = 11;
    saved.config.total_steps = 1800;
    saved.config.weight_decay = 5e-4;
    saved.config.nesterov = optimizer == "momentum";
    saved.config.label_smoothing = 0.1;
    saved.config.augment = "crop:4,flip";
    saved.config.step_path = optimizer == "momentum" ? "persistent" : "one-step";
  }
  write_checkpoint(f.path, saved, f.layout);
  BOOST_CHECK(!fs::exists(f.path + ".tmp"));

  const CheckpointConfig config = read_checkpoint_config(f.path);
  BOOST_CHECK_EQUAL(config.filters, kFilters);
  BOOST_CHECK_EQUAL(config.optimizer, optimizer);

  const CheckpointState loaded = read_checkpoint(f.path, f.layout);
  BOOST_CHECK(bitwise_equal(loaded.params, saved.params));
  BOOST_CHECK(bitwise_equal(loaded.optimizer_state, saved.optimizer_state));
  BOOST_CHECK_EQUAL(loaded.optimizer_state.size(), saved.optimizer_state.size());
  BOOST_CHECK_EQUAL(loaded.optimizer_step, saved.optimizer_step);

  const CheckpointConfig& a = loaded.config;
  const CheckpointConfig& b = saved.config;
  BOOST_CHECK_EQUAL(a.model, b.model);
  BOOST_CHECK_EQUAL(a.spec, b.spec);
  BOOST_CHECK_EQUAL(a.filters, b.filters);
  BOOST_CHECK_EQUAL(a.input.channels, b.input.channels);
  BOOST_CHECK_EQUAL(a.input.height, b.input.height);
  BOOST_CHECK_EQUAL(a.input.width, b.input.width);
  BOOST_CHECK_EQUAL(a.classes, b.classes);
  BOOST_CHECK_EQUAL(a.global_batch, b.global_batch);
  BOOST_CHECK_EQUAL(a.lr, b.lr);  // doubles stored as doubles: exact
  BOOST_CHECK_EQUAL(a.optimizer, b.optimizer);
  BOOST_CHECK_EQUAL(a.momentum, b.momentum);
  BOOST_CHECK_EQUAL(a.beta1, b.beta1);
  BOOST_CHECK_EQUAL(a.beta2, b.beta2);
  BOOST_CHECK_EQUAL(a.eps, b.eps);
  BOOST_CHECK_EQUAL(a.seed, b.seed);
  BOOST_CHECK_EQUAL(a.dataset, b.dataset);
  BOOST_CHECK_EQUAL(a.dataset_digest, b.dataset_digest);
  BOOST_CHECK_EQUAL(a.train_samples, b.train_samples);
  BOOST_CHECK_EQUAL(a.precision, b.precision);
  BOOST_CHECK_EQUAL(a.lr_schedule, b.lr_schedule);
  BOOST_CHECK_EQUAL(a.warmup_steps, b.warmup_steps);
  BOOST_CHECK_EQUAL(a.total_steps, b.total_steps);
  BOOST_CHECK_EQUAL(a.weight_decay, b.weight_decay);
  BOOST_CHECK_EQUAL(a.nesterov, b.nesterov);
  BOOST_CHECK_EQUAL(a.label_smoothing, b.label_smoothing);
  BOOST_CHECK_EQUAL(a.augment, b.augment);
  BOOST_CHECK_EQUAL(a.step_path, b.step_path);  // "" for sgd: not recorded, and not written

  BOOST_CHECK_EQUAL(loaded.progress.epoch, saved.progress.epoch);
  BOOST_CHECK_EQUAL(loaded.progress.step_in_epoch, saved.progress.step_in_epoch);
  BOOST_CHECK_EQUAL(loaded.progress.global_step, saved.progress.global_step);
  BOOST_CHECK_EQUAL(loaded.progress.samples_seen, saved.progress.samples_seen);
  BOOST_CHECK_EQUAL(loaded.progress.world_size_at_save, saved.progress.world_size_at_save);
  BOOST_CHECK_EQUAL(loaded.metrics.train_loss, saved.metrics.train_loss);
  BOOST_CHECK_EQUAL(loaded.metrics.test_loss, saved.metrics.test_loss);
  BOOST_CHECK_EQUAL(loaded.metrics.test_accuracy, saved.metrics.test_accuracy);
}

BOOST_AUTO_TEST_CASE(sgd_is_bitwise) { check_round_trip("sgd"); }
BOOST_AUTO_TEST_CASE(momentum_is_bitwise) { check_round_trip("momentum"); }
BOOST_AUTO_TEST_CASE(adam_two_states_is_bitwise) { check_round_trip("adam"); }
BOOST_AUTO_TEST_CASE(adamw_two_states_is_bitwise) { check_round_trip("adamw"); }

BOOST_AUTO_TEST_CASE(same_state_gives_same_data_bytes) {
  // Bitwise-identical runs must give identical parameter bytes on disk (only `created` may differ).
  Fixture f;
  const CheckpointState state = make_state(f.layout, "momentum", kFilters);
  write_checkpoint(f.path, state, f.layout);
  const std::vector<char> first = file_bytes(f.path);
  write_checkpoint(f.path, state, f.layout);
  const std::vector<char> second = file_bytes(f.path);
  BOOST_REQUIRE_EQUAL(first.size(), second.size());
  const haddr_t offset = data_offset(f.path, "/model/fc/weight");
  const std::size_t bytes = f.layout.find("fc.weight").size * sizeof(float);
  BOOST_CHECK(std::equal(first.begin() + offset, first.begin() + offset + bytes, second.begin() + offset));
}

// Files written before specs (and adam, --precision, the schedules and regularisers) existed have no
// spec, beta1, beta2, eps, precision, lr_schedule, warmup_steps, total_steps, weight_decay, nesterov or
// label_smoothing attributes (nor augment, --augment's).
void remove_new_config_attrs(hid_t file) {
  const hid_t config = H5Gopen2(file, "/config", H5P_DEFAULT);
  for (const char* name : {"spec", "beta1", "beta2", "eps", "precision", "lr_schedule", "warmup_steps", "total_steps",
                           "weight_decay", "nesterov", "label_smoothing", "augment"})
    BOOST_REQUIRE(H5Adelete(config, name) >= 0);
  H5Gclose(config);
}

BOOST_AUTO_TEST_CASE(checkpoints_without_a_spec_derive_it_from_model_and_filters) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  edit_file(f.path, remove_new_config_attrs);
  const CheckpointConfig c = read_checkpoint_config(f.path);
  BOOST_CHECK_EQUAL(c.spec, "conv3x3:" + std::to_string(kFilters) + " relu maxpool2 fc:10");
  BOOST_CHECK_EQUAL(c.beta1, 0.9);
  BOOST_CHECK_EQUAL(c.precision, "fp32");
  BOOST_CHECK_EQUAL(c.lr_schedule, "constant");
  BOOST_CHECK_EQUAL(c.warmup_steps, 0);
  BOOST_CHECK_EQUAL(c.total_steps, 0);
  BOOST_CHECK_EQUAL(c.weight_decay, 0.0);
  BOOST_CHECK_EQUAL(c.nesterov, false);
  BOOST_CHECK_EQUAL(c.label_smoothing, 0.0);
  BOOST_CHECK_EQUAL(c.augment, "none");
  BOOST_CHECK_EQUAL(c.step_path, "");  // a resume of auto measures again
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).params.size(), static_cast<std::size_t>(f.layout.total()));
}

BOOST_AUTO_TEST_CASE(fixed_length_strings_are_accepted) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, make_model_name_fixed_length);
  BOOST_CHECK_EQUAL(read_checkpoint_config(f.path).model, "seed");
}

BOOST_AUTO_TEST_SUITE_END()

// ---- writing failures ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(write_failure)

BOOST_AUTO_TEST_CASE(failed_write_leaves_previous_checkpoint) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  // A directory where the temporary must go makes H5Fcreate fail, whoever runs the test.
  fs::create_directory(f.path + ".tmp");
  expect_failure<IoError>(f.path + ".tmp", "cannot create: Is a directory",
                          [&] { write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout); });
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).config.optimizer, "sgd");
}

BOOST_AUTO_TEST_CASE(missing_directory_is_io_error) {
  Fixture f;
  const std::string path = f.tmp / "no/such/dir/ckpt.h5";
  expect_failure<IoError>(path + ".tmp", "No such file",
                          [&] { write_checkpoint(path, make_state(f.layout, "sgd", kFilters), f.layout); });
}

// A full disk: write(2) fails with ENOSPC. /dev/full gives exactly that, reached through a symlink where
// the .tmp goes (open follows it). One IoError line naming the file, the .tmp gone, the previous kept.
BOOST_AUTO_TEST_CASE(full_disk_is_one_io_error_and_the_previous_file_stays) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  BOOST_REQUIRE_EQUAL(::symlink("/dev/full", (f.path + ".tmp").c_str()), 0);
  try {
    write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
    BOOST_ERROR("a write to /dev/full succeeded");
  } catch (const IoError& e) {
    BOOST_TEST_MESSAGE("  error: " << e.what());
    BOOST_CHECK_EQUAL(std::string(e.what()), f.path + ".tmp: write failed: No space left on device");
  }
  BOOST_CHECK(!fs::exists(fs::symlink_status(f.path + ".tmp")));  // the link itself removed
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).config.optimizer, "sgd");
}

BOOST_AUTO_TEST_CASE(buffers_not_matching_the_layout_are_a_bug) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  state.optimizer_state.pop_back();
  BOOST_CHECK_THROW(write_checkpoint(f.path, state, f.layout), Error);
  BOOST_CHECK(!fs::exists(f.path));
  BOOST_CHECK(!fs::exists(f.path + ".tmp"));
}

BOOST_AUTO_TEST_SUITE_END()

// ---- interoperability and speed ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(readable_by_h5py_with_the_same_checksum) {
  const std::string python = python_with_h5py();
  if (python.empty()) {
    BOOST_TEST_MESSAGE("skipped: no python3 with h5py");
    return;
  }
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  // Recomputes FNV-1a 64 in Python: an independent check of the documented checksum definition.
  const std::string script =
      "import sys, h5py, numpy as np\n"
      "f = h5py.File(sys.argv[1], 'r')\n"
      "w = f['/model/conv1/weight']\n"
      "print('h5py: /model/conv1/weight shape', w.shape, 'format', f.attrs['format'])\n"
      "assert w.shape == (32, 1, 3, 3) and w.dtype == np.float32\n"
      "assert f.attrs['format'] == 'cnn_mpi-checkpoint' and f['/config'].attrs['optimizer'] == 'momentum'\n"
      "assert f.attrs['version'] == 2 and f.userblock_size == 512\n"
      "import zlib\n"
      "data = open(sys.argv[1], 'rb').read()\n"
      "line = data[:512].split(b'\\n')[0].decode()\n"
      "assert line == 'cnn_mpi-checkpoint v2 crc32=%08x bytes=%d' % (zlib.crc32(data[512:]), len(data) - 512), line\n"
      "for path in ('/model/fc/bias', '/optimizer/conv1/bias/velocity'):\n"
      "    h = 0xcbf29ce484222325\n"
      "    for b in f[path][()].astype('<f4').tobytes():\n"
      "        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff\n"
      "    assert h == int(f[path].attrs['checksum']), path\n";
  const std::string script_path = f.tmp / "check.py";
  std::ofstream(script_path) << script;
  const int status = std::system((python + " " + script_path + " " + f.path).c_str());
  BOOST_CHECK_EQUAL(status, 0);
  if (std::system("command -v h5dump >/dev/null 2>&1") == 0) {
    BOOST_CHECK_EQUAL(std::system(("h5dump -H " + f.path + " >/dev/null").c_str()), 0);
  }
}

BOOST_AUTO_TEST_CASE(write_time_d256_with_fsync) {
  TempDir tmp;
  const ParamLayout layout = seed_model(kBenchFilters).layout();
  const CheckpointState state = make_state(layout, "momentum", kBenchFilters);
  const std::string path = tmp / "ckpt-d256.h5";
  std::vector<double> ms;
  for (int i = 0; i < kBenchRepeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    write_checkpoint(path, state, layout);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto start = std::chrono::steady_clock::now();
  const CheckpointState loaded = read_checkpoint(path, layout);
  const double read_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  BOOST_CHECK(bitwise_equal(loaded.params, state.params));
  BOOST_TEST_MESSAGE("d=256 momentum checkpoint: " << layout.total() << " params + " << layout.total()
                     << " velocity floats, file " << fs::file_size(path) << " bytes; write+fsync median "
                     << ms[ms.size() / 2] << " ms (min " << ms.front() << ", max " << ms.back() << ", "
                     << kBenchRepeats << " runs); read+verify " << read_ms << " ms");
}
