// SliceSums (slice_sums.hpp): a counting barrier whose last arrival adds the parts.
#include "cpu/slice_sums.hpp"

#include <algorithm>
#include <stdexcept>

namespace cnn {

void SliceSums::begin_step(int participants) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arrived_ != 0) throw std::logic_error("SliceSums::begin_step: a sum is still waiting for its parts");
  participants_ = std::max(1, participants);
  parts_.assign(static_cast<std::size_t>(participants_), nullptr);
}

void SliceSums::sum(int participant, double* values, std::size_t n) {
  if (participants_ == 1) return;  // one part is its own sum
  std::unique_lock<std::mutex> lock(mutex_);
  parts_[static_cast<std::size_t>(participant)] = values;
  if (++arrived_ == participants_) {
    // Every other participant waits with its part alive: add them in participant order.
    total_.assign(n, 0.0);
    for (const double* part : parts_)
      for (std::size_t i = 0; i < n; ++i) total_[i] += part[i];
    arrived_ = 0;
    ++round_;
    done_.notify_all();
  } else {
    const std::uint64_t round = round_;
    done_.wait(lock, [&] { return round_ != round; });
  }
  // total_ stays until the next round completes, which needs this participant's next call.
  std::copy(total_.begin(), total_.begin() + static_cast<std::ptrdiff_t>(n), values);
}

}  // namespace cnn
