// The bytes of a checkpoint file around libhdf5: the version-2 header in the HDF5 user block, and
// reading a file whole, checked, before libhdf5 parses any of it. Private to src/.
//
// A version-2 file starts with a 512-byte HDF5 user block (libhdf5 and h5py skip it) whose first line is
//   cnn_mpi-checkpoint v2 crc32=0123abcd bytes=3505304\n
// followed by zero bytes up to byte 512. crc32 is zlib's over every byte after the user block, and
// bytes is their count. libhdf5 parsing damaged metadata can crash or accept garbage (issue 22), so
// the digest is checked with plain reads first and libhdf5 only ever opens the verified bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn::ckpt {

using Bytes = std::vector<unsigned char>;

inline constexpr std::size_t kUserBlockBytes = 512;  // H5Pset_userblock: a power of two >= 512
inline constexpr const char* kHeaderPrefix = "cnn_mpi-checkpoint v";

// The file name libhdf5 is given for a file that lives only in memory. The core driver with a file
// image still calls open() on the name and fails if that succeeds ("file already exists"), so the
// name must never open: nothing can exist below /dev/null, which is not a directory.
inline constexpr const char* kMemoryFileName = "/dev/null/cnn_mpi-checkpoint-in-memory";

// "this program reads versions 1 and 2", for the messages that refuse another version.
std::string supported_versions();

// Fills image[0, 512) with the header describing image[512, end). The image must hold the user block.
void seal(Bytes& image);

struct VerifiedImage {
  Bytes bytes;      // the whole file
  int version = 0;  // 2: header, length and crc32 verified; 1: no header (an HDF5 signature at byte 0)
};

// Opens `path` without blocking and only if it is a regular file (IoError, exit 3, otherwise), reads
// it whole and checks it. Throws InputError naming the file: "not an HDF5 file", a damaged header, an
// unsupported version, a length or crc32 mismatch. No libhdf5 call is made.
VerifiedImage read_verified(const std::string& path);

}  // namespace cnn::ckpt
