// `cnn_mpi predict` (include/cnn/predict_command.hpp). The split is cut into blocks of a fixed number
// of images (the last one shorter), and the backend predicts one block per call. A block's call is
// then the same whatever the number of ranks, and so are its logits, bit for bit: the GPU's matrix
// products choose their tiles and split-K from the batch size, so slices of other sizes would sum in
// other orders. Blocks are dealt out in rounds: each round takes up to world x kBlocksPerRank blocks
// and gives each rank a contiguous run of them (rank_slice over blocks); every rank reads and predicts
// its run, rank 0 gathers the logits (MPI_Gatherv), computes the probabilities and appends the round's
// rows in index order. Memory stays one round's worth whatever the size of the data set, and the file
// is the same for any rank count.
#include "cnn/predict_command.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "cnn/collective_errors.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "cnn/ops.hpp"
#include "cnn/prediction_file.hpp"
#include "cnn/prediction_input.hpp"
#include "cnn/resume.hpp"
#include "cnn/sampler.hpp"
#include "cnn/saved_model.hpp"
#include "cnn/signals.hpp"

namespace cnn {
namespace {

// Images per block: the cuda backend evaluates up to 1000 images per launch (kEvalChunk in
// kernels/cuda/device_backend.cu), so a block is one launch; fewer when 1000 images exceed kBlockBytes.
constexpr std::int64_t kBlockImages = 1000;
constexpr std::int64_t kBlockBytes = std::int64_t{16} << 20;
// Blocks per rank and round (fewer in the last round).
constexpr std::int64_t kBlocksPerRank = 4;

std::int64_t block_images(const TensorShape& shape) {
  return std::clamp<std::int64_t>(kBlockBytes / std::max<std::int64_t>(1, shape.size()), 1, kBlockImages);
}

// A round: its images, and rank r's contiguous run of them.
struct Round {
  Range images;
  std::vector<Range> slices;  // per rank
};

// The round from image `first` on, of at most `max_blocks` blocks.
Round plan_round(std::int64_t first, std::int64_t count, std::int64_t block, std::int64_t max_blocks, int world) {
  const std::int64_t blocks = std::min(max_blocks, (count - first + block - 1) / block);
  Round round;
  round.images = {first, std::min(blocks * block, count - first)};
  for (int r = 0; r < world; ++r) {
    const Range mine = rank_slice({0, blocks}, r, world);
    const std::int64_t begin = std::min(first + mine.begin * block, count);
    const std::int64_t end = std::min(first + (mine.begin + mine.count) * block, count);
    round.slices.push_back({begin, end - begin});
  }
  return round;
}

std::string header(int classes) {
  std::string text = "index,label,predicted";
  for (int k = 0; k < classes; ++k) text += ",p" + std::to_string(k);
  return text + "\n";
}

// Rows [first, first + n) of the CSV from their logits ([n, classes]); counts the correct predictions.
std::string rows(const PredictionInput& input, std::int64_t first, std::int64_t n, const float* logits, int classes,
                 std::int64_t& correct) {
  std::string text;
  std::vector<double> p(static_cast<std::size_t>(classes));
  char field[32];
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t index = first + s;
    const int predicted = softmax_probabilities(logits + s * classes, classes, p.data());
    text += std::to_string(index) + ",";
    if (input.has_labels()) {
      text += std::to_string(input.label(index));
      if (input.label(index) == predicted) ++correct;
    }
    text += "," + std::to_string(predicted);
    for (int k = 0; k < classes; ++k) {
      std::snprintf(field, sizeof(field), ",%.6g", p[static_cast<std::size_t>(k)]);
      text += field;
    }
    text += "\n";
  }
  return text;
}

// Rank 0 receives every rank's slice of the round (its logits, in rank order: index order).
void gather_logits(const MpiWorld& world, const Round& round, const std::vector<float>& mine, int classes,
                   std::vector<float>& all) {
  std::vector<int> counts, offsets;
  if (world.rank() == 0) {
    all.resize(static_cast<std::size_t>(round.images.count * classes));
    std::int64_t offset = 0;
    for (const Range& slice : round.slices) {
      counts.push_back(static_cast<int>(slice.count * classes));
      offsets.push_back(static_cast<int>(offset));
      offset += slice.count * classes;
    }
  }
  const std::int64_t floats = round.slices[static_cast<std::size_t>(world.rank())].count * classes;
  recorded_collective(CollectiveOp::kGatherv, floats * static_cast<std::int64_t>(sizeof(float)), [&] {
    CNN_CHECK_MPI(MPI_Gatherv(mine.data(), static_cast<int>(floats), MPI_FLOAT, all.data(), counts.data(),
                              offsets.data(), MPI_FLOAT, 0, world.comm()));
  });
}

}  // namespace

