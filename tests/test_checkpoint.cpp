// HDF5 checkpoints: bitwise round trips, one clear error for each kind of bad file (and the file left
// as it was): the whole-file digest of version 2, the inner checks behind it (files edited with libhdf5
// are resealed to reach them), every /progress and /metrics range; version-1 files; a full disk;
// readability by h5py, and the write time. The run directory: test_checkpoint_dir.cpp.
#define BOOST_TEST_MODULE checkpoint
#include "boost_test.hpp"

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"
#include "cnn/rng.hpp"

namespace fs = std::filesystem;
using namespace cnn;

namespace {

constexpr int kFilters = 32;
constexpr int kBenchFilters = 256;  // the paper's largest model: ~435k parameters
constexpr int kBenchRepeats = 5;

SeedModel seed_model(int filters) { return SeedModel{{1, 28, 28}, 3, filters, 10}; }

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
void fill(std::vector<float>& values, std::uint64_t key) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = (draw_unit_float(key, i) - 0.5f) * static_cast<float>(1 + i % 7) * 1e-3f;
  }
}

CheckpointState make_state(const ParamLayout& layout, const std::string& optimizer, int filters) {
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

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE(out.good());
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
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
void edit_file(const std::string& path, void (*edit)(hid_t file), bool seal = true) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  edit(file);
  BOOST_REQUIRE(H5Fclose(file) >= 0);
  if (seal) reseal_checkpoint(path);
}

const char* const kUnknownPrecision = "fp16";
const char* const kUnknownStepPath = "sideways";

// Replaces attribute `name` of `file` (the file, or any object in it).
void replace_root_attr(hid_t file, const char* name, hid_t type, const void* value) {
  BOOST_REQUIRE(H5Adelete(file, name) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(attr >= 0);
  BOOST_REQUIRE(H5Awrite(attr, type, value) >= 0);
  H5Aclose(attr);
  H5Sclose(space);
}

void set_wrong_format(hid_t file) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  const char* value = "something-else";
  replace_root_attr(file, "format", type, &value);
  H5Tclose(type);
}

void set_future_version(hid_t file) {
  const std::int64_t version = kCheckpointVersion + 1;
  replace_root_attr(file, "version", H5T_NATIVE_INT64, &version);
}

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

void delete_fc_weight(hid_t file) { BOOST_REQUIRE(H5Ldelete(file, "/model/fc/weight", H5P_DEFAULT) >= 0); }

void delete_epoch_attr(hid_t file) { BOOST_REQUIRE(H5Adelete_by_name(file, "/progress", "epoch", H5P_DEFAULT) >= 0); }

void make_conv_bias_double(hid_t file) {
  BOOST_REQUIRE(H5Ldelete(file, "/model/conv1/bias", H5P_DEFAULT) >= 0);
  const hsize_t dims[1] = {kFilters};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t dataset = H5Dcreate2(file, "/model/conv1/bias", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT);
  BOOST_REQUIRE(dataset >= 0);
  H5Dclose(dataset);
  H5Sclose(space);
}

// File offset of a contiguous dataset's raw data, found independently of our reader.
haddr_t data_offset(const std::string& path, const char* dataset_path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, dataset_path, H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(dataset);
  H5Dclose(dataset);
  H5Fclose(file);
  return offset;
}

// An interpreter with h5py, or "" (tests using it then skip with a message). The pyenv python3 first
// on PATH may lack it while the Debian one has it.
std::string python_with_h5py() {
  for (const std::string python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import h5py' >/dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

struct Fixture {
  TempDir tmp;
  ParamLayout layout = seed_model(kFilters).layout();
  std::string path = tmp / "ckpt.h5";
};

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

// ---- bad input: each one clear error, file untouched ----------------------------------------------

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(missing_file_is_io_error) {
  Fixture f;
  expect_failure<IoError>(f.path, "No such file", [&] { read_checkpoint(f.path, f.layout); });
  expect_failure<IoError>(f.path, "No such file", [&] { read_checkpoint_config(f.path); });
}

BOOST_AUTO_TEST_CASE(text_file_is_not_hdf5) {
  Fixture f;
  std::ofstream(f.path) << "epoch,loss\n1,0.5\n";
  expect_failure<InputError>(f.path, "not an HDF5 file", [&] { read_checkpoint(f.path, f.layout); });
}

BOOST_AUTO_TEST_CASE(wrong_format_name) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, set_wrong_format);
  expect_failure<InputError>(f.path, "not a cnn_mpi checkpoint (format is 'something-else'",
                             [&] { read_checkpoint_config(f.path); });
}

