// The two modes of TrainingData (include/cnn/training_data.hpp) and the loader that picks one.
#include "cnn/training_data.hpp"

#include <hdf5.h>

#include <array>
#include <future>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/hdf5_images.hpp"
#include "cnn/resume.hpp"
#include "cnn/stream_plan.hpp"

namespace cnn {
namespace {

constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kFnvPrime = 1099511628211ULL;
constexpr const char* kTrainFile = "train.h5";
constexpr const char* kTestFile = "test.h5";
constexpr std::int64_t kMebibyte = std::int64_t{1} << 20;
// Per sample a window holds its image, its label, its int32 entry of `order` and its int64 entry of `samples`.
constexpr std::int64_t kWindowBytesPerSampleBesidesImage = 1 + 4 + 8;

std::uint64_t fnv1a_u64(std::uint64_t hash, std::uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) hash = (hash ^ ((value >> (8 * byte)) & 0xFF)) * kFnvPrime;
  return hash;
}

// ---- memory ----------------------------------------------------------------------------------------

class InMemoryData final : public TrainingData {
 public:
  InMemoryData(DataSplits splits, std::uint64_t digest) : splits_(std::move(splits)), digest_(digest) {}

  std::string mode() const override { return "memory"; }
  const TensorShape& shape() const override { return splits_.train.shape; }
  int classes() const override { return splits_.train.classes; }
  std::int64_t train_count() const override { return splits_.train.count(); }
  std::int64_t test_count() const override { return splits_.test.count(); }
  std::uint64_t train_digest() const override { return digest_; }

  DataBinding attach(int, int, std::int64_t) override { return {&splits_.train, &splits_.test, nullptr}; }
  DataBinding begin_epoch(const std::vector<std::int32_t>& permutation, std::int64_t) override {
    return {nullptr, nullptr, &permutation};
  }
  StepData step_batch(std::int64_t, Range global_batch) override { return {global_batch, {}}; }
  bool rebinds_before(std::int64_t) const override { return false; }
  std::int64_t test_held_from() const override { return 0; }

 private:
  DataSplits splits_;
  std::uint64_t digest_;
};

// ---- stream ----------------------------------------------------------------------------------------

class StreamedData final : public TrainingData {
 public:
  StreamedData(std::unique_ptr<H5ImageFile> train, std::unique_ptr<H5ImageFile> test, std::int64_t train_count,
               std::int64_t test_count, std::int64_t window_bytes)
      : train_(std::move(train)), test_(std::move(test)), train_count_(train_count), test_count_(test_count),
        window_bytes_(window_bytes) {
    digest_ = labels_and_shape_digest(train_->shape(), train_->labels().data(), train_count_);
    hbool_t threadsafe = 0;
    // Without a thread-safe HDF5, read in line. (Every libhdf5 call also holds h5::LibraryLock,
    // src/io/hdf5_util.hpp, so the checkpoint writer's thread and a read never meet inside the library.)
    background_ = H5is_library_threadsafe(&threadsafe) >= 0 && threadsafe;
  }
  ~StreamedData() override { wait_quietly(); }

  std::string mode() const override {
    std::ostringstream text;
    text << "stream (windows of " << steps_per_window_ << " steps, " << window_bytes_ / kMebibyte << " MiB for two, "
         << (background_ ? "read ahead on a thread" : "read in line: this HDF5 is not thread-safe") << ")";
    return text.str();
  }
  const TensorShape& shape() const override { return train_->shape(); }
  int classes() const override { return train_->classes(); }
  std::int64_t train_count() const override { return train_count_; }
  std::int64_t test_count() const override { return test_count_; }
  std::uint64_t train_digest() const override { return digest_; }