int predict_command(const TrainConfig& config, const MpiWorld& world, const TestHooks& hooks) {
  const std::string& out = config.out_dir;  // for predict, --out names the CSV file
  const bool to_stdout = out == kStandardOutput;
  agree_or_stop(world, [&] {
    if (world.rank() == 0) require_new_output(out);
  });
  const SavedModel model = read_saved_model(config.checkpoint, world);
  const int classes = model.saved.classes;

  std::unique_ptr<PredictionInput> input;
  agree_or_stop(world, [&] {
    PredictionInputOptions options;
    options.dir = config.data_dir;
    options.dataset = config.dataset;
    options.h5 = H5ImagePaths{config.h5_images, config.h5_labels};
    options.train_split = config.split == "train";
    options.samples = options.train_split ? config.train_samples : config.test_samples;
    input = std::make_unique<PredictionInput>(options);
    require_model_takes(model, input->shape(), input->has_labels() ? input->classes() : 0,
                        dataset_name(config.dataset));
  });
  std::unique_ptr<Backend> backend = make_inference_backend(config, world, model);

  std::unique_ptr<PredictionFile> file;
  agree_or_stop(world, [&] {
    if (world.rank() != 0) return;
    file = std::make_unique<PredictionFile>(out);
    file->write(header(classes));
  });

  const std::int64_t block = hooks.predict_block > 0 ? hooks.predict_block : block_images(input->shape());
  // Gatherv's counts and offsets are ints: a round's logits must fit one (thousands of ranks may then
  // leave some idle in a round).
  const std::int64_t blocks_per_rank = hooks.predict_block > 0 ? 1 : kBlocksPerRank;
  const std::int64_t round_blocks =
      std::min<std::int64_t>(blocks_per_rank * world.size(), std::max<std::int64_t>(1, INT_MAX / (block * classes)));
  Dataset none;  // the backend's training split: predict trains nothing
  none.shape = input->shape();
  none.classes = classes;
  Dataset slice;
  std::vector<float> logits, all;
  BatchStats stats;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < input->count();) {
    const Round round = plan_round(first, input->count(), block, round_blocks, world.size());
    const Range mine = round.slices[static_cast<std::size_t>(world.rank())];
    logits.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, mine.count * classes)));
    agree_or_stop(world, [&] {
      input->read(mine.begin, mine.count, slice);
      backend->bind_data(none, slice);
      // One call per block; the run starts at a block's first image.
      for (std::int64_t done = 0; done < mine.count; done += block) {
        const std::int64_t n = std::min(block, mine.count - done);
        stats += backend->evaluate_logits(done, n, logits.data() + done * classes);
      }
    });
    gather_logits(world, round, logits, classes, all);
    agree_or_stop(world, [&] {
      if (world.rank() == 0)
        file->write(rows(*input, round.images.begin, round.images.count, all.data(), classes, correct));
    });
    first += round.images.count;
    if (const int signo = agree_on_stop(world)) {
      if (world.rank() == 0)
        print_error_line(std::string("predict stopped by ") + signal_name(signo) + " after " + std::to_string(first) +
                         " of " + std::to_string(input->count()) + " images; " +
                         (to_stdout ? "the output is incomplete" : out + " not written"));
      throw AlreadyReported(ExitCode::kStoppedBySignal);
    }
  }
  agree_or_stop(world, [&] {
    if (world.rank() == 0) file->commit();
  });

  double loss = stats.loss_sum;
  world.allreduce_sum(&loss, 1);
  if (world.rank() == 0) {
    std::FILE* summary = to_stdout ? stderr : stdout;
    if (!model.state.verified_whole) std::fprintf(summary, "%s\n", version1_note(config.checkpoint).c_str());
    const auto n = static_cast<double>(input->count());
    std::fprintf(summary, "predict: %lld images of %s -> %s (%s, epochs done %lld, %d rank(s))",
                 static_cast<long long>(input->count()), input->name().c_str(),
                 to_stdout ? "standard output" : out.c_str(), config.checkpoint.c_str(),
                 static_cast<long long>(model.state.progress.epoch), world.size());
    if (input->has_labels() && n > 0)
      std::fprintf(summary, "; loss %.6f  accuracy %.2f%%", loss / n, 100.0 * static_cast<double>(correct) / n);
    std::fprintf(summary, "\n");
    std::fflush(summary);
  }
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace cnn