BOOST_AUTO_TEST_CASE(unsupported_version_says_found_and_expected) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, set_future_version);
  expect_failure<InputError>(f.path, "unsupported checkpoint version 3 (this program reads versions 1 and 2)",
                             [&] { read_checkpoint(f.path, f.layout); });
}

BOOST_AUTO_TEST_CASE(truncated_file) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  std::vector<char> bytes = file_bytes(f.path);
  bytes.resize(bytes.size() / 2);
  write_bytes(f.path, bytes);
  expect_failure<InputError>(f.path, "checkpoint size mismatch (", [&] { read_checkpoint(f.path, f.layout); });
  expect_failure<InputError>(f.path, "the file is truncated", [&] { read_checkpoint_config(f.path); });
}

BOOST_AUTO_TEST_CASE(flipped_bytes_caught_by_the_whole_file_digest_then_by_the_dataset_checksum) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  const haddr_t offset = data_offset(f.path, "/model/fc/weight");
  BOOST_REQUIRE(offset != HADDR_UNDEF);
  std::vector<char> bytes = file_bytes(f.path);
  const std::size_t middle = offset + f.layout.find("fc.weight").size * sizeof(float) / 2;
  BOOST_REQUIRE(middle + 2 < bytes.size());
  bytes[middle] ^= 0x5a;
  bytes[middle + 1] ^= 0x01;
  write_bytes(f.path, bytes);
  expect_failure<InputError>(f.path, "checksum mismatch over the whole file (crc32 ",
                             [&] { read_checkpoint(f.path, f.layout); });
  // With the header recomputed over the damage, the dataset's own checksum still catches it.
  reseal_checkpoint(f.path);
  expect_failure<InputError>(f.path, "checksum mismatch in /model/fc/weight (file corrupted?)",
                             [&] { read_checkpoint(f.path, f.layout); });
}

// Every byte of the header matters, and so do the length and every byte behind it: a damaged file is
// refused before libhdf5 parses any of it.
BOOST_AUTO_TEST_CASE(damaged_header_length_or_body_is_refused_whole) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "momentum", kFilters), f.layout);
  const std::vector<char> good = file_bytes(f.path);
  const std::string line(good.data(), std::find(good.begin(), good.end(), '\n') - good.begin());
  BOOST_TEST_MESSAGE("header: " << line);
  BOOST_REQUIRE_EQUAL(line.rfind("cnn_mpi-checkpoint v2 crc32=", 0), 0u);
  struct Damage {
    std::size_t offset;
    char value;
    const char* expected;
  };
  const Damage damages[] = {
      {0, 'C', "checkpoint header is damaged or missing"},           // the prefix
      {20, '3', "unsupported checkpoint version 3"},                  // "v2" -> "v3"
      {20, 'x', "checkpoint header is damaged"},                      // "v2" -> "vx"
      {30, line[30] == 'f' ? 'e' : 'f', "checksum mismatch over the whole file"},  // a crc32 digit
      {line.size() - 1, '7', "checkpoint size mismatch"},            // the last digit of bytes=
      {line.size() + 1, 'x', "checkpoint header is damaged"},        // the zero padding
      {511, '\1', "checkpoint header is damaged"},
      {512, 'X', "checksum mismatch over the whole file"},           // libhdf5's signature
      {600, '\x55', "checksum mismatch over the whole file"},        // the superblock and root group
      {good.size() - 1, '\x42', "checksum mismatch over the whole file"}};
  for (const Damage& d : damages) {
    std::vector<char> bytes = good;
    bytes[d.offset] = bytes[d.offset] == d.value ? static_cast<char>(d.value ^ 1) : d.value;
    write_bytes(f.path, bytes);
    BOOST_TEST_CONTEXT("byte " << d.offset) {
      expect_failure<InputError>(f.path, d.expected, [&] { read_checkpoint_config(f.path); });
    }
  }
  std::vector<char> longer = good;
  longer.push_back('\0');
  write_bytes(f.path, longer);
  expect_failure<InputError>(f.path, "checkpoint size mismatch", [&] { read_checkpoint(f.path, f.layout); });
  std::vector<char> header_only(good.begin(), good.begin() + 300);
  write_bytes(f.path, header_only);
  expect_failure<InputError>(f.path, "truncated inside its header", [&] { read_checkpoint(f.path, f.layout); });
}

