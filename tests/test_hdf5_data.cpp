// HDF5 image input (docs/DATA.md) on synthetic files written by the test:
//  - a valid file reads back exactly, whole, by range and by any ascending sample set, for several
//    chunk sizes and with deflate;
//  - each malformed variant gives one line naming the file and the problem, with the documented type;
//  - the stream-mode window plan puts every rank's slice of every step where train_step looks;
//  - stream mode feeds a backend bitwise the same gradients as memory mode, on 1 and 2 (simulated)
//    ranks, also from the middle of an epoch, and a rank reads exactly its own samples (counters).
#define BOOST_TEST_MODULE hdf5_data
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/backend.hpp"
#include "cnn/errors.hpp"
#include "cnn/hdf5_images.hpp"
#include "cnn/stream_plan.hpp"
#include "cnn/train_step.hpp"
#include "cnn/training_data.hpp"
#include "data_hazards.hpp"
#include "test_files.hpp"
#include "test_util.hpp"

namespace {

using cnn::test::TempDir;
using cnn::test::error_of;

void expect_message(const std::string& message, const std::string& path, const std::string& fragment) {
  BOOST_TEST_INFO("message: " << message);
  BOOST_TEST(message.rfind(path + ": ", 0) == 0);
  BOOST_TEST(message.find(fragment) != std::string::npos);
  BOOST_TEST(message.find('\n') == std::string::npos);
}

// ---- raw HDF5 writing, for files the project's writer would never produce ----------------------

struct RawDataset {
  std::string path;
  hid_t type;
  std::vector<hsize_t> dims;
  std::uint8_t fill = 0;  // every element, converted to `type`
};

void write_raw(const std::string& file_path, const std::vector<RawDataset>& datasets, long long classes_attr = -1) {
  const hid_t file = H5Fcreate(file_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  BOOST_REQUIRE(file >= 0);
  const hid_t link_props = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(link_props, 1);
  for (const RawDataset& d : datasets) {
    const hid_t space = H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr);
    const hid_t set = H5Dcreate2(file, d.path.c_str(), d.type, space, link_props, H5P_DEFAULT, H5P_DEFAULT);
    BOOST_REQUIRE(set >= 0);
    hsize_t n = 1;
    for (const hsize_t dim : d.dims) n *= dim;
    const std::vector<std::uint8_t> values(n, d.fill);
    if (n > 0) H5Dwrite(set, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    if (classes_attr >= 0 && d.path == "/labels") {
      const hid_t scalar = H5Screate(H5S_SCALAR);
      const hid_t attr = H5Acreate2(set, "classes", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attr, H5T_NATIVE_LLONG, &classes_attr);
      H5Aclose(attr);
      H5Sclose(scalar);
    }
    H5Dclose(set);
    H5Sclose(space);
  }
  H5Pclose(link_props);
  H5Fclose(file);
}

RawDataset images(std::vector<hsize_t> dims, hid_t type = H5T_STD_U8LE) { return {"/images", type, std::move(dims)}; }
RawDataset labels(hsize_t n, std::uint8_t fill = 1, hid_t type = H5T_STD_U8LE) { return {"/labels", type, {n}, fill}; }

cnn::H5ImagePaths default_paths() { return {}; }

// ---- stream vs memory ---------------------------------------------------------------------------

cnn::DataOptions config_for(const std::string& dir, const std::string& mode) {
  cnn::DataOptions c;
  c.dataset = cnn::DatasetKind::kHdf5;
  c.dir = dir;
  c.mode = mode == "stream" ? cnn::DataMode::kStream : mode == "memory" ? cnn::DataMode::kMemory : cnn::DataMode::kAuto;
  c.stream_window_mb = 1;  // 0.5 MiB per window: several windows per epoch with 3x40x40 images
  return c;
}

std::unique_ptr<cnn::Backend> seq_backend(const cnn::SeedModel& model, const std::vector<float>& params) {
  cnn::BackendOptions options;
  options.kind = cnn::BackendKind::kSeq;
  auto backend = cnn::make_backend(options, cnn::seed_network(model));
  backend->upload_params(params);
  return backend;
}

}  // namespace

BOOST_AUTO_TEST_CASE(valid_files_read_back_exactly_whole_by_range_and_by_sample_set) {
  const cnn::Dataset data = cnn::test::random_dataset(53, {3, 5, 7}, 11, 7);
  int variant = 0;
  for (const auto& [chunk, deflate] : {std::pair<std::int64_t, int>{1, 0}, {1, 4}, {8, 0}, {100, 9}}) {
    BOOST_TEST_CONTEXT("chunk " << chunk << ", deflate " << deflate) {
      TempDir dir;
      const std::string path = dir.file("d" + std::to_string(variant++) + ".h5");
      cnn::write_h5_images(path, data, default_paths(), {chunk, deflate});
      cnn::H5ImageFile file(path, default_paths());
      BOOST_TEST(file.count() == 53);
      BOOST_TEST(file.classes() == 7);  // the `classes` attribute the writer stores
      BOOST_TEST(file.shape().channels == 3);
      BOOST_TEST(file.shape().height == 5);
      BOOST_TEST(file.shape().width == 7);
      BOOST_TEST(file.labels() == data.labels, boost::test_tools::per_element());
      const cnn::Dataset whole = file.read_all("x", 0);
      BOOST_TEST((whole.images == data.images));
      const cnn::Dataset first = file.read_all("x", 10);
      BOOST_TEST(first.count() == 10);
      BOOST_TEST((first.images == std::vector<std::uint8_t>(data.images.begin(), data.images.begin() + 10 * 105)));

      std::vector<std::uint8_t> range(static_cast<std::size_t>(9 * 105));
      file.read_range(17, 9, range.data());
      BOOST_TEST((range == std::vector<std::uint8_t>(data.image(17), data.image(26))));

      // Runs and singletons, first and last sample included.
      const std::vector<std::int64_t> samples = {0, 1, 2, 5, 9, 10, 30, 31, 32, 33, 51, 52};
      std::vector<std::uint8_t> picked(samples.size() * 105);
      const cnn::H5ReadCounters before = file.counters();
      file.read_samples(samples, picked.data());
      for (std::size_t i = 0; i < samples.size(); ++i)
        BOOST_TEST(std::equal(data.image(samples[i]), data.image(samples[i]) + 105, picked.data() + i * 105));
      BOOST_TEST(file.counters().samples - before.samples == static_cast<std::int64_t>(samples.size()));
      BOOST_TEST(file.counters().bytes - before.bytes == static_cast<std::int64_t>(samples.size() * 105));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_other_sample_is_read_run_by_run) {
  // Every other sample of 1200: 600 runs of one sample.
  const cnn::Dataset data = cnn::test::random_dataset(1200, {1, 4, 4}, 5);
  TempDir dir;
  cnn::write_h5_images(dir.file("d.h5"), data, default_paths(), {1, 0});
  cnn::H5ImageFile file(dir.file("d.h5"), default_paths());
  std::vector<std::int64_t> samples;
  for (std::int64_t s = 1; s < 1200; s += 2) samples.push_back(s);
  std::vector<std::uint8_t> picked(samples.size() * 16);
  file.read_samples(samples, picked.data());
  for (std::size_t i = 0; i < samples.size(); ++i)
    BOOST_TEST(std::equal(data.image(samples[i]), data.image(samples[i]) + 16, picked.data() + i * 16));
  BOOST_TEST(file.counters().reads == 600);
}

BOOST_AUTO_TEST_CASE(configurable_dataset_paths) {
  const cnn::Dataset data = cnn::test::random_dataset(4, {1, 3, 3}, 2);
  TempDir dir;
  const cnn::H5ImagePaths paths{"/data/x", "/data/y"};
  cnn::write_h5_images(dir.file("d.h5"), data, paths, {});
  BOOST_TEST((cnn::H5ImageFile(dir.file("d.h5"), paths).read_all("x", 0).images == data.images));
  expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(dir.file("d.h5"), default_paths()); }),
                 dir.file("d.h5"), "missing dataset /images (set its path with --h5-images)");
}

