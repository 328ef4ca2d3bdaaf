// SliceSums (slice_sums.hpp): a counting barrier whose last arrival adds the parts.
#include "cpu/slice_sums.hpp"

#include <algorithm>
#include <stdexcept>

#include "cnn/communicator.hpp"

namespace cnn {

void SliceSums::begin_step(int participants, Communicator* ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arrived_ != 0) throw std::logic_error("SliceSums::begin_step: a sum is still waiting for its parts");
  participants_ = std::max(1, participants);
  ranks_ = ranks;
  parts_.assign(static_cast<std::size_t>(participants_), nullptr);
}

void SliceSums::sum(int participant, double* values, std::size_t n) {
  if (participants_ == 1 && ranks_ == nullptr) return;  // one part is its own sum
  std::unique_lock<std::mutex> lock(mutex_);
  parts_[static_cast<std::size_t>(participant)] = values;
  ++arrived_;
  if (participant != 0) {
    const std::uint64_t round = round_;
    done_.notify_all();
    done_.wait(lock, [&] { return round_ != round; });
  } else {
    // Participant 0 (the master thread, which alone may call MPI) waits for every part, each
    // participant waiting with its part alive, and adds them in participant order.
    done_.wait(lock, [&] { return arrived_ == participants_; });
    total_.assign(n, 0.0);
    for (const double* part : parts_)
      for (std::size_t i = 0; i < n; ++i) total_[i] += part[i];
    if (ranks_ != nullptr) {
      lock.unlock();  // the others wait for the round to change; nothing else touches total_
      ranks_->allreduce_sum_doubles(total_.data(), static_cast<std::int64_t>(n));
      lock.lock();
    }
    arrived_ = 0;
    ++round_;
    done_.notify_all();
  }
  // total_ stays until the next round completes, which needs this participant's next call.
  std::copy(total_.begin(), total_.begin() + static_cast<std::ptrdiff_t>(n), values);
}

}  // namespace cnn
