#include "io/checkpoint_image.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"
#include "io/regular_file.hpp"

namespace cnn::ckpt {
namespace {

constexpr unsigned char kHdf5Signature[] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
constexpr std::size_t kMaxVersionDigits = 9;

bool has_signature_at(const Bytes& bytes, std::size_t offset) {
  return bytes.size() >= offset + sizeof(kHdf5Signature) &&
         std::memcmp(bytes.data() + offset, kHdf5Signature, sizeof(kHdf5Signature)) == 0;
}

std::uint32_t crc32_of(const unsigned char* data, std::size_t size) {
  return static_cast<std::uint32_t>(crc32_z(crc32_z(0L, Z_NULL, 0), data, size));
}

// The one valid user block for (crc, bytes): the header line, then zeros.
Bytes header_block(std::uint32_t crc, std::uint64_t bytes) {
  Bytes block(kUserBlockBytes, 0);
  char line[kUserBlockBytes];
  const int n = std::snprintf(line, sizeof(line), "%s%d crc32=%08" PRIx32 " bytes=%" PRIu64 "\n", kHeaderPrefix,
                              kCheckpointVersion, crc, bytes);
  std::memcpy(block.data(), line, static_cast<std::size_t>(n));
  return block;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) { throw InputError(path + ": " + what); }

// The version named by the header line ("cnn_mpi-checkpoint v<digits> "), or -1 when it is garbled.
long header_version(const Bytes& head) {
  const std::size_t prefix = std::strlen(kHeaderPrefix);
  std::size_t end = prefix;
  while (end < head.size() && end - prefix < kMaxVersionDigits && head[end] >= '0' && head[end] <= '9') ++end;
  if (end == prefix || end >= head.size() || head[end] != ' ') return -1;
  return std::strtol(std::string(head.begin() + prefix, head.begin() + end).c_str(), nullptr, 10);
}

}  // namespace

std::string supported_versions() {
  return "this program reads versions " + std::to_string(kOldestCheckpointVersion) + " and " +
         std::to_string(kCheckpointVersion);
}

void seal(Bytes& image) {
  if (image.size() < kUserBlockBytes) throw Error(ExitCode::kFailure, "internal error: checkpoint image has no user block");
  const std::size_t body = image.size() - kUserBlockBytes;
  const Bytes block = header_block(crc32_of(image.data() + kUserBlockBytes, body), body);
  std::copy(block.begin(), block.end(), image.begin());
}

VerifiedImage read_verified(const std::string& path) {
  // stat first only to keep the documented message for a missing file ("cannot open checkpoint: No
  // such file or directory"); the open that matters is open_regular_file's, which never blocks.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw IoError(path + ": cannot open checkpoint: " + fsutil::errno_text(errno));
  const fsutil::ReadFd fd = fsutil::open_regular_file(path);
  if (::fstat(fd.get(), &info) != 0) throw IoError(path + ": cannot stat: " + fsutil::errno_text(errno));
  const auto size = static_cast<std::uint64_t>(info.st_size);

  VerifiedImage image;
  Bytes head(static_cast<std::size_t>(std::min<std::uint64_t>(size, kUserBlockBytes)));
  fsutil::read_exactly(fd.get(), head.data(), head.size(), path);
  const std::size_t prefix = std::strlen(kHeaderPrefix);
  if (has_signature_at(head, 0)) {
    image.version = 1;  // written before the header existed: libhdf5's signature comes first
  } else if (head.size() >= prefix && std::memcmp(head.data(), kHeaderPrefix, prefix) == 0) {
    const long version = header_version(head);
    // Version 1 had no header, so a header naming it (or 0) is damage, not an old file.
    if (version < kCheckpointVersion) refuse(path, "checkpoint header is damaged (the file is corrupted)");
    if (version != kCheckpointVersion) {
      refuse(path, "unsupported checkpoint version " + std::to_string(version) + " (" + supported_versions() + ")");
    }
    if (head.size() < kUserBlockBytes) refuse(path, "checkpoint is truncated inside its header (the file is corrupted)");
    image.version = kCheckpointVersion;
  } else if (size >= kUserBlockBytes + sizeof(kHdf5Signature)) {
    // An HDF5 file behind a user block whose header line is garbled at its start, or someone else's.
    Bytes signature(sizeof(kHdf5Signature));
    fsutil::read_exactly(fd.get(), signature.data(), signature.size(), path);
    if (std::equal(signature.begin(), signature.end(), kHdf5Signature))
      refuse(path, "checkpoint header is damaged or missing (the file is corrupted, or not a cnn_mpi checkpoint)");
    refuse(path, "not an HDF5 file");
  } else {
    refuse(path, "not an HDF5 file");
  }

  std::uint32_t crc = 0;
  std::uint64_t body = 0;
  if (image.version == kCheckpointVersion) {
    // Exactly the block the writer makes for the values it names: any other byte in it is damage.
    char line[kUserBlockBytes + 1] = {0};
    std::memcpy(line, head.data(), kUserBlockBytes);
    const std::string format = std::string(kHeaderPrefix) + std::to_string(kCheckpointVersion) +
                               " crc32=%8" SCNx32 " bytes=%" SCNu64;
    if (std::sscanf(line, format.c_str(), &crc, &body) != 2 || header_block(crc, body) != head)
      refuse(path, "checkpoint header is damaged (the file is corrupted)");
    if (size - kUserBlockBytes != body) {
      refuse(path, "checkpoint size mismatch (" + std::to_string(size - kUserBlockBytes) +
                       " bytes after the header, it says " + std::to_string(body) + "): the file is " +
                       (size - kUserBlockBytes < body ? "truncated" : "corrupted"));
    }
  }
  image.bytes.resize(static_cast<std::size_t>(size));
  std::copy(head.begin(), head.end(), image.bytes.begin());
  fsutil::read_exactly(fd.get(), image.bytes.data() + head.size(), image.bytes.size() - head.size(), path);
  if (image.version == kCheckpointVersion) {
    const std::uint32_t found = crc32_of(image.bytes.data() + kUserBlockBytes, body);
    if (found != crc) {
      char detail[64];
      std::snprintf(detail, sizeof(detail), "crc32 %08" PRIx32 ", the header says %08" PRIx32, found, crc);
      refuse(path, std::string("checksum mismatch over the whole file (") + detail + "): the file is corrupted");
    }
    if (!has_signature_at(image.bytes, kUserBlockBytes)) refuse(path, "not an HDF5 file after its header");
  }
  return image;
}

}  // namespace cnn::ckpt
