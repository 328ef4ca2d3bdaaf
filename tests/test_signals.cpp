// The stop-signal rules (include/cnn/signals.hpp), each checked in a forked child so that the exits
// under test end the child, not the test runner: the first signal only sets the flag; a repeat within
// 2 s is the same request delivered twice; a later one exits at once with 128 + signo.
#define BOOST_TEST_MODULE signals
#include "boost_test.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>

#include "cnn/signals.hpp"

namespace {

constexpr int kFlagSet = 10;     // child exit codes: the flag holds the expected signal
constexpr int kFlagWrong = 11;
constexpr unsigned kPastDuplicateWindowUs = 2'200'000;  // > the 2 s duplicate window

// Runs `body` in a child with the handlers installed; returns its wait status.
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    cnn::install_stop_handlers();
    _exit(body());
  }
  int status = 0;
  BOOST_REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

BOOST_AUTO_TEST_CASE(first_signal_only_sets_the_flag) {
  for (const int signo : {SIGTERM, SIGINT, SIGUSR1}) {
    const int status = in_child([signo] {
      std::raise(signo);
      return cnn::local_stop_signal() == signo ? kFlagSet : kFlagWrong;
    });
    BOOST_TEST(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == kFlagSet);
  }
}

BOOST_AUTO_TEST_CASE(repeat_within_the_window_is_the_same_request) {
  // SLURM signals every process and mpirun forwards its own copy: the rank sees SIGTERM twice.
  const int status = in_child([] {
    std::raise(SIGTERM);
    std::raise(SIGTERM);
    std::raise(SIGINT);
    return cnn::local_stop_signal() == SIGTERM ? kFlagSet : kFlagWrong;
  });
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == kFlagSet);
}

BOOST_AUTO_TEST_CASE(a_later_second_signal_exits_at_once) {
  const int status = in_child([] {
    std::raise(SIGTERM);
    usleep(kPastDuplicateWindowUs);
    std::raise(SIGINT);  // does not return
    return kFlagWrong;
  });
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 128 + SIGINT);
}

BOOST_AUTO_TEST_CASE(signal_names) {
  BOOST_TEST(std::string(cnn::signal_name(SIGTERM)) == "SIGTERM");
  BOOST_TEST(std::string(cnn::signal_name(SIGUSR1)) == "SIGUSR1");
}
