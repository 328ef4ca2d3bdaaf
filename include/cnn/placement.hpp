// Where a rank runs, in words, for its `rank R/N on HOST (...)` line: its local rank among the ranks
// of its node and the CPUs it may run on. A multi-node launch that goes wrong shows there first: two
// ranks of one node with the same local rank (then the same GPU), or ranks bound to the same cores.
#pragma once

#include <string>
#include <vector>

namespace cnn {

// "1", "2-3", "0,4-7": ascending numbers (ranks, CPUs) as ranges.
std::string ranges_text(const std::vector<int>& sorted);

// The CPUs of this process's affinity mask, which mpirun and srun narrow when they bind: "cpus 0-1",
// "cpu 3". Its count is what --threads defaults to at most.
std::string affinity_text();

}  // namespace cnn
