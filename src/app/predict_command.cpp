// `cnn_mpi predict` (include/cnn/predict_command.hpp). The split is predicted in rounds: each round is
// the next world x chunk images, cut into one contiguous slice per rank (rank_slice); every rank reads
// and predicts its slice on its backend, rank 0 gathers the slices' logits (MPI_Gatherv), turns them
// into rows in index order and appends them to the file. Memory stays one round's worth, whatever the
// size of the data set, and the rows do not depend on the number of ranks: a sample's logits do not
// depend on which samples share its batch, and rank 0 alone computes the probabilities from them.
#include "cnn/predict_command.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "cnn/collective_errors.hpp"
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

// Images per rank and round: at most this many, and at most kChunkBytes of pixels.
constexpr std::int64_t kChunkImages = 4096;
constexpr std::int64_t kChunkBytes = std::int64_t{64} << 20;

std::int64_t chunk_images(const TensorShape& shape) {
  return std::clamp<std::int64_t>(kChunkBytes / std::max<std::int64_t>(1, shape.size()), 1, kChunkImages);
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

// Rank 0 receives every rank's slice of `round` (its logits, in rank order: index order).
void gather_logits(const MpiWorld& world, Range round, const std::vector<float>& mine, std::int64_t mine_count,
                   int classes, std::vector<float>& all) {
  std::vector<int> counts, offsets;
  if (world.rank() == 0) {
    all.resize(static_cast<std::size_t>(round.count * classes));
    std::int64_t offset = 0;
    for (int r = 0; r < world.size(); ++r) {
      const std::int64_t floats = rank_slice(round, r, world.size()).count * classes;
      counts.push_back(static_cast<int>(floats));
      offsets.push_back(static_cast<int>(offset));
      offset += floats;
    }
  }
  CNN_CHECK_MPI(MPI_Gatherv(mine.data(), static_cast<int>(mine_count * classes), MPI_FLOAT, all.data(), counts.data(),
                            offsets.data(), MPI_FLOAT, 0, world.comm()));
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

  const std::int64_t chunk = hooks.predict_chunk > 0 ? hooks.predict_chunk : chunk_images(input->shape());
  // Gatherv counts and offsets are ints: a round's logits must fit one.
  const std::int64_t round_size = std::min<std::int64_t>(chunk * world.size(), INT_MAX / classes);
  Dataset none;  // the backend's training split: predict trains nothing
  none.shape = input->shape();
  none.classes = classes;
  Dataset slice;
  std::vector<float> logits, all;
  BatchStats stats;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < input->count(); first += round_size) {
    const Range round{first, std::min(round_size, input->count() - first)};
    const Range mine = rank_slice(round, world.rank(), world.size());
    logits.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, mine.count * classes)));
    agree_or_stop(world, [&] {
      input->read(mine.begin, mine.count, slice);
      backend->bind_data(none, slice);
      stats += backend->evaluate_logits(0, mine.count, logits.data());
    });
    gather_logits(world, round, logits, mine.count, classes, all);
    agree_or_stop(world, [&] {
      if (world.rank() == 0) file->write(rows(*input, round.begin, round.count, all.data(), classes, correct));
    });
    if (const int signo = agree_on_stop(world)) {
      if (world.rank() == 0)
        print_error_line(std::string("predict stopped by ") + signal_name(signo) + " after " +
                         std::to_string(round.begin + round.count) + " of " + std::to_string(input->count()) +
                         " images; " + (to_stdout ? "the output is incomplete" : out + " not written"));
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
                 static_cast<long long>(input->count()), input->name().c_str(), to_stdout ? "standard output" : out.c_str(),
                 config.checkpoint.c_str(), static_cast<long long>(model.state.progress.epoch), world.size());
    if (input->has_labels()) std::fprintf(summary, "; loss %.6f  accuracy %.2f%%", loss / n, 100.0 * static_cast<double>(correct) / n);
    std::fprintf(summary, "\n");
    std::fflush(summary);
  }
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace cnn