BOOST_AUTO_TEST_CASE(writer_never_overwrites) {
  const cnn::Dataset data = cnn::test::random_dataset(4, {1, 3, 3}, 2);
  TempDir dir;
  { std::ofstream(dir.file("d.h5")) << "precious"; }
  BOOST_CHECK_THROW(cnn::write_h5_images(dir.file("d.h5"), data, default_paths(), {}), cnn::IoError);
  std::ifstream in(dir.file("d.h5"));
  std::string text;
  in >> text;
  BOOST_TEST(text == "precious");
}

BOOST_AUTO_TEST_CASE(malformed_files_give_one_line_naming_the_file) {
  TempDir dir;
  struct Case {
    std::string name;
    std::vector<RawDataset> datasets;
    long long classes = -1;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"float_images", {images({4, 1, 3, 3}, H5T_IEEE_F32LE), labels(4)}, -1,
       "wrong datatype: /images is float of 4 byte(s), expected uint8"},
      {"int16_images", {images({4, 1, 3, 3}, H5T_STD_U16LE), labels(4)}, -1, "/images is unsigned integer of 2 byte(s)"},
      {"signed_labels", {images({4, 1, 3, 3}), labels(4, 1, H5T_STD_I8LE)}, -1,
       "wrong datatype: /labels is signed integer of 1 byte(s), expected uint8"},
      {"rank3_images", {images({4, 3, 3}), labels(4)}, -1, "wrong rank: /images has shape [4,3,3], expected rank 4 [N,C,H,W]"},
      {"rank2_labels", {images({4, 1, 3, 3}), {"/labels", H5T_STD_U8LE, {4, 1}}}, -1,
       "wrong rank: /labels has shape [4,1], expected rank 1 [N]"},
      {"mismatched_n", {images({4, 1, 3, 3}), labels(5)}, -1,
       "sample counts disagree: /images holds 4 images but /labels holds 5 labels"},
      {"bad_label", {images({4, 1, 3, 3}), labels(4, 10)}, -1, "label 10 at index 0 of /labels is not below 10"},
      {"bad_label_with_classes", {images({4, 1, 3, 3}), labels(4, 3)}, 3, "label 3 at index 0 of /labels is not below 3"},
      {"bad_classes", {images({4, 1, 3, 3}), labels(4, 0)}, 300, "attribute 'classes' on /labels is 300"},
      {"no_images", {labels(4)}, -1, "missing dataset /images"},
      {"no_labels", {images({4, 1, 3, 3})}, -1, "missing dataset /labels"},
      {"empty", {images({0, 1, 3, 3}), labels(0)}, -1, "/images holds no samples"},
      {"zero_width", {images({4, 1, 3, 0}), labels(4)}, -1, "dimension 3 is not in 1..65536"},
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      const std::string path = dir.file(c.name + ".h5");
      write_raw(path, c.datasets, c.classes);
      expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(path, default_paths()); }), path, c.fragment);
    }
  }
  // A group where a dataset should be.
  {
    const std::string path = dir.file("group.h5");
    write_raw(path, {{"/images/inner", H5T_STD_U8LE, {1}}, labels(1)});
    expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(path, default_paths()); }), path,
                   "/images is not a dataset");
  }
  // Not HDF5, empty, truncated, missing, a directory.
  {
    const std::string text = dir.file("text.h5");
    std::ofstream(text) << "not an HDF5 file, just text\n";
    expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(text, default_paths()); }), text,
                   "not an HDF5 file");
    const std::string empty = dir.file("empty_file.h5");
    std::ofstream{empty};
    expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(empty, default_paths()); }), empty, "empty file");
    const std::string cut = dir.file("truncated.h5");
    cnn::write_h5_images(cut, cnn::test::random_dataset(200, {1, 8, 8}, 3), default_paths(), {1, 0});
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
    expect_message(error_of<cnn::InputError>([&] { cnn::H5ImageFile(cut, default_paths()); }), cut,
                   "truncated or corrupt?");
    const std::string missing = dir.file("missing.h5");
    expect_message(error_of<cnn::IoError>([&] { cnn::H5ImageFile(missing, default_paths()); }), missing,
                   "file does not exist");
    expect_message(error_of<cnn::IoError>([&] { cnn::H5ImageFile(dir.path, default_paths()); }), dir.path,
                   "is a directory");
  }
}

