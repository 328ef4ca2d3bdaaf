// HDF5 checkpoints a reader refuses, each with one clear error that names the file, and the file left
// as it was: missing, not HDF5, another format or a future version, truncated, flipped bytes (the
// whole-file digest of version 2, then, resealed, the dataset's own checksum), a damaged header, no
// regular file; a missing dataset or attribute, an unknown precision or step path, a wrong shape or
// datatype (files edited with libhdf5 are resealed to reach these inner checks).
#define BOOST_TEST_MODULE checkpoint_refusals
#include "boost_test.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_test_files.hpp"
#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"

using namespace cnn;
using namespace cnn::checkpoint_test;  // tests/checkpoint_test_files.hpp

namespace {

const char* const kUnknownPrecision = "fp16";
const char* const kUnknownStepPath = "sideways";

// The format attribute as a variable-length string of the given charset: the writer stores UTF-8,
// h5py and C tools ASCII. (The reader once asked for UTF-8 whatever the file held, and HDF5 has no
// ASCII-to-UTF-8 conversion: an ASCII string read as "corrupt" in a fresh process.)
void set_format(hid_t file, const char* value, H5T_cset_t charset) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, charset);
  replace_root_attr(file, "format", type, &value);
  H5Tclose(type);
}
void set_wrong_format(hid_t file) { set_format(file, "something-else", H5T_CSET_UTF8); }
void set_wrong_format_ascii(hid_t file) { set_format(file, "something-else", H5T_CSET_ASCII); }

void set_future_version(hid_t file) {
  const std::int64_t version = kCheckpointVersion + 1;
  replace_root_attr(file, "version", H5T_NATIVE_INT64, &version);
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

}  // namespace

// ---- bad input: each one clear error, file untouched ----------------------------------------------

BOOST_AUTO_TEST_SUITE(bad_input)

// The first case of the program, so that it reads its ASCII string before the process has read any
// UTF-8 one (the old reader's failure showed only then).
BOOST_AUTO_TEST_CASE(wrong_format_name_in_ascii) {
  Fixture f;
  write_checkpoint(f.path, make_state(f.layout, "sgd", kFilters), f.layout);
  edit_file(f.path, set_wrong_format_ascii);
  expect_failure<InputError>(f.path, "not a cnn_mpi checkpoint (format is 'something-else'",
                             [&] { read_checkpoint_config(f.path); });
}

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

BOOST_AUTO_TEST_SUITE_END()