// A FIFO would block open(2) forever; a device or a directory is no file either. One IoError line each.
BOOST_AUTO_TEST_CASE(non_regular_files_are_refused_without_blocking) {
  Fixture f;
  BOOST_REQUIRE_EQUAL(::mkfifo(f.path.c_str(), 0600), 0);
  expect_failure<IoError>(f.path, "is a FIFO (named pipe), not a regular file", [&] { read_checkpoint_config(f.path); });
  expect_failure<IoError>(f.path, "is a FIFO", [&] { read_checkpoint(f.path, f.layout); });
  expect_failure<IoError>("/dev/zero", "is a character device", [&] { read_checkpoint_config("/dev/zero"); });
  expect_failure<IoError>(f.tmp.path.string(), "is a directory", [&] { read_checkpoint_config(f.tmp.path.string()); });
}

BOOST_AUTO_TEST_CASE(missing_dataset) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, delete_fc_weight);
  // The config alone is still readable: the caller needs it to build the layout.
  BOOST_CHECK_EQUAL(read_checkpoint_config(f.path).filters, kFilters);
  expect_failure<InputError>(f.path, "missing dataset /model/fc/weight", [&] { read_checkpoint(f.path, f.layout); });
}

// /config's string attribute `name` replaced by `*value` (variable-length, as the writer stores them).
void replace_config_string(hid_t file, const char* name, const char* const* value) {
  const hid_t config = H5Gopen2(file, "/config", H5P_DEFAULT);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  replace_root_attr(config, name, type, value);
  H5Tclose(type);
  H5Gclose(config);
}

void set_unknown_precision(hid_t file) { replace_config_string(file, "precision", &kUnknownPrecision); }

BOOST_AUTO_TEST_CASE(unknown_precision_is_refused) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, set_unknown_precision);
  expect_failure<InputError>(f.path, "/config precision 'fp16' is not fp32, tf32 or bf16",
                             [&] { read_checkpoint_config(f.path); });
}

void set_unknown_step_path(hid_t file) { replace_config_string(file, "step_path", &kUnknownStepPath); }

BOOST_AUTO_TEST_CASE(unknown_step_path_is_refused) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  state.config.step_path = "persistent";
  write_checkpoint(f.path, state, f.layout);
  edit_file(f.path, set_unknown_step_path);
  expect_failure<InputError>(f.path, "/config step_path 'sideways' is not persistent or one-step",
                             [&] { read_checkpoint_config(f.path); });
}

BOOST_AUTO_TEST_CASE(missing_attribute) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, delete_epoch_attr);
  expect_failure<InputError>(f.path, "missing attribute 'epoch' on /progress",
                             [&] { read_checkpoint(f.path, f.layout); });
}

BOOST_AUTO_TEST_CASE(wrong_shape) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  const ParamLayout smaller = seed_model(kFilters / 2).layout();
  expect_failure<InputError>(f.path, "/model/conv1/weight has shape [32,1,3,3], expected [16,1,3,3]",
                             [&] { read_checkpoint(f.path, smaller); });
}

BOOST_AUTO_TEST_CASE(wrong_datatype) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, make_conv_bias_double);
  expect_failure<InputError>(f.path, "wrong datatype: /model/conv1/bias", [&] { read_checkpoint(f.path, f.layout); });
}

// ---- /progress, /optimizer and /metrics against the file's own /config --------------------------------

// make_state's config: 60000 images in batches of 1000, so 60 steps per epoch; progress {3, 17, 197, ...}.
void check_progress_refused(const std::string& expected, void (*change)(CheckpointState&)) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  change(state);
  write_checkpoint(f.path, state, f.layout);  // the writer stores what it is given; the reader judges
  BOOST_TEST_CONTEXT(expected) {
    expect_failure<InputError>(f.path, expected, [&] { read_checkpoint(f.path, f.layout); });
  }
}

