// Training-time augmentation (--augment crop:P,flip; docs/TRAINING.md): each training sample is
// shifted by a random crop of the image padded with P zero pixels on every side, and mirrored left to
// right with probability 1/2. Both are drawn as a pure function of (the step's key, the sample's index
// in the global batch): the step's key is a function of (seed, global step), which fixes the epoch and
// the step in it, so a sample's draw is a function of (seed, epoch, the sample's place in the epoch's
// order). Nothing is stored or carried, so the CPU and the GPU draw the same (integer arithmetic,
// host and device), any rank count draws the same for a sample (a rank's slice keeps its samples'
// global indices, as dropout's masks do, dropout_mask.hpp), and a resumed run draws what the
// uninterrupted one did. Evaluation, test and predict never augment.
#pragma once

#include <cstdint>
#include <string>

#include "cnn/dropout_mask.hpp"
#include "cnn/rng.hpp"

namespace cnn {

// What --augment asks for; the default (pad 0, no flip) is "none" and gathers as before.
struct Augment {
  int pad = 0;        // crop:P: P pixels of zero padding on each side, then a random crop of the image's size
  bool flip = false;  // flip: a horizontal flip of every other sample (drawn)

  bool active() const { return pad > 0 || flip; }
  bool operator==(const Augment& other) const { return pad == other.pad && flip == other.flip; }
  bool operator!=(const Augment& other) const { return !(*this == other); }
};

// The most padding --augment accepts before the data's shape is known (augment_fits checks the shape).
constexpr int kMaxAugmentPad = 1024;

// "none", or a comma list of "crop:P" and "flip" (each at most once). Throws UsageError naming
// --augment and the bad token, one line.
Augment parse_augment(const std::string& text);
// The canonical text: "none", "crop:4", "flip", "crop:4,flip" (parse_augment reads it back).
std::string augment_text(const Augment& augment);
// Throws UsageError when crop:P does not fit an image of height x width (P at most half of each).
void check_augment_fits(const Augment& augment, std::int64_t height, std::int64_t width);

// One sample's draw: the crop's offset (dy, dx) in the padded image, each in [0, 2P] (a shift of
// dy - P rows and dx - P columns), and whether it is mirrored.
struct AugmentDraw {
  int dy = 0;
  int dx = 0;
  bool flip = false;
};

CNN_HOST_DEVICE inline AugmentDraw augment_draw(int pad, bool flip, std::uint64_t step_key, std::uint64_t sample) {
  // A key of its own beside dropout's (dropout_bits mixes its salt the other way), so the two never
  // share bits for the same sample.
  const std::uint64_t bits = mix64(mix64(step_key ^ 0xa0761d6478bd642fULL) + mix64(sample + 0xe7037ed1a0b428dbULL));
  const std::uint32_t span = static_cast<std::uint32_t>(2 * pad + 1);
  AugmentDraw draw;
  // 24 bits each, reduced by a remainder: a bias of at most span / 2^24, negligible for any span accepted.
  draw.dy = static_cast<int>(static_cast<std::uint32_t>(bits & 0xffffffULL) % span);
  draw.dx = static_cast<int>(static_cast<std::uint32_t>((bits >> 24) & 0xffffffULL) % span);
  draw.flip = flip && ((bits >> 63) != 0);
  return draw;
}

// Where output pixel (y, x) of a drawn sample reads in its source image, or -1 where it falls in the
// zero padding: the crop at (dy, dx) of the padded image, then its mirror (x -> W-1-x).
CNN_HOST_DEVICE inline std::int64_t augment_source(const AugmentDraw& draw, int pad, std::int64_t y, std::int64_t x,
                                                   std::int64_t height, std::int64_t width) {
  const std::int64_t sy = y + draw.dy - pad;
  const std::int64_t sx = (draw.flip ? width - 1 - x : x) + draw.dx - pad;
  if (sy < 0 || sy >= height || sx < 0 || sx >= width) return -1;
  return sy * width + sx;
}

}  // namespace cnn
