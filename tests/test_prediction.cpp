// What `cnn_mpi predict` is built from (docs/PREDICT.md); tests/predict_test.sh runs the command:
//   1. softmax_probabilities: probabilities that sum to 1 without overflow, and the predicted class
//      by the rule softmax_cross_entropy counts hits by (the first of equal logits);
//   2. Backend::evaluate_logits on the CPU backends: the stats of evaluate(), logits whose argmax
//      counts the same hits, a sample's logits the same bits whatever the call's other samples (so
//      that rows do not depend on the rank count), and seq agreeing with threads;
//   3. PredictionFile: the file appears only at commit, whole; a name taken before or during the
//      run is never replaced; nothing is left behind.
#define BOOST_TEST_MODULE prediction
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/errors.hpp"
#include "cnn/network.hpp"
#include "cnn/ops.hpp"
#include "cnn/prediction_file.hpp"
#include "test_util.hpp"

namespace {

std::unique_ptr<cnn::Backend> backend_of(const cnn::Network& net, cnn::BackendKind kind, int threads) {
  cnn::BackendOptions options;
  options.kind = kind;
  options.threads = threads;
  return cnn::make_cpu_backend(net, options);
}

std::vector<float> params_of(const cnn::Network& net, std::uint64_t seed) {
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, seed);
  return params;
}

int argmax(const float* z, int classes) {
  int best = 0;
  for (int k = 1; k < classes; ++k)
    if (z[k] > z[best]) best = k;
  return best;
}