BOOST_AUTO_TEST_CASE(every_progress_value_is_range_checked) {
  check_progress_refused("/progress step_in_epoch -1 is out of range (0..59 for 60000 images in batches of 1000)",
                         [](CheckpointState& s) { s.progress.step_in_epoch = -1; });
  check_progress_refused("/progress step_in_epoch 60 is out of range",
                         [](CheckpointState& s) { s.progress.step_in_epoch = 60; });
  check_progress_refused("/progress epoch -1 is out of range", [](CheckpointState& s) { s.progress.epoch = -1; });
  check_progress_refused("/progress epoch 4611686018427387904 is out of range",
                         [](CheckpointState& s) { s.progress.epoch = std::int64_t{1} << 62; });
  check_progress_refused("/progress global_step 198 does not match epoch 3 and step_in_epoch 17 (expected 197)",
                         [](CheckpointState& s) { s.progress.global_step = s.optimizer_step = 198; });
  check_progress_refused("/progress samples_seen 196999 does not match",
                         [](CheckpointState& s) { s.progress.samples_seen -= 1; });
  check_progress_refused("/progress world_size_at_save 0 is out of range (1..1000)",
                         [](CheckpointState& s) { s.progress.world_size_at_save = 0; });
  check_progress_refused("/optimizer step 196 does not match /progress global_step 197",
                         [](CheckpointState& s) { s.optimizer_step = 196; });
  check_progress_refused("/progress epoch_loss_sum nan is not a finite",
                         [](CheckpointState& s) { s.progress.epoch_loss_sum = std::nan(""); });
  check_progress_refused("/progress epoch_loss_sum -1 is not a finite, non-negative number",
                         [](CheckpointState& s) { s.progress.epoch_loss_sum = -1.0; });
  check_progress_refused("epoch_correct 11 and epoch_samples 10 are out of range", [](CheckpointState& s) {
    s.progress.epoch_correct = 11;
    s.progress.epoch_samples = 10;
  });
  check_progress_refused("(0 <= correct <= samples <= 17000 after 17 step(s))",
                         [](CheckpointState& s) { s.progress.epoch_samples = 17001; });
  check_progress_refused("/progress epoch_loss_sum 2.5 is not 0 at an epoch boundary", [](CheckpointState& s) {
    s.progress = {4, 0, 240, 240000, 4, 2.5, 0, 0};
    s.optimizer_step = 240;
  });
  check_progress_refused("/metrics train_loss inf is not a finite",
                         [](CheckpointState& s) { s.metrics.train_loss = HUGE_VAL; });
  check_progress_refused("/metrics test_loss -0.5 is not a finite, non-negative number",
                         [](CheckpointState& s) { s.metrics.test_loss = -0.5; });
  check_progress_refused("/metrics test_accuracy 1.5 is out of range (0..1)",
                         [](CheckpointState& s) { s.metrics.test_accuracy = 1.5; });
}

// What the trainer really writes passes: a mid-epoch save with partial stats (fewer samples than
// steps x batch after --on-nonfinite skip), an epoch boundary, the end of a one-epoch run, a last
// batch that is smaller than the others.
BOOST_AUTO_TEST_CASE(checkpoints_the_trainer_writes_pass) {
  Fixture f;
  CheckpointState state = make_state(f.layout, "momentum", kFilters);
  state.progress = {3, 17, 197, 197000, 4, 1234.5, 12000, 16000};
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.epoch_samples, 16000);
  state.config.train_samples = 2050;  // 3 steps per epoch: 1000, 1000, 50
  state.progress = {1, 0, 3, 2050, 1};
  state.optimizer_step = 3;
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.samples_seen, 2050);
  state.progress = {1, 2, 5, 4050, 1000, 0.0, 0, 0};  // 1000 ranks; every step skipped so far
  state.optimizer_step = 5;
  state.metrics = {0.0, 0.0, 0.0};
  write_checkpoint(f.path, state, f.layout);
  BOOST_CHECK_EQUAL(read_checkpoint(f.path, f.layout).progress.global_step, 5);
}

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
