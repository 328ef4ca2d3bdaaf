// The HDF5 image reader (src/data/hdf5_images.cpp, H5ImageFile: --dataset hdf5 and stream mode),
// structure-aware.
//
// Why not raw bytes: as in fuzz_checkpoint.cpp, random bytes would fuzz libhdf5's own binary parser
// and rarely produce a file that opens, leaving OUR validation unexplored. Instead the input is
// DECODED into a well-formed HDF5 file built through the HDF5 API: an images and a labels object at
// the default or nested paths, each absent, a group, or a dataset of a datatype (unsigned or signed
// 8-bit, big-endian 8-bit, 16-bit, 32-bit integer, float, string), rank (0 to 5) and dimensions from the
// input, contiguous or chunked (optionally deflated), with pixel and label values from the input, and
// a `classes` attribute on the labels that is absent, an integer of any value, a float, a string or an
// array. Then the reader opens it and, when it accepts the file, reads it back the ways training does:
// a range, an ascending set of samples (hyperslab union) and read_all.
//
// The oracle for an accepted file: only what docs/DATA.md allows is accepted (1-byte unsigned
// datasets, images [N,C,H,W] and labels [N] with the same N > 0, every label below the class count),
// the shape and labels are those written, and every image read back is the bytes written.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cnn/hdf5_images.hpp"
#include "fuzz_support.hpp"

namespace {

enum class Kind { kAbsent, kGroup, kDataset };

// What was written at one path, for the oracle.
struct Written {
  Kind kind = Kind::kAbsent;
  hid_t file_type = -1;  // a predefined type (not closed)
  std::vector<hsize_t> dims;
  std::vector<std::uint8_t> values;  // the bytes written (as unsigned char; converted by HDF5)
  bool is_uint8() const {
    return kind == Kind::kDataset && (file_type == H5T_STD_U8LE || file_type == H5T_STD_U8BE);
  }
};

hid_t pick_type(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
    case 1: return H5T_STD_U8LE;  // the valid one, twice as likely
    case 2: return H5T_STD_U8BE;  // still 1-byte unsigned: valid
    case 3: return H5T_STD_I8LE;
    case 4: return H5T_STD_U16LE;
    case 5: return H5T_STD_I32LE;
    case 6: return H5T_IEEE_F32LE;
    default: return H5T_C_S1;  // a 1-byte string
  }
}

// Creates the groups on the way to `path` ("/a/b/c" needs /a and /a/b).
void make_parents(hid_t file, const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string parent = path.substr(0, slash);
    if (H5Lexists(file, parent.c_str(), H5P_DEFAULT) > 0) continue;
    const hid_t g = H5Gcreate2(file, parent.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g >= 0) H5Gclose(g);
  }
}