// A fresh directory under TMPDIR, removed with what it holds.
struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/cnn_prediction.XXXXXX";
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { (void)std::system(("rm -rf '" + path + "'").c_str()); }
  // Whether the directory holds exactly `name` (no temporary beside it).
  bool holds_only(const std::string& name) const {
    return std::system(("test \"$(ls -A '" + path + "')\" = '" + name + "'").c_str()) == 0;
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(softmax_probabilities_sum_to_one_and_pick_the_first_largest_logit) {
  std::vector<double> p(4);
  const float huge[4] = {1000.0f, 999.0f, -1000.0f, 1000.0f};  // exp(1000) overflows a double
  BOOST_TEST(cnn::softmax_probabilities(huge, 4, p.data()) == 0);  // ties: the first, as eval counts
  BOOST_TEST(std::fabs(p[0] + p[1] + p[2] + p[3] - 1.0) < 1e-12);
  BOOST_TEST(std::fabs(p[0] - p[3]) < 1e-15);
  BOOST_TEST(p[2] == 0.0);
  const float plain[4] = {0.0f, std::log(3.0f), 0.0f, 0.0f};
  BOOST_TEST(cnn::softmax_probabilities(plain, 4, p.data()) == 1);
  BOOST_TEST(std::fabs(p[1] - 0.5) < 1e-7);
  BOOST_TEST(std::fabs(p[0] - 1.0 / 6.0) < 1e-7);
}

BOOST_AUTO_TEST_CASE(evaluate_logits_matches_evaluate_and_does_not_depend_on_the_call) {
  const std::vector<std::pair<std::string, cnn::TensorShape>> networks = {
      {"seed", {1, 28, 28}},  // threads: the fused conv_relu_pool
      {"conv3x3:6/p1 relu maxpool2 conv3x3:8 relu fc:16 relu fc:10", {3, 20, 20}},
  };
  for (const auto& [model, shape] : networks) {
    const cnn::Network net = cnn::build_network(model, 8, shape, 10);
    const cnn::Dataset data = cnn::test::random_dataset(120, shape, 51);
    const std::vector<float> params = params_of(net, 3);
    std::vector<float> reference;  // seq, all samples in one call
    for (const auto& [kind, threads] : {std::pair{cnn::BackendKind::kSeq, 1}, {cnn::BackendKind::kThreads, 1},
                                        {cnn::BackendKind::kThreads, 3}}) {
      BOOST_TEST_CONTEXT(model << " " << cnn::backend_kind_name(kind) << " x" << threads) {
        auto backend = backend_of(net, kind, threads);
        backend->bind_data(data, data);
        backend->upload_params(params);
        std::vector<float> logits(120 * 10);
        const cnn::BatchStats stats = backend->evaluate_logits(0, 120, logits.data());
        const cnn::BatchStats plain = backend->evaluate(0, 120);
        BOOST_TEST(stats.count == 120);
        BOOST_TEST(stats.correct == plain.correct);
        BOOST_TEST(stats.loss_sum == plain.loss_sum);
        std::int64_t hits = 0;
        for (std::int64_t s = 0; s < 120; ++s) hits += argmax(&logits[s * 10], 10) == data.labels[s];
        BOOST_TEST(hits == stats.correct);
        // Samples 37..60 alone: the same bits as in the call over all 120.
        std::vector<float> part(23 * 10);
        backend->evaluate_logits(37, 23, part.data());
        BOOST_TEST(std::equal(part.begin(), part.end(), logits.begin() + 37 * 10));
        if (reference.empty()) {
          reference = logits;
        } else {
          const double error = cnn::test::relative_error(logits, reference);
          BOOST_TEST(error <= 1e-5, "against seq: relative error " << error);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(prediction_file_appears_whole_at_commit) {
  const TempDir dir;
  const std::string path = dir.path + "/p.csv";
  cnn::require_new_output(path);
  {
    cnn::PredictionFile file(path);
    file.write("index,label\n");
    file.write("0,1\n");
    BOOST_TEST(!exists(path));  // nothing under the name before commit
    file.commit();
  }
  BOOST_TEST(read_text(path) == "index,label\n0,1\n");
  struct stat info {};
  BOOST_TEST(::stat(path.c_str(), &info) == 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  BOOST_TEST((info.st_mode & 0777) == (0666 & ~mask));  // not mkstemp's 0600
  BOOST_CHECK_THROW(cnn::require_new_output(path), cnn::UsageError);
  BOOST_TEST(dir.holds_only("p.csv"));  // no temporary left
}

BOOST_AUTO_TEST_CASE(prediction_file_never_replaces_a_name_taken_meanwhile) {
  const TempDir dir;
  const std::string path = dir.path + "/p.csv";
  {
    cnn::PredictionFile file(path);
    file.write("ours\n");
    std::ofstream(path) << "theirs\n";  // created while predict ran
    BOOST_CHECK_THROW(file.commit(), cnn::UsageError);
  }
  BOOST_TEST(read_text(path) == "theirs\n");
  BOOST_TEST(dir.holds_only("p.csv"));
  {
    cnn::PredictionFile abandoned(dir.path + "/q.csv");  // an error before commit: no trace
    abandoned.write("half\n");
  }
  BOOST_TEST(!exists(dir.path + "/q.csv"));
  BOOST_TEST(dir.holds_only("p.csv"));
}

BOOST_AUTO_TEST_CASE(require_new_output_refuses_what_cannot_be_created) {
  const TempDir dir;
  BOOST_CHECK_THROW(cnn::require_new_output(dir.path), cnn::UsageError);                 // exists: a directory
  BOOST_CHECK_THROW(cnn::require_new_output(dir.path + "/sub/"), cnn::UsageError);       // names a directory
  BOOST_CHECK_THROW(cnn::require_new_output(dir.path + "/none/p.csv"), cnn::IoError);    // no directory
  BOOST_TEST(::symlink("/nonexistent/target", (dir.path + "/dangling").c_str()) == 0);
  BOOST_CHECK_THROW(cnn::require_new_output(dir.path + "/dangling"), cnn::UsageError);   // a link, even dangling
  cnn::require_new_output(cnn::kStandardOutput);
  cnn::require_new_output(dir.path + "/new.csv");
}