  DataBinding attach(int rank, int world, std::int64_t global_batch) override {
    rank_ = rank;
    world_ = world;
    batch_ = global_batch;
    const std::int64_t per_sample = train_->shape().size() + kWindowBytesPerSampleBesidesImage;
    const std::int64_t capacity = window_bytes_ / 2 / per_sample;
    steps_per_window_ = steps_per_window(capacity, batch_, world_);
    // The evaluation splits the test set into the same contiguous slices (evaluate_test_set).
    const Range mine = rank_slice({0, test_count_}, rank_, world_);
    test_from_ = mine.begin;
    test_slice_.name = test_->path() + " (this rank's slice)";
    test_slice_.shape = test_->shape();
    test_slice_.classes = test_->classes();
    test_slice_.labels.assign(test_->labels().begin() + mine.begin, test_->labels().begin() + mine.begin + mine.count);
    test_slice_.images.resize(static_cast<std::size_t>(mine.count * test_->shape().size()));
    test_->read_range(mine.begin, mine.count, test_slice_.images.data());
    for (Window& w : windows_) {
      w.data.name = train_->path() + " (window)";
      w.data.shape = train_->shape();
      w.data.classes = train_->classes();
    }
    // The backend is bound at each epoch's first step_batch, to the first window: every epoch runs a
    // step before it is evaluated, so nothing reads the backend's data before then.
    return {};
  }

  DataBinding begin_epoch(const std::vector<std::int32_t>& permutation, std::int64_t first_step) override {
    wait_quietly();  // nothing may still read with the old order
    permutation_ = permutation;
    steps_ = batches_per_epoch(train_count_, batch_);
    current_ = -1;
    if (first_step < steps_) start_load(0, first_step);
    return {};
  }

  bool rebinds_before(std::int64_t step) const override {
    return current_ < 0 || step >= windows_[static_cast<std::size_t>(current_)].plan.end_step;
  }

  StepData step_batch(std::int64_t step, Range global_batch) override {
    DataBinding rebind;
    if (rebinds_before(step)) {
      const int next = current_ < 0 ? 0 : 1 - current_;
      if (!pending_.valid())
        throw Error(ExitCode::kFailure, "internal error: no window was read for step " + std::to_string(step));
      pending_.get();  // rethrows a failed read here, on the training thread
      Window& w = windows_[static_cast<std::size_t>(next)];
      if (w.plan.first_step != step)
        throw Error(ExitCode::kFailure, "internal error: window starts at step " + std::to_string(w.plan.first_step) +
                                            ", training is at step " + std::to_string(step));
      rebind = {&w.data, &test_slice_, &w.plan.order};
      current_ = next;
      ++windows_bound_;
      // The previous window's buffer is free once the trainer binds this one, before the next step:
      // the read started here fills it while this window trains.
      if (w.plan.end_step < steps_) start_load(1 - next, w.plan.end_step);
    }
    return {windows_[static_cast<std::size_t>(current_)].plan.shifted_batch(step, global_batch, rank_, world_), rebind};
  }

  std::int64_t test_held_from() const override { return test_from_; }

  std::string read_report() const override {
    const H5ReadCounters train = train_->counters();
    const H5ReadCounters test = test_->counters();
    std::ostringstream text;
    text << "stream: rank " << rank_ << " read " << train.samples << " training images (" << train.bytes
         << " bytes) in " << train.reads << " reads over " << windows_bound_ << " windows, and " << test.samples
         << " test images";
    return text.str();
  }

 private:
  struct Window {
    WindowPlan plan;
    Dataset data;
  };