// Writes the object at `path`, shaped around the valid rank `rank` and sample count `samples` (the
// input may keep them or change them).
Written write_object(hid_t file, const std::string& path, int rank, hsize_t samples, FuzzedDataProvider& in) {
  Written w;
  make_parents(file, path);
  const int kind = in.ConsumeIntegralInRange(0, 9);
  if (kind == 0) return w;  // absent
  if (kind == 1) {          // a group where a dataset belongs
    const hid_t g = H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g >= 0) H5Gclose(g);
    w.kind = Kind::kGroup;
    return w;
  }
  w.kind = Kind::kDataset;
  w.file_type = pick_type(in);
  const int written_rank = in.ConsumeBool() ? rank : in.ConsumeIntegralInRange(0, 5);
  for (int d = 0; d < written_rank; ++d) {
    hsize_t extent = d == 0 ? samples : in.ConsumeIntegralInRange<hsize_t>(1, 5);
    if (in.ConsumeIntegralInRange(0, 7) == 0) extent = in.ConsumeIntegralInRange<hsize_t>(0, 9);
    w.dims.push_back(extent);
  }
  hsize_t total = 1;
  for (hsize_t extent : w.dims) total *= extent;
  const hid_t space = written_rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(written_rank, w.dims.data(), nullptr);
  const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  if (written_rank > 0 && total > 0 && in.ConsumeBool()) {
    std::vector<hsize_t> chunk(w.dims.size());
    for (std::size_t d = 0; d < chunk.size(); ++d) chunk[d] = in.ConsumeIntegralInRange<hsize_t>(1, w.dims[d]);
    H5Pset_chunk(create, written_rank, chunk.data());
    if (in.ConsumeBool()) H5Pset_deflate(create, in.ConsumeIntegralInRange(1, 9));
  }
  const hid_t dataset = H5Dcreate2(file, path.c_str(), w.file_type, space, H5P_DEFAULT, create, H5P_DEFAULT);
  if (dataset >= 0) {
    w.values.resize(static_cast<std::size_t>(total));
    const std::uint8_t base = in.ConsumeIntegral<std::uint8_t>();
    const std::uint8_t step = in.ConsumeIntegral<std::uint8_t>();
    for (std::size_t i = 0; i < w.values.size(); ++i) w.values[i] = static_cast<std::uint8_t>(base + step * i);
    // A few values straight from the input (labels at or above the class count come from here too).
    for (int k = in.ConsumeIntegralInRange(0, 4); k > 0 && !w.values.empty(); --k)
      w.values[in.ConsumeIntegralInRange<std::size_t>(0, w.values.size() - 1)] = in.ConsumeIntegral<std::uint8_t>();
    if (w.file_type != H5T_C_S1 && !w.values.empty())
      H5Dwrite(dataset, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.values.data());
    H5Dclose(dataset);
  } else {
    w.kind = Kind::kAbsent;
  }
  H5Pclose(create);
  H5Sclose(space);
  return w;
}

// The `classes` attribute on the labels dataset; returns the class count a valid file then has, or
// -1 when the attribute's form or value must be refused.
int write_classes(hid_t file, const std::string& labels_path, FuzzedDataProvider& in) {
  const int form = in.ConsumeIntegralInRange(0, 5);
  if (form == 0) return cnn::kDefaultH5Classes;  // absent
  const hid_t labels = H5Dopen2(file, labels_path.c_str(), H5P_DEFAULT);
  if (labels < 0) return -1;
  int valid = -1;
  hid_t space = H5Screate(H5S_SCALAR);
  if (form == 1 || form == 2) {  // an integer, in range or anywhere
    const int value = form == 1 ? in.ConsumeIntegralInRange(1, 256) : in.ConsumeIntegral<int>();
    const hid_t a = H5Acreate2(labels, "classes", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, H5T_NATIVE_INT, &value), H5Aclose(a);
    valid = value >= 1 && value <= 256 ? value : -1;
  } else if (form == 3) {  // a float
    const double value = in.ConsumeFloatingPoint<double>();
    const hid_t a = H5Acreate2(labels, "classes", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, H5T_NATIVE_DOUBLE, &value), H5Aclose(a);
  } else if (form == 4) {  // a string
    const std::string text = in.ConsumeRandomLengthString(16);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, text.size() + 1);
    const hid_t a = H5Acreate2(labels, "classes", type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, type, text.c_str()), H5Aclose(a);
    H5Tclose(type);
  } else {  // an array of integers
    H5Sclose(space);
    const hsize_t n = in.ConsumeIntegralInRange<hsize_t>(0, 3);
    space = H5Screate_simple(1, &n, nullptr);
    const int values[3] = {10, 10, 10};
    const hid_t a = H5Acreate2(labels, "classes", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, H5T_NATIVE_INT, values), H5Aclose(a);
    if (a >= 0 && n == 1) valid = 10;  // one element is one integer, whatever the dataspace's rank
  }
  H5Sclose(space);
  H5Dclose(labels);
  return valid;
}