BOOST_AUTO_TEST_CASE(window_plan_puts_each_ranks_slice_where_train_step_looks) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t n = 1 + rng() % 300;
    const std::int64_t batch = 1 + rng() % 40;
    const int world = 1 + static_cast<int>(rng() % 4);
    if (batch < world) continue;
    const std::vector<std::int32_t> perm = cnn::Sampler(rng(), n).permutation(0);
    const std::int64_t steps = cnn::batches_per_epoch(n, batch);
    const std::int64_t per_window = 1 + rng() % 5;
    for (int rank = 0; rank < world; ++rank) {
      std::int64_t read = 0;
      for (std::int64_t first = 0; first < steps; first += per_window) {
        const std::int64_t end = std::min(steps, first + per_window);
        const cnn::WindowPlan plan = cnn::plan_window(perm, first, end, batch, rank, world);
        BOOST_TEST(std::is_sorted(plan.samples.begin(), plan.samples.end()));
        read += static_cast<std::int64_t>(plan.samples.size());
        for (std::int64_t step = first; step < end; ++step) {
          const cnn::Range global = cnn::global_batch_range(step, n, batch);
          const cnn::Range want = cnn::rank_slice(global, rank, world);
          const cnn::Range got = cnn::rank_slice(plan.shifted_batch(step, global, rank, world), rank, world);
          BOOST_TEST(got.count == want.count);
          for (std::int64_t k = 0; k < want.count; ++k)
            BOOST_TEST(plan.samples[static_cast<std::size_t>(plan.order[static_cast<std::size_t>(got.begin + k)])] ==
                       perm[static_cast<std::size_t>(want.begin + k)]);
        }
      }
      // Over the epoch a rank reads exactly the samples of its slices: no more, no fewer.
      std::int64_t own = 0;
      for (std::int64_t step = 0; step < steps; ++step)
        own += cnn::rank_slice(cnn::global_batch_range(step, n, batch), rank, world).count;
      BOOST_TEST(read == own);
    }
  }
}