  void start_load(int slot, std::int64_t first_step) {
    const std::int64_t end_step = std::min(steps_, first_step + steps_per_window_);
    Window& w = windows_[static_cast<std::size_t>(slot)];
    auto load = [this, &w, first_step, end_step] {
      w.plan = plan_window(permutation_, first_step, end_step, batch_, rank_, world_);
      w.data.labels.resize(w.plan.samples.size());
      for (std::size_t i = 0; i < w.plan.samples.size(); ++i)
        w.data.labels[i] = train_->labels()[static_cast<std::size_t>(w.plan.samples[i])];
      w.data.images.resize(w.plan.samples.size() * static_cast<std::size_t>(train_->shape().size()));
      train_->read_samples(w.plan.samples, w.data.images.data());
    };
    if (background_) {
      pending_ = std::async(std::launch::async, load);
    } else {
      std::promise<void> done;
      try {
        load();
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
      pending_ = done.get_future();
    }
  }

  void wait_quietly() noexcept {
    try {
      if (pending_.valid()) pending_.get();
    } catch (...) {
      // A read that no step will use: its failure does not matter.
    }
  }

  std::unique_ptr<H5ImageFile> train_;
  std::unique_ptr<H5ImageFile> test_;
  std::int64_t train_count_;
  std::int64_t test_count_;
  std::int64_t window_bytes_;
  std::uint64_t digest_ = 0;
  bool background_ = false;
  int rank_ = 0;
  int world_ = 1;
  std::int64_t batch_ = 1;
  std::int64_t steps_per_window_ = 1;
  std::int64_t steps_ = 0;
  std::int64_t test_from_ = 0;
  std::int64_t windows_bound_ = 0;
  Dataset test_slice_;
  std::vector<std::int32_t> permutation_;
  std::array<Window, 2> windows_;
  int current_ = -1;  // the window the backend is bound to; -1 before the epoch's first step
  std::future<void> pending_;
};

// ---- loading ---------------------------------------------------------------------------------------

std::int64_t used(std::int64_t limit, std::int64_t count) { return limit > 0 && limit < count ? limit : count; }

void require_same_shape(const H5ImageFile& train, const H5ImageFile& test) {
  const TensorShape& a = train.shape();
  const TensorShape& b = test.shape();
  if (a.channels != b.channels || a.height != b.height || a.width != b.width)
    throw InputError(test.path() + ": images are " + std::to_string(b.channels) + "x" + std::to_string(b.height) + "x" +
                     std::to_string(b.width) + " but the training images (" + train.path() + ") are " +
                     std::to_string(a.channels) + "x" + std::to_string(a.height) + "x" + std::to_string(a.width));
  if (train.classes() != test.classes())
    throw InputError(test.path() + ": has " + std::to_string(test.classes()) + " classes but " + train.path() +
                     " has " + std::to_string(train.classes()));
}

std::unique_ptr<TrainingData> load_hdf5(const DataOptions& config) {
  auto train = std::make_unique<H5ImageFile>(config.dir + "/" + kTrainFile, config.h5);
  auto test = std::make_unique<H5ImageFile>(config.dir + "/" + kTestFile, config.h5);
  require_same_shape(*train, *test);
  const std::int64_t train_count = used(config.train_samples, train->count());
  const std::int64_t test_count = used(config.test_samples, test->count());
  bool stream = config.mode == DataMode::kStream;
  if (config.mode == DataMode::kAuto)
    stream = (train_count + test_count) * train->shape().size() > kAutoMemoryBytes;
  if (stream)
    return std::make_unique<StreamedData>(std::move(train), std::move(test), train_count, test_count,
                                          config.stream_window_mb * kMebibyte);
  DataSplits splits;
  splits.train = train->read_all("hdf5/train", train_count);
  splits.test = test->read_all("hdf5/test", test_count);
  const std::uint64_t digest = labels_and_shape_digest(splits.train.shape, splits.train.labels.data(), train_count);
  return std::make_unique<InMemoryData>(std::move(splits), digest);
}

}  // namespace

std::uint64_t labels_and_shape_digest(const TensorShape& shape, const std::uint8_t* labels, std::int64_t count) {
  std::uint64_t hash = kFnvOffsetBasis;
  hash = fnv1a_u64(hash, static_cast<std::uint64_t>(shape.channels));
  hash = fnv1a_u64(hash, static_cast<std::uint64_t>(shape.height));
  hash = fnv1a_u64(hash, static_cast<std::uint64_t>(shape.width));
  hash = fnv1a_u64(hash, static_cast<std::uint64_t>(count));
  for (std::int64_t i = 0; i < count; ++i) hash = (hash ^ labels[i]) * kFnvPrime;
  return hash;
}

std::unique_ptr<TrainingData> load_training_data(const DataOptions& config) {
  if (config.mode == DataMode::kStream && config.dataset != DatasetKind::kHdf5)
    throw UsageError("--data-mode stream reads HDF5 by hyperslab: it needs --dataset hdf5 (not " +
                     std::string(dataset_name(config.dataset)) + "); convert the data with cnn_convert");
  if (config.dataset == DatasetKind::kHdf5) return load_hdf5(config);
  DataSplits data = load_dataset(dataset_name(config.dataset), config.dir);
  if (config.train_samples > 0 && config.train_samples < data.train.count()) data.train.truncate(config.train_samples);
  if (config.test_samples > 0 && config.test_samples < data.test.count()) data.test.truncate(config.test_samples);
  const std::uint64_t digest = training_data_digest(data.train);
  return std::make_unique<InMemoryData>(std::move(data), digest);
}

}  // namespace cnn