[[noreturn]] void oracle_failed(const char* what) {
  std::fprintf(stderr, "fuzz_hdf5_images: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  cnn::H5ImagePaths paths;
  if (in.ConsumeBool()) paths = {"/train/x", "/train/y"};
  const hsize_t samples = in.ConsumeIntegralInRange<hsize_t>(1, 8);

  const cnn::fuzz::TempDir dir;
  const std::string path = dir.path() + "/data.h5";
  Written images, labels;
  int classes = -1;
  {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // HDF5 refusing a nonsensical request is fine and quiet
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) std::abort();
    images = write_object(file, paths.images, 4, samples, in);
    labels = write_object(file, paths.labels, 1, samples, in);
    if (labels.kind == Kind::kDataset) classes = write_classes(file, paths.labels, in);
    H5Fclose(file);
  }

  cnn::fuzz::expect_clean([&] {
    cnn::H5ImageFile file(path, paths);
    // Accepted: it must be a file docs/DATA.md allows, and read back as written.
    if (!images.is_uint8() || !labels.is_uint8() || images.dims.size() != 4 || labels.dims.size() != 1)
      oracle_failed("accepted a file whose datasets are not uint8 [N,C,H,W] and [N]");
    const hsize_t n = images.dims[0];
    if (n == 0 || labels.dims[0] != n) oracle_failed("accepted disagreeing or zero sample counts");
    if (classes < 1 || file.classes() != classes) oracle_failed("accepted a bad or misread classes attribute");
    for (std::uint8_t l : labels.values)
      if (l >= classes) oracle_failed("accepted a label at or above the class count");
    const cnn::TensorShape& shape = file.shape();
    if (shape.channels != static_cast<int>(images.dims[1]) || shape.height != static_cast<int>(images.dims[2]) ||
        shape.width != static_cast<int>(images.dims[3]))
      oracle_failed("misread the image shape");
    if (file.count() != static_cast<std::int64_t>(n) || file.labels() != labels.values) oracle_failed("misread the labels");
    // CNN_FUZZ_TRACE=1 (running a corpus with -runs=0): shows that inputs reach the read paths below.
    if (std::getenv("CNN_FUZZ_TRACE") != nullptr) std::fprintf(stderr, "accepted: %llu samples\n", n);

    const auto image_bytes = static_cast<std::size_t>(shape.size());
    auto written_image = [&](std::int64_t sample) {
      return images.values.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(sample) * image_bytes);
    };
    const std::int64_t first = in.ConsumeIntegralInRange<std::int64_t>(0, file.count() - 1);
    const std::int64_t count = in.ConsumeIntegralInRange<std::int64_t>(0, file.count() - first);
    std::vector<std::uint8_t> got(static_cast<std::size_t>(count) * image_bytes);
    file.read_range(first, count, got.data());
    if (!std::equal(got.begin(), got.end(), written_image(first))) oracle_failed("read_range returned other bytes");

    std::vector<std::int64_t> chosen;
    for (std::int64_t s = 0; s < file.count(); ++s)
      if (in.ConsumeBool()) chosen.push_back(s);
    got.assign(chosen.size() * image_bytes, 0);
    file.read_samples(chosen, got.data());
    for (std::size_t k = 0; k < chosen.size(); ++k)
      if (!std::equal(got.begin() + static_cast<std::ptrdiff_t>(k * image_bytes),
                      got.begin() + static_cast<std::ptrdiff_t>((k + 1) * image_bytes), written_image(chosen[k])))
        oracle_failed("read_samples returned other bytes");

    const cnn::Dataset all = file.read_all("fuzz", in.ConsumeIntegralInRange<std::int64_t>(0, file.count() + 1));
    if (all.count() < 1 || all.count() > file.count() ||
        !std::equal(all.images.begin(), all.images.end(), images.values.begin()))
      oracle_failed("read_all returned other bytes");
  });
  return 0;
}
