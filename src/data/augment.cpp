// --augment's text (augment.hpp): parsing, the canonical form the settings block, the checkpoint and
// the ranks' launch agreement compare, and the check against the data's image size.
#include "cnn/augment.hpp"

#include <algorithm>
#include <sstream>

#include "cnn/errors.hpp"

namespace cnn {

namespace {

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw UsageError("--augment '" + text + "': " + why + " (expected none, or a comma list of crop:P and flip)");
}

// P of "crop:P": digits only, 1 .. kMaxAugmentPad.
int parse_pad(const std::string& text, const std::string& digits) {
  if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos)
    refuse(text, "crop needs a whole number of pixels, as in crop:4");
  const int pad = std::stoi(digits);
  if (pad < 1 || pad > kMaxAugmentPad)
    refuse(text, "crop:" + digits + " must pad 1 to " + std::to_string(kMaxAugmentPad) + " pixels");
  return pad;
}

}  // namespace

Augment parse_augment(const std::string& text) {
  Augment augment;
  if (text == "none") return augment;
  if (text.empty()) refuse(text, "empty");
  bool seen_crop = false;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string token = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (token == "flip") {
      if (augment.flip) refuse(text, "flip twice");
      augment.flip = true;
    } else if (token.rfind("crop:", 0) == 0) {
      if (seen_crop) refuse(text, "crop twice");
      seen_crop = true;
      augment.pad = parse_pad(text, token.substr(5));
    } else {
      refuse(text, token.empty() ? "an empty item" : "unknown item '" + token + "'");
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return augment;
}

std::string augment_text(const Augment& augment) {
  if (!augment.active()) return "none";
  std::ostringstream text;
  if (augment.pad > 0) text << "crop:" << augment.pad;
  if (augment.flip) text << (augment.pad > 0 ? "," : "") << "flip";
  return text.str();
}

void check_augment_fits(const Augment& augment, std::int64_t height, std::int64_t width) {
  const std::int64_t most = std::min(height, width) / 2;
  if (augment.pad > most)
    throw UsageError("--augment crop:" + std::to_string(augment.pad) + " pads more than half of the " +
                     std::to_string(height) + "x" + std::to_string(width) + " images (at most crop:" +
                     std::to_string(most) + ")");
}

}  // namespace cnn
