#include "cnn/knobs.hpp"

#include <cstdlib>
#include <sstream>

namespace cnn {

Knobs read_knobs_from_environment() {
  Knobs knobs;
  if (const char* graphs = std::getenv("CNN_CUDA_GRAPHS")) knobs.cuda_graphs = std::string(graphs) != "0";
  if (const char* cuts = std::getenv("CNN_OVERLAP_CUTS"))
    knobs.overlap_cuts = static_cast<std::uint32_t>(std::strtoul(cuts, nullptr, 10));
  if (const char* blocks = std::getenv("CNN_PEER_BLOCKS"))
    knobs.peer_blocks = static_cast<int>(std::strtol(blocks, nullptr, 10));
  return knobs;
}

std::string describe(const Knobs& knobs) {
  std::ostringstream text;
  const char* separator = "  knobs: ";
  auto add = [&](const char* name, const std::string& value) {
    text << separator << name << "=" << value;
    separator = ", ";
  };
  if (knobs.cuda_graphs) add("CNN_CUDA_GRAPHS", *knobs.cuda_graphs ? "1" : "0");
  if (knobs.overlap_cuts) add("CNN_OVERLAP_CUTS", std::to_string(*knobs.overlap_cuts));
  if (knobs.peer_blocks) add("CNN_PEER_BLOCKS", std::to_string(*knobs.peer_blocks));
  if (!text.str().empty()) text << "\n";
  return text.str();
}

}  // namespace cnn
