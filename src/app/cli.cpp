#include "cnn/trace.hpp"
#include "cnn/cli.hpp"

#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <sstream>
#include <type_traits>

#include "app/optimizer_options.hpp"
#include "app/preset_recipe.hpp"
#include "cnn/build_info.hpp"
#include "cnn/config_file.hpp"
#include "cnn/errors.hpp"
#include "cnn/presets.hpp"
#include "cnn/utc_time.hpp"

namespace cnn {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

// Stream mode's window budget in MiB; multiplied by 2^20 as a 64-bit byte count, so bounded well below.
constexpr std::int64_t kMaxStreamWindowMb = std::int64_t{1} << 20;

template <typename T>
std::string str(T value) {
  std::ostringstream text;
  text << std::setprecision(15) << value;  // 0.99999999999 must not print as 1
  return text.str();
}

// Integers are parsed here, not by CLI11, so that a value that does not fit its type is refused
// instead of wrapping or saturating (`--seed -1` and `--seed 2^64` both became 2^64-1). Decimal only.
template <typename T>
T parse_integer(const std::string& option, const std::string& text) {
  static_assert(std::is_integral_v<T>, "integer options only");
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (std::is_unsigned_v<T> && first != last && *first == '-')
    throw CLI::ValidationError(option, "must not be negative (got " + text + ")");
  T value{};
  const auto [end, error] = std::from_chars(first, last, value);
  if (error == std::errc::result_out_of_range)
    throw CLI::ValidationError(option, text + " does not fit: the range is " +
                                           std::to_string(std::numeric_limits<T>::min()) + ".." +
                                           std::to_string(std::numeric_limits<T>::max()));
  if (error != std::errc() || end != last || text.empty())
    throw CLI::ValidationError(option, "expected a whole number, got '" + text + "'");
  return value;
}

template <typename T>
CLI::Option* add_integer(CLI::App& app, const std::string& name, T& target, const std::string& help) {
  return app.add_option_function<std::string>(
                name, [name, &target](const std::string& text) { target = parse_integer<T>(name, text); }, help)
      ->default_str(std::to_string(target))
      ->type_name(std::is_unsigned_v<T> ? "UINT" : "INT");
}

// Learning rates and the optimizer's coefficients are used as float on every backend: 1e-50 is a
// positive double but 0 as a float (the run would train nothing), and 0.99999999999 is below 1 as a
// double but exactly 1 as a float (Adam's bias correction then divides by zero). So they are checked
// as the float the update will see.
bool positive_float(double value) {  // a normal float: 1.2e-38..3.4e38
  const auto f = static_cast<float>(value);
  return std::isfinite(value) && std::isfinite(f) && f >= std::numeric_limits<float>::min();
}
bool unit_interval_float(double value) {  // [0, 1) as a float
  const auto f = static_cast<float>(value);
  return std::isfinite(value) && value >= 0 && f < 1.0f;
}

// --steps-per-launch: auto (0) or a whole number N >= 1.
std::int64_t parse_steps_per_launch(const std::string& text) {
  if (text == "auto") return 0;
  const std::string expected = "--steps-per-launch must be auto or a whole number of at least 1 (got '" + text + "')";
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(error == std::errc() && end == text.data() + text.size() && !text.empty() && value >= 1, expected);
  return value;
}

// The text of the options that take a value from a fixed list, as given; validate() turns each into
// its enum in the order the checks below have always run, so the first error reported stays the same.
struct ChoiceTexts {
  std::string dataset = dataset_name(DatasetKind::kFashion);
  std::string data_mode = data_mode_name(DataMode::kAuto);
  std::string optimizer = optimizer_name(OptimizerKind::kSgd);
  std::string lr_schedule = lr_schedule_name(LrScheduleKind::kConstant);
  std::string device = device_name(DeviceChoice::kAuto);
  std::string backend;  // empty: chosen from --device
  std::string overlap = overlap_name(OverlapChoice::kAuto);
  std::string allreduce = allreduce_name(AllreducePath::kAuto);
  std::string on_nonfinite = nonfinite_policy_name(NonFinitePolicy::kStop);
  std::string precision = precision_name(Precision::kFp32);
  std::string augment = "none";
  std::string steps_per_launch = "auto";
};

// `text` as one of `choices` (named by `name`); otherwise "OPTION: unknown NOUN 'TEXT' (available: ...)".
template <typename Enum, std::size_t N>
Enum parse_choice(const std::string& text, const Enum (&choices)[N], const char* (*name)(Enum), const char* option,
                  const char* noun) {
  std::string available;
  for (const Enum choice : choices) {
    if (text == name(choice)) return choice;
    available += (available.empty() ? "" : ", ") + std::string(name(choice));
  }
  throw UsageError(std::string(option) + ": unknown " + noun + " '" + text + "' (available: " + available + ")");
}

constexpr OptimizerKind kOptimizers[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam,
                                         OptimizerKind::kAdamW};
constexpr DatasetKind kDatasets[] = {DatasetKind::kMnist, DatasetKind::kFashion, DatasetKind::kCifar10,
                                     DatasetKind::kHdf5};
constexpr DataMode kDataModes[] = {DataMode::kAuto, DataMode::kMemory, DataMode::kStream};
constexpr DeviceChoice kDevices[] = {DeviceChoice::kCpu, DeviceChoice::kGpu, DeviceChoice::kAuto};
constexpr OverlapChoice kOverlaps[] = {OverlapChoice::kOn, OverlapChoice::kOff, OverlapChoice::kAuto};
constexpr Precision kPrecisions[] = {Precision::kFp32, Precision::kTf32, Precision::kBf16};
constexpr AllreducePath kAllreducePaths[] = {AllreducePath::kNccl, AllreducePath::kPeer, AllreducePath::kMpi,
                                             AllreducePath::kAuto};

void validate(TrainConfig& c, const ChoiceTexts& t) {
  require(c.filters >= 1, "--filters must be at least 1 (got " + str(c.filters) + ")");
  require(c.filters <= 4096, "--filters must be at most 4096 (got " + str(c.filters) + ")");
  require(c.batch >= 1, "--batch must be at least 1 (got " + str(c.batch) + ")");
  require(c.epochs >= 1, "--epochs must be at least 1 (got " + str(c.epochs) + ")");
  require(positive_float(c.lr), "--lr must be a positive number that a float can hold (1.2e-38..3.4e38; got " +
                                   str(c.lr) + ")");
  require(unit_interval_float(c.momentum), "--momentum must be in [0, 1) as a float (got " + str(c.momentum) + ")");
  c.optimizer = parse_choice(t.optimizer, kOptimizers, optimizer_name, "--optimizer", "optimizer");
  require(unit_interval_float(c.beta1), "--beta1 must be in [0, 1) as a float (got " + str(c.beta1) + ")");
  require(unit_interval_float(c.beta2), "--beta2 must be in [0, 1) as a float (got " + str(c.beta2) + ")");
  require(positive_float(c.eps), "--eps must be a positive number that a float can hold (1.2e-38..3.4e38; got " +
                                     str(c.eps) + ")");
  validate_optimizer_options(c, t.lr_schedule);  // schedule, warm-up, decay, nesterov, smoothing
  c.augment = parse_augment(t.augment);           // the image size is checked once the data is known
  c.dataset = parse_choice(t.dataset, kDatasets, dataset_name, "--dataset", "data set");
  c.data_mode = parse_choice(t.data_mode, kDataModes, data_mode_name, "--data-mode", "mode");
  require(c.data_mode != DataMode::kStream || c.dataset == DatasetKind::kHdf5,
          "--data-mode stream needs --dataset hdf5 (convert other formats with cnn_convert)");
  require(c.stream_window_mb >= 1, "--stream-window-mb must be at least 1 (got " + str(c.stream_window_mb) + ")");
  require(c.stream_window_mb <= kMaxStreamWindowMb, "--stream-window-mb must be at most " + str(kMaxStreamWindowMb) +
                                                        " (1 TiB; got " + str(c.stream_window_mb) + ")");
  require(!c.h5_images.empty() && c.h5_images[0] == '/', "--h5-images must be an absolute dataset path like /images");
  require(!c.h5_labels.empty() && c.h5_labels[0] == '/', "--h5-labels must be an absolute dataset path like /labels");
  c.device = parse_choice(t.device, kDevices, device_name, "--device", "device");
  if (!t.backend.empty()) c.backend = parse_backend_kind(t.backend);
  if (c.backend && c.device != DeviceChoice::kAuto) {
    const bool gpu_backend = *c.backend == BackendKind::kCuda;
    require(gpu_backend == (c.device == DeviceChoice::kGpu),
            "--backend " + t.backend + " does not run on --device " + t.device);
  }
  c.overlap = parse_choice(t.overlap, kOverlaps, overlap_name, "--overlap", "value");
  c.allreduce = parse_choice(t.allreduce, kAllreducePaths, allreduce_name, "--allreduce", "path");
  c.precision = parse_choice(t.precision, kPrecisions, precision_name, "--precision", "precision");
  c.steps_per_launch = parse_steps_per_launch(t.steps_per_launch);
  require(c.threads >= 0, "--threads must be at least 1, or 0 for automatic (got " + str(c.threads) + ")");
  require(c.train_samples >= 0, "--train-samples must be 0 (all) or positive (got " + str(c.train_samples) + ")");
  require(c.test_samples >= 0, "--test-samples must be 0 (all) or positive (got " + str(c.test_samples) + ")");
  require(c.checkpoint_every >= 0, "--checkpoint-every must be 0 (final only) or positive (got " +
                                       str(c.checkpoint_every) + ")");
  require(c.checkpoint_every_steps >= 0, "--checkpoint-every-steps must be 0 (off) or positive (got " +
                                             str(c.checkpoint_every_steps) + ")");
  require(c.keep >= 1, "--keep must be at least 1 (got " + str(c.keep) + ")");
  parse_trace_window(c.trace_steps);  // throws UsageError for a bad A:B
  require(std::isfinite(c.stall_timeout) && c.stall_timeout >= 0,
          "--stall-timeout must be 0 (off) or a positive number of seconds (got " + str(c.stall_timeout) + ")");
  c.on_nonfinite = parse_nonfinite_policy(t.on_nonfinite);  // throws UsageError naming --on-nonfinite
  if (c.command == Command::kEval) require(!c.checkpoint.empty(), "eval needs --checkpoint PATH");
  if (c.command == Command::kPredict) {
    require(!c.checkpoint.empty(), "predict needs --checkpoint PATH");
    require(!c.out_dir.empty(), "predict needs --out FILE.csv (or --out - for standard output)");
  }
  require(c.split == "test" || c.split == "train", "--split: unknown split '" + c.split + "' (available: test, train)");
  require(c.command == Command::kPredict || c.split == "test", "--split belongs to `predict`");
  if (c.command == Command::kTrain) require(c.checkpoint.empty(), "--checkpoint belongs to `eval` and `predict`; to continue a run use --resume PATH");
}

// A checkpoint written by a run lives in RUN_DIR/checkpoints/; resuming it continues that run.
std::string run_dir_of_checkpoint(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  const std::string dir = path.substr(0, slash);
  const std::string sub = "checkpoints";
  const std::size_t parent_slash = dir.find_last_of('/');
  const std::string last = parent_slash == std::string::npos ? dir : dir.substr(parent_slash + 1);
  if (last != sub) return "";
  return parent_slash == std::string::npos ? std::string(".") : dir.substr(0, parent_slash);
}

// Cores this process may run on (its affinity mask), which mpirun and srun narrow when they bind.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

// A positive integer from the environment, or 0 when unset or not a positive integer.
int positive_env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return (end != text && *end == '\0' && value > 0 && value < 100000) ? static_cast<int>(value) : 0;
}


}  // namespace

