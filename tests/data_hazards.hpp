// Hostile data files for the reader tests: things that are not regular files (a FIFO, a socket, a
// symbolic link to /dev/zero, a directory) put where a data file is expected, and gzip bombs built in
// milliseconds. Include boost_test.hpp (after BOOST_TEST_MODULE) first.
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace cnn::test {

// What a data file may be replaced by, and the words the refusal must contain.
struct NonRegular {
  const char* kind;
  const char* message;
};
inline const std::vector<NonRegular> kNonRegularKinds = {
    {"fifo", "is a FIFO (named pipe), not a regular file"},
    // open(2) of a socket fails at once with ENXIO; the helper then names it from stat(2).
    {"socket", "is a socket, not a regular file"},
    {"dev_zero", "is a character device, not a regular file"},
    {"directory", "is a directory"},
};

// Puts a thing of `kind` (kNonRegularKinds) at `path`, which must not exist.
inline void make_non_regular(const std::string& path, const std::string& kind) {
  bool made = false;
  if (kind == "fifo") {
    made = ::mkfifo(path.c_str(), 0600) == 0;
  } else if (kind == "socket") {
    // A bound Unix socket leaves its node in the file system; the descriptor is not needed after.
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof(address.sun_path)) throw std::runtime_error("socket path too long: " + path);
    std::strcpy(address.sun_path, path.c_str());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    made = fd >= 0 && ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    if (fd >= 0) ::close(fd);
  } else if (kind == "dev_zero") {
    made = ::symlink("/dev/zero", path.c_str()) == 0;
  } else if (kind == "directory") {
    made = ::mkdir(path.c_str(), 0700) == 0;
  }
  if (!made) throw std::runtime_error("cannot make a " + kind + " at " + path);
}

// A reader that blocks on a FIFO would hang the test forever: SIGALRM (default action: terminate)
// turns that into a failure after `seconds`.
struct HangGuard {
  explicit HangGuard(unsigned seconds = 60) { ::alarm(seconds); }
  ~HangGuard() { ::alarm(0); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;
};

// A gzip member of `head`, then `zero_mib` MiB of zeros, then `tail`. After a full flush deflate
// starts afresh, so the compressed form of one MiB of zeros (about 1 KB) is computed once and
// repeated: a 1 GiB bomb is made in milliseconds. The trailer's CRC is left as deflate computed it
// for the bytes actually compressed, so it is wrong whenever zero_mib > 1: a reader that inflated the
// whole bomb would fail on the CRC ("incorrect data check"), not with the refusal a test expects.
inline std::vector<std::uint8_t> gzip_bomb(const std::vector<std::uint8_t>& head, int zero_mib,
                                           const std::vector<std::uint8_t>& tail = {}) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> buffer(1 << 21);
  const auto deflate_all = [&](const std::vector<std::uint8_t>& in, int flush) {
    zs.next_in = const_cast<Bytef*>(in.data());
    zs.avail_in = static_cast<uInt>(in.size());
    std::vector<std::uint8_t> produced;
    do {
      zs.next_out = buffer.data();
      zs.avail_out = static_cast<uInt>(buffer.size());
      deflate(&zs, flush);
      produced.insert(produced.end(), buffer.data(), buffer.data() + (buffer.size() - zs.avail_out));
    } while (zs.avail_out == 0);
    return produced;
  };
  const std::vector<std::uint8_t> first = deflate_all(head, Z_FULL_FLUSH);
  out.insert(out.end(), first.begin(), first.end());
  if (zero_mib > 0) {
    const std::vector<std::uint8_t> block = deflate_all(std::vector<std::uint8_t>(std::size_t{1} << 20), Z_FULL_FLUSH);
    for (int i = 0; i < zero_mib; ++i) out.insert(out.end(), block.begin(), block.end());
  }
  const std::vector<std::uint8_t> last = deflate_all(tail, Z_FINISH);
  out.insert(out.end(), last.begin(), last.end());
  deflateEnd(&zs);
  return out;
}

}  // namespace cnn::test
