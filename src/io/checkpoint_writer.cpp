#include "cnn/checkpoint_writer.hpp"

#include <cstdio>
#include <stdexcept>

#include "cnn/errors.hpp"
#include "cnn/phase_times.hpp"

namespace cnn {

CheckpointWriter::CheckpointWriter(CheckpointDir dir, const ParamLayout& layout, int keep)
    : dir_(std::move(dir)), layout_(layout), keep_(keep) {}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "warning: the checkpoint write in flight failed as well: %s\n", e.what());
    std::fflush(stderr);
  } catch (...) {
    std::fprintf(stderr, "warning: the checkpoint write in flight failed as well\n");
  }
}

void CheckpointWriter::start(CheckpointMeta meta, const CheckpointTensors& tensors) {
  if (in_flight()) throw std::logic_error("CheckpointWriter::start: a write is in flight (wait() first)");
  meta_ = std::move(meta);
  tensors_ = tensors;
  written_ = Written{};
  error_ = nullptr;
  state_.store(State::kRunning, std::memory_order_release);
  const double start = wall_seconds();
  try {
    thread_ = std::thread([this, start] { run(start); });
  } catch (...) {
    state_.store(State::kIdle);  // no thread (std::system_error): nothing in flight, the caller's error
    throw;
  }
}

void CheckpointWriter::run(double start) {
  try {
    written_.path = dir_.save(meta_, tensors_, layout_, keep_);
    written_.seconds = wall_seconds() - start;
    state_.store(State::kSucceeded, std::memory_order_release);
  } catch (...) {
    error_ = std::current_exception();  // rethrown on the trainer's thread by wait()
    state_.store(State::kFailed, std::memory_order_release);
  }
}

std::optional<CheckpointWriter::Written> CheckpointWriter::wait() {
  if (!in_flight()) return std::nullopt;
  thread_.join();
  const State ended = state_.exchange(State::kIdle, std::memory_order_acq_rel);
  if (ended == State::kFailed) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
  return written_;
}

}  // namespace cnn