CliResult parse_command_line(int argc, char** argv) {
  CliResult result;
  TrainConfig& c = result.config;
  ChoiceTexts choices;
  CLI::App app{"cnn_mpi: data-parallel CNN training over MPI ranks, on CPU cores or GPUs", "cnn_mpi"};
  // A repeated option takes its last value, so scripts can append overrides to a common command line.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", std::string("cnn_mpi ") + CNN_VERSION);
  app.fallthrough();  // options may follow the subcommand: `cnn_mpi train --epochs 2`
  app.require_subcommand(0, 1);
  app.add_subcommand("train", "train the model (the default)");
  CLI::App* eval = app.add_subcommand("eval", "evaluate a checkpoint on the test set");
  CLI::App* predict = app.add_subcommand("predict", "write a checkpoint's predictions for every image of a split to a CSV file");

  app.add_option("--data", c.data_dir, "directory holding the data set files")->group("Data");
  app.add_option("--dataset", choices.dataset,
                 "data set format and name: mnist | fashion (IDX), cifar10 (CIFAR-10 binary), hdf5 (DIR/train.h5 "
                 "and DIR/test.h5)")
      ->group("Data");
  app.add_option("--data-mode", choices.data_mode,
                 "auto | memory | stream: hold the data whole, or read each rank's samples from HDF5 window by window "
                 "(auto: stream when the images exceed 1 GiB)")
      ->group("Data");
  add_integer(app, "--stream-window-mb", c.stream_window_mb,
                 "stream mode: MiB per rank for the two windows of training samples (one trains, one is read)")
      ->group("Data");
  app.add_option("--h5-images", c.h5_images, "hdf5: dataset path of the uint8 images [N,C,H,W]")->group("Data");
  app.add_option("--h5-labels", c.h5_labels, "hdf5: dataset path of the uint8 labels [N]")->group("Data");
  add_integer(app, "--train-samples", c.train_samples, "use only the first N training images (0: all)")->group("Data");
  add_integer(app, "--test-samples", c.test_samples, "evaluate only the first N test images (0: all)")->group("Data");
  app.add_option("--split", c.split, "predict: the split of --data to predict, test | train")->group("Data");

  app.add_option("--model", c.model,
                 "a preset or a layer spec (quote it). Presets: " + presets_help() + ". "
                 "Spec tokens, space-separated: conv<K>x<K>:<F>[/s<S>][/p<P>] (stride S=1, zero padding P=0), "
                 "relu, maxpool<K>[/s<S>] (S=K), avgpool<K>[/s<S>], avgpool (global), dropout:<P> (0<=P<1), flatten (implicit before the first fc), fc:<N>, "
                 "res[<layers>] (a residual block: its layers plus the identity, or a 1x1 conv shortcut when "
                 "they change the shape; e.g. 'res[conv3x3:64/p1 relu conv3x3:64/p1] relu'); the last "
                 "layer must be fc:<classes>")
      ->group("Model");
  add_integer(app, "--filters", c.filters, "convolution filters D of the seed preset")->group("Model");
  add_integer(app, "--batch", c.batch, "GLOBAL batch size, split over all ranks")->group("Training");
  add_integer(app, "--epochs", c.epochs, "epochs to train")->group("Training");
  app.add_option("--lr", c.lr, "learning rate")->group("Training");
  app.add_option("--optimizer", choices.optimizer, "sgd | momentum | adam | adamw (adam with decoupled weight decay)")
      ->group("Training");
  app.add_option("--momentum", c.momentum, "momentum coefficient for --optimizer momentum")->group("Training");
  app.add_option("--beta1", c.beta1, "adam, adamw: decay of the gradient average")->group("Training");
  app.add_option("--beta2", c.beta2, "adam, adamw: decay of the squared-gradient average")->group("Training");
  app.add_option("--eps", c.eps, "adam, adamw: added to the denominator")->group("Training");
  app.add_option("--lr-schedule", choices.lr_schedule,
                 "constant | step:E1,E2,...[/GAMMA] (lr times GAMMA, default 0.1, from each epoch Ei on) | cosine "
                 "(to 0 over the run) | onecycle (PyTorch's OneCycleLR, max lr --lr)")
      ->group("Training");
  add_integer(app, "--warmup-steps", c.warmup_steps,
              "linear warm-up: update t uses the scheduled lr times min(1, (t+1)/N)")
      ->group("Training");
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay W on every parameter: g + W*p for sgd, momentum and adam; decoupled for adamw")
      ->group("Training");
  app.add_flag("--nesterov", c.nesterov, "Nesterov momentum (--optimizer momentum)")->group("Training");
  app.add_flag("--bn-local", c.bn_local,
               "bn layers normalise with each rank's own batch statistics (faster: no allreduce inside the "
               "step), which breaks the promise that N ranks compute what one rank computes; default: the "
               "global batch's")
      ->group("Training");
  app.add_option("--label-smoothing", c.label_smoothing,
                 "label smoothing S in [0, 1] of the training loss (targets (1-S)*onehot + S/classes)")
      ->group("Training");
  app.add_option("--augment", choices.augment,
                 "none | a comma list of crop:P (a random crop of the image padded with P zero pixels) and flip "
                 "(a random horizontal flip), applied to training batches only")
      ->group("Training");
  add_integer(app, "--seed", c.seed, "seed of the initialisation and of the sample order")->group("Training");

  app.add_option("--device", choices.device, "cpu | gpu | auto (gpu when one is usable)")->group("Execution");
  app.add_option("--backend", choices.backend, "seq | threads | cuda (default: threads on cpu, cuda on gpu)")
      ->group("Execution");
  add_integer(app, "--threads", c.threads,
                 "threads per rank for the threads backend (0: $SLURM_CPUS_PER_TASK, $OMP_NUM_THREADS, or the "
                 "cores this rank may use)")
      ->group("Execution");

  app.add_option("--precision", choices.precision,
                 "fp32 | tf32 | bf16: what the conv and fc products of a layer network multiply in on the GPU "
                 "(tensor cores for tf32 and bf16; fp32 sums, weights, gradients and optimizer state always). "
                 "CPU backends: fp32 only")
      ->group("Execution");
  app.add_option("--overlap", choices.overlap,
                 "on | off | auto: run the gradient allreduce under the backward (auto: measured at start-up)")
      ->group("Execution");
  app.add_option("--allreduce", choices.allreduce,
                 "nccl | peer | mpi | auto: the gradient allreduce of GPU ranks (auto: the fastest, timed at start-up)")
      ->group("Execution");
  app.add_option("--steps-per-launch", choices.steps_per_launch,
                 "auto | N: the most training steps one kernel launch runs (the persistent kernel of the seed "
                 "model on one GPU; auto: up to an epoch where it runs, else 1). One rank, --on-nonfinite stop, "
                 "memory mode and no --trace only; otherwise one step per launch, as the settings say")
      ->type_name("AUTO|INT")
      ->group("Execution");

  app.add_option("--out", c.out_dir,
                 "run directory for logs (default: runs/<UTC time>); predict: the CSV file to create (never "
                 "overwritten; - for standard output)")
      ->group("Output");
  app.add_flag("--quiet", c.quiet, "print only the settings and the final result (no live progress line)")
      ->group("Output");
  app.add_option("--trace", c.trace, "write a Chrome trace (Perfetto, chrome://tracing) of --trace-steps to FILE")
      ->group("Output");
  app.add_option("--trace-steps", c.trace_steps, "global steps A:B (B excluded) that --trace records")
      ->capture_default_str()
      ->group("Output");

  add_integer(app, "--checkpoint-every", c.checkpoint_every,
                 "write a checkpoint every N epochs (0: only the final one, which is always written)")
      ->group("Checkpoints");
  add_integer(app, "--checkpoint-every-steps", c.checkpoint_every_steps,
                 "also write one every N global steps (0: off), for long epochs")
      ->group("Checkpoints");
  add_integer(app, "--keep", c.keep, "keep the newest K checkpoints")->group("Checkpoints");
  app.add_option("--resume", c.resume,
                 "continue from a checkpoint: PATH, or auto (the newest valid one in --out; fresh if none)")
      ->group("Checkpoints");
  app.add_option("--checkpoint", c.checkpoint, "eval, predict: the checkpoint file to evaluate or predict with")
      ->group("Checkpoints");

  app.add_option("--stall-timeout", c.stall_timeout,
                 "seconds a rank may make no progress before the job is aborted, naming the rank and phase (0: off)")
      ->group("Reliability");
  app.add_option("--on-nonfinite", choices.on_nonfinite,
                 "non-finite gradients: stop (exit 4, the last checkpoint stays the newest) | skip (drop the step)")
      ->group("Reliability");

  result.options = long_options(app);
  try {
    c.config_file = parse_with_config_file(app, argc, argv);  // --config FILE: its keys, then argv's (config_file.hpp)
  } catch (const CLI::CallForHelp&) {
    result.exit_now = 0;
    result.text = app.help();
    return result;
  } catch (const CLI::CallForAllHelp&) {
    result.exit_now = 0;
    result.text = app.help("", CLI::AppFormatMode::All);
    return result;
  } catch (const CLI::CallForVersion&) {
    result.exit_now = 0;
    result.text = version_line() + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (eval->parsed()) c.command = Command::kEval;
  if (predict->parsed()) c.command = Command::kPredict;
  apply_preset_recipe(app, c);  // a preset's training defaults, for the options left unset (preset_recipe.hpp)
  try {
    validate(c, choices);
  } catch (const UsageError& e) {
    throw UsageError(with_preset_hint(e.what(), c.preset_defaults));  // a refusal of a preset's default says so
  }
  return result;
}

void resolve_config(TrainConfig& c, int world_size, int local_size, int gpus) {
  c.world_size = world_size;
  // Training only: eval and predict take no batch, and run on any number of ranks.
  if (c.command == Command::kTrain && c.batch < world_size)
    throw UsageError("--batch " + str(c.batch) + " is smaller than the number of ranks (" + str(world_size) +
                     "): every rank needs at least one sample per global batch");
  if (c.device == DeviceChoice::kAuto)
    c.device = (c.backend == BackendKind::kCuda || (!c.backend && gpus > 0)) ? DeviceChoice::kGpu : DeviceChoice::kCpu;
  if (c.device == DeviceChoice::kGpu && gpus <= 0)
    throw UsageError("--device gpu: no usable CUDA device" +
                     std::string(gpus < 0 ? " (this build has no CUDA support)" : " (check CUDA_VISIBLE_DEVICES)"));
  if (!c.backend) c.backend = c.device == DeviceChoice::kGpu ? BackendKind::kCuda : BackendKind::kThreads;
  const int cores = usable_cores();
  // More threads than cores only time-slice them (--threads 10000 ran 100x slower): an explicit value
  // above the cores is a mistake to report, a scheduler's variable above them is capped.
  if (c.threads > cores)
    throw UsageError("--threads " + str(c.threads) + " is more than the " + str(cores) +
                     " cores this rank may use (its CPU affinity); give at most " + str(cores));
  if (c.threads == 0) {
    c.threads = std::min(positive_env("SLURM_CPUS_PER_TASK"), cores);
    if (c.threads == 0) c.threads = std::min(positive_env("OMP_NUM_THREADS"), cores);
    if (c.threads == 0) {
      const auto online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
      // Unbound ranks on one node share its cores; a bound rank owns its mask.
      c.threads = cores < online ? cores : std::max(1, online / std::max(1, local_size));
    }
  }
  if (c.backend == BackendKind::kSeq) c.threads = 1;
  if (c.precision != Precision::kFp32 && c.backend != BackendKind::kCuda)
    throw UsageError(std::string("--precision ") + precision_name(c.precision) + ": the " +
                     backend_kind_name(*c.backend) + " backend computes in fp32 only (tf32 and bf16 need --device gpu)");
  if (c.command == Command::kTrain && c.resume == kResumeAuto && c.out_dir.empty())
    throw UsageError("--resume auto looks in the run directory: give it with --out RUN_DIR");
  if (c.out_dir.empty() && !c.resume.empty()) c.out_dir = run_dir_of_checkpoint(c.resume);
  if (c.out_dir.empty() && c.command != Command::kPredict) c.out_dir = "runs/" + utc_time("%Y%m%d-%H%M%S");
}

std::string describe(const TrainConfig& c) {
  std::ostringstream text;
  text << "settings:\n"
       << "  data: " << c.data_dir << " (" << dataset_name(c.dataset) << ")\n";
  if (c.dataset == DatasetKind::kHdf5) text << "  hdf5_datasets: " << c.h5_images << ", " << c.h5_labels << "\n";
  text
       << "  train_samples: " << (c.train_samples ? str(c.train_samples) : std::string("all")) << "\n"
       << "  test_samples: " << (c.test_samples ? str(c.test_samples) : std::string("all")) << "\n"
       << "  model: " << c.model << "\n"
       << describe_preset_defaults(c.preset_defaults)
       << "  filters: " << c.filters << "\n"
       << "  global_batch: " << c.batch << "\n"
       << "  epochs: " << c.epochs << "\n"
       << "  lr: " << c.lr << "\n"
       << "  optimizer: " << optimizer_name(c.optimizer);
  if (c.optimizer == OptimizerKind::kMomentum) text << " (momentum " << c.momentum << (c.nesterov ? ", nesterov)" : ")");
  if (c.optimizer == OptimizerKind::kAdam || c.optimizer == OptimizerKind::kAdamW)
    text << " (beta1 " << c.beta1 << ", beta2 " << c.beta2 << ", eps " << c.eps << ")";
  text << "\n"
       << describe_optimizer_options(c)
       << "  augment: " << augment_text(c.augment) << "\n"
       << "  seed: " << c.seed << "\n"
       << "  device: " << device_name(c.device) << "\n"
       << "  backend: " << (c.backend ? backend_kind_name(*c.backend) : "") << "\n"
       << "  threads_per_rank: " << c.threads << "\n"
       << "  ranks: " << c.world_size << "\n"
       << "  precision: " << precision_name(c.precision) << "\n"
       << "  overlap: " << overlap_name(c.overlap) << ", allreduce: " << allreduce_name(c.allreduce) << "\n"
       << "  out: " << c.out_dir << "\n"
       << "  checkpoint_every: " << (c.checkpoint_every ? str(c.checkpoint_every) + " epoch(s)" : std::string("final only"));
  if (c.checkpoint_every_steps) text << ", and every " << c.checkpoint_every_steps << " steps";
  text << " (keep " << c.keep << ")\n"
       << "  resume: " << (c.resume.empty() ? std::string("no") : c.resume) << "\n"
       << "  stall_timeout: " << (c.stall_timeout > 0 ? str(c.stall_timeout) + " s" : std::string("off")) << "\n"
       << "  on_nonfinite: " << nonfinite_policy_name(c.on_nonfinite) << "\n"
       << "  config_file: " << (c.config_file.empty() ? std::string("none") : c.config_file)
       << (config_file_support() ? "" : " (this build reads none: " + config_file_support_text() + ")") << "\n"
       << "  trace: " << (c.trace.empty() ? std::string("no") : c.trace + " (steps " + c.trace_steps + ")")
       << "\n"
       << describe(c.knobs);
  // A requeued SLURM job keeps its id and counts restarts: both tell which start wrote what.
  if (const char* job = std::getenv("SLURM_JOB_ID")) text << "  slurm_job: " << job << "\n";
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT")) text << "  slurm_restart_count: " << restarts << "\n";
  return text.str();
}

}  // namespace cnn
