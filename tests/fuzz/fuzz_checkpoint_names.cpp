// The checkpoint directory's file names (src/io/checkpoint_dir.cpp): `--resume auto` lists
// RUN_DIR/checkpoints and orders ckpt-e<epoch>-s<step>.h5 by the step in the name; prepare() removes
// stale *.h5.tmp files. The input is a list of names separated by '\n' ('/' and NUL are dropped).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "cnn/checkpoint.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const cnn::fuzz::TempDir run;
  const std::string dir = run.path() + "/checkpoints";
  if (::mkdir(dir.c_str(), 0755) != 0) std::abort();
  std::string name;
  int files = 0;
  for (std::size_t i = 0; i <= size && files < 32; ++i) {
    if (i == size || data[i] == '\n') {
      if (!name.empty() && name != "." && name != ".." && name.size() < 200) {
        const int fd = ::open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) ::close(fd);
        ++files;
      }
      name.clear();
    } else if (data[i] != '/' && data[i] != 0) {
      name.push_back(static_cast<char>(data[i]));
    }
  }
  cnn::fuzz::expect_clean([&] {
    const cnn::CheckpointDir checkpoints(run.path());
    for (const std::string& path : checkpoints.list())
      if (path.compare(0, dir.size(), dir) != 0) std::abort();  // only files of this directory
    checkpoints.prepare();
  });
  return 0;
}