BOOST_AUTO_TEST_CASE(stream_feeds_bitwise_the_gradients_of_memory_and_reads_only_its_samples) {
  TempDir dir;
  const cnn::Dataset train = cnn::test::random_dataset(230, {3, 40, 40}, 8);
  const cnn::Dataset test = cnn::test::random_dataset(37, {3, 40, 40}, 9);
  cnn::write_h5_images(dir.file("train.h5"), train, default_paths(), {1, 3});
  cnn::write_h5_images(dir.file("test.h5"), test, default_paths(), {1, 0});

  cnn::SeedModel model;
  model.input = train.shape;
  model.filters = 4;
  std::vector<float> params(static_cast<std::size_t>(model.layout().total()));
  cnn::initialize_params(params.data(), model.layout(), 5);
  const std::int64_t batch = 24;
  const cnn::OptimizerSettings sgd{cnn::OptimizerKind::kSgd, 0.05f, 0.0f};

  for (const int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      for (const std::int64_t first_step : {std::int64_t{0}, std::int64_t{4}}) {
        BOOST_TEST_CONTEXT("rank " << rank << " of " << world << ", from step " << first_step) {
          auto memory = cnn::load_training_data(config_for(dir.path, "memory"));
          auto stream = cnn::load_training_data(config_for(dir.path, "stream"));
          BOOST_TEST(memory->mode() == "memory");
          BOOST_TEST(stream->train_digest() == memory->train_digest());
          auto a = seq_backend(model, params);
          auto b = seq_backend(model, params);
          cnn::apply_binding(*a, memory->attach(rank, world, batch));
          cnn::apply_binding(*b, stream->attach(rank, world, batch));
          BOOST_TEST(stream->mode().rfind("stream (windows of ", 0) == 0);
          const std::int64_t steps = cnn::batches_per_epoch(train.count(), batch);
          std::int64_t own = 0;
          for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
            const std::vector<std::int32_t> perm = cnn::Sampler(1, train.count()).permutation(epoch);
            const std::int64_t start = epoch == 0 ? first_step : 0;
            cnn::apply_binding(*a, memory->begin_epoch(perm, start));
            cnn::apply_binding(*b, stream->begin_epoch(perm, start));
            for (std::int64_t step = start; step < steps; ++step) {
              const cnn::Range global = cnn::global_batch_range(step, train.count(), batch);
              const cnn::StepData da = memory->step_batch(step, global);
              const cnn::StepData db = stream->step_batch(step, global);
              cnn::apply_binding(*a, da.rebind);
              cnn::apply_binding(*b, db.rebind);
              const cnn::Range ma = cnn::rank_slice(da.batch, rank, world);
              const cnn::Range mb = cnn::rank_slice(db.batch, rank, world);
              a->compute_gradients(ma.begin, ma.count);
              b->compute_gradients(mb.begin, mb.count);
              own += ma.count;
              const float* ga = a->grads();
              const float* gb = b->grads();
              BOOST_TEST(std::equal(ga, ga + model.layout().total(), gb), "gradients differ at step " << step);
              a->apply_update(sgd, 1.0f / static_cast<float>(global.count));
              b->apply_update(sgd, 1.0f / static_cast<float>(global.count));
            }
          }
          BOOST_TEST(a->download_params() == b->download_params());
          const cnn::BatchStats sa = a->take_train_stats();
          const cnn::BatchStats sb = b->take_train_stats();
          BOOST_TEST(sa.loss_sum == sb.loss_sum);
          BOOST_TEST(sa.correct == sb.correct);
          // Evaluation of this rank's test slice, each backend at the position it holds it.
          const cnn::Range slice = cnn::rank_slice({0, test.count()}, rank, world);
          const cnn::BatchStats ea = a->evaluate(slice.begin - memory->test_held_from(), slice.count);
          const cnn::BatchStats eb = b->evaluate(slice.begin - stream->test_held_from(), slice.count);
          BOOST_TEST(ea.loss_sum == eb.loss_sum);
          BOOST_TEST(ea.correct == eb.correct);
          // The counters: this rank's training samples and test slice, nothing else.
          const std::string report = stream->read_report();
          BOOST_TEST_INFO(report);
          BOOST_TEST(report.find("read " + std::to_string(own) + " training images (" +
                                 std::to_string(own * train.shape.size()) + " bytes)") != std::string::npos);
          BOOST_TEST(report.find("and " + std::to_string(slice.count) + " test images") != std::string::npos);
          BOOST_TEST(memory->read_report().empty());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(data_mode_choices) {
  TempDir dir;
  const cnn::Dataset data = cnn::test::random_dataset(10, {1, 4, 4}, 1);
  cnn::write_h5_images(dir.file("train.h5"), data, default_paths(), {});
  cnn::write_h5_images(dir.file("test.h5"), data, default_paths(), {});
  BOOST_TEST(cnn::load_training_data(config_for(dir.path, "auto"))->mode() == "memory");  // 320 bytes < 1 GiB
  cnn::DataOptions idx = config_for(dir.path, "stream");
  idx.dataset = cnn::DatasetKind::kFashion;
  BOOST_CHECK_THROW(cnn::load_training_data(idx), cnn::UsageError);
  // Test images of another shape than the training images.
  TempDir other;
  cnn::write_h5_images(other.file("train.h5"), data, default_paths(), {});
  cnn::write_h5_images(other.file("test.h5"), cnn::test::random_dataset(10, {1, 4, 5}, 1), default_paths(), {});
  expect_message(error_of<cnn::InputError>([&] { cnn::load_training_data(config_for(other.path, "memory")); }),
                 other.file("test.h5"), "images are 1x4x5 but the training images");
}

BOOST_AUTO_TEST_CASE(hdf5_data_identity_covers_labels_shape_and_count) {
  const std::vector<std::uint8_t> labels = {1, 2, 3, 4};
  const std::uint64_t base = cnn::labels_and_shape_digest({1, 28, 28}, labels.data(), 4);
  std::vector<std::uint8_t> changed = labels;
  changed[2] = 9;
  BOOST_TEST(cnn::labels_and_shape_digest({1, 28, 28}, changed.data(), 4) != base);
  BOOST_TEST(cnn::labels_and_shape_digest({1, 28, 29}, labels.data(), 4) != base);
  BOOST_TEST(cnn::labels_and_shape_digest({1, 28, 28}, labels.data(), 3) != base);
  BOOST_TEST(cnn::labels_and_shape_digest({1, 28, 28}, labels.data(), 4) == base);
}

// libhdf5 opens by name: a FIFO as train.h5 or test.h5 would block its open(2) forever. Each kind of
// non-regular file is refused (IoError, exit 3) in memory and in stream mode, without blocking.
BOOST_AUTO_TEST_CASE(non_regular_files_refused_without_blocking_in_both_modes) {
  const cnn::test::HangGuard guard;  // a reader blocking in open(2) on the FIFO fails here, not hangs
  const cnn::Dataset data = cnn::test::random_dataset(10, {1, 4, 4}, 1);
  for (const cnn::test::NonRegular& thing : cnn::test::kNonRegularKinds) {
    for (const std::string name : {"train.h5", "test.h5"}) {
      for (const std::string mode : {"memory", "stream"}) {
        BOOST_TEST_CONTEXT(thing.kind << " as " << name << ", " << mode) {
          TempDir dir;
          cnn::write_h5_images(dir.file(name == "train.h5" ? "test.h5" : "train.h5"), data, default_paths(), {});
          cnn::test::make_non_regular(dir.file(name), thing.kind);
          expect_message(error_of<cnn::IoError>([&] { cnn::load_training_data(config_for(dir.path, mode)); }),
                         dir.file(name), thing.message);
        }
      }
    }
    BOOST_TEST_CONTEXT(thing.kind << " opened directly") {
      TempDir dir;
      cnn::test::make_non_regular(dir.file("x.h5"), thing.kind);
      expect_message(error_of<cnn::IoError>([&] { cnn::H5ImageFile(dir.file("x.h5"), default_paths()); }),
                     dir.file("x.h5"), thing.message);
    }
  }
}
