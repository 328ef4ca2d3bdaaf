// The checkpoint reader (src/io/checkpoint_read.cpp, src/io/checkpoint_image.cpp), in two modes chosen by the
// input's first byte.
//
// Raw bytes (about 1 input in 4): a valid, sealed version-2 checkpoint has bytes flipped, overwritten,
// cut off or appended WITHOUT its header being recomputed. The oracle is stronger than "no crash":
// the reader must refuse every such file with a cnn::Error (the header, length and crc32 are checked
// before libhdf5 sees a byte). A damaged file that is accepted is a finding.
//
// Structure-aware (the rest):
// Why not raw bytes: a checkpoint is HDF5, and feeding random bytes to H5Fopen fuzzes libhdf5's own
// binary parser (its B-trees, heaps and object headers). That finds libhdf5 bugs we cannot fix, and
// the fuzzer would spend its time there, rarely producing a file that opens, so OUR validation code
// (format, version, attributes and their types, shapes, checksums, the config's sanity) would stay
// unexplored. Instead the input is DECODED into a well-formed HDF5 file: a valid checkpoint of a small
// model (shape, optimizer and values from the input) written by our writer, then a sequence of edits
// through the HDF5 API, each chosen by the input: delete or retype an attribute (int32, int64, uint64,
// double, fixed or variable string, integer array of any length), set it to any value, delete a
// dataset or a group, or replace a dataset with one of another type, rank, shape and values (with a
// right or wrong checksum). The edited file is then resealed (its version-2 header recomputed, as
// tests/ckpt_seal.py does), so the reader gets past the whole-file digest to the checks behind it. Then
// our reader runs on it, as eval and --resume do: the config, the model built from it, the whole
// state, and the resume check against a run's config.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/model.hpp"
#include "cnn/network.hpp"
#include "cnn/resume.hpp"
#include "fuzz_support.hpp"

namespace {

struct AttrSlot {
  const char* object;
  const char* name;
};
constexpr AttrSlot kAttrs[] = {
    {"/", "format"}, {"/", "version"}, {"/", "created"}, {"/", "program_version"},
    {"/config", "model"}, {"/config", "filters"}, {"/config", "input_shape"}, {"/config", "classes"},
    {"/config", "global_batch"}, {"/config", "lr"}, {"/config", "optimizer"}, {"/config", "momentum"},
    {"/config", "seed"}, {"/config", "dataset"}, {"/config", "dataset_digest"}, {"/config", "train_samples"},
    {"/config", "epochs"}, {"/optimizer", "step"}, {"/progress", "epoch"}, {"/progress", "step_in_epoch"},
    {"/progress", "global_step"}, {"/progress", "samples_seen"}, {"/progress", "world_size_at_save"},
    {"/progress", "epoch_loss_sum"}, {"/progress", "epoch_correct"}, {"/progress", "epoch_samples"},
    {"/rng", "seed"}, {"/rng", "sampler"}, {"/rng", "init"}, {"/metrics", "train_loss"},
    {"/metrics", "test_loss"}, {"/metrics", "test_accuracy"}, {"/model/conv1/weight", "checksum"},
    {"/model/fc/bias", "checksum"}, {"/optimizer/fc/weight/velocity", "checksum"}};
constexpr const char* kDatasets[] = {"/model/conv1/weight", "/model/conv1/bias", "/model/fc/weight",
                                     "/model/fc/bias", "/optimizer/conv1/weight/velocity",
                                     "/optimizer/fc/bias/velocity"};
constexpr const char* kGroups[] = {"/config", "/model", "/model/fc", "/optimizer", "/progress", "/rng", "/metrics"};

std::uint64_t fnv1a(const void* bytes, std::size_t n) {
  std::uint64_t h = 14695981039346656037ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const std::uint8_t*>(bytes)[i]) * 1099511628211ULL;
  return h;
}

// Writes attribute `name` on `object` afresh with a type and value from the input.
void rewrite_attr(hid_t file, const AttrSlot& slot, FuzzedDataProvider& in) {
  const hid_t obj = H5Oopen(file, slot.object, H5P_DEFAULT);
  if (obj < 0) return;
  if (H5Aexists(obj, slot.name) > 0) H5Adelete(obj, slot.name);
  const int kind = in.ConsumeIntegralInRange(0, 7);
  hid_t type = -1, space = -1;
  std::vector<std::uint8_t> value;
  if (kind == 0) {  // deleted only
    H5Oclose(obj);
    return;
  }
  if (kind == 5 || kind == 6) {  // strings
    std::string text = in.ConsumeRandomLengthString(64);
    space = H5Screate(H5S_SCALAR);
    type = H5Tcopy(H5T_C_S1);
    if (kind == 5) {
      H5Tset_size(type, text.size() + 1);
      value.assign(text.begin(), text.end());
      value.push_back(0);
      const hid_t a = H5Acreate2(obj, slot.name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) H5Awrite(a, type, value.data()), H5Aclose(a);
    } else {
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, H5T_CSET_UTF8);
      const char* p = text.c_str();
      const hid_t a = H5Acreate2(obj, slot.name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) H5Awrite(a, type, &p), H5Aclose(a);
    }
  } else {
    // kinds 1-4: one scalar of each numeric type; 7: a 1-D int64 array of any length
    const hid_t types[] = {H5T_STD_I64LE, H5T_STD_I32LE, H5T_STD_U64LE, H5T_IEEE_F64LE};
    hsize_t count = 1;
    if (kind == 7) {
      type = H5Tcopy(H5T_STD_I64LE);
      count = in.ConsumeIntegralInRange<hsize_t>(1, 6);
      space = H5Screate_simple(1, &count, nullptr);
    } else {
      type = H5Tcopy(types[kind - 1]);
      space = H5Screate(H5S_SCALAR);
    }
    value = in.ConsumeBytes<std::uint8_t>(H5Tget_size(type) * count);
    value.resize(H5Tget_size(type) * count);
    const hid_t a = H5Acreate2(obj, slot.name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, type, value.data()), H5Aclose(a);
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Oclose(obj);
}

// Replaces dataset `path` by one of another type, rank and shape, with values from the input.
void rewrite_dataset(hid_t file, const char* path, FuzzedDataProvider& in) {
  if (H5Lexists(file, path, H5P_DEFAULT) > 0) H5Ldelete(file, path, H5P_DEFAULT);
  if (in.ConsumeBool()) return;  // deleted only
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_STD_I32LE, H5T_STD_U8LE, H5T_IEEE_F32BE};
  const hid_t type = types[in.ConsumeIntegralInRange(0, 4)];
  const int rank = in.ConsumeIntegralInRange(0, 4);
  hsize_t dims[4] = {1, 1, 1, 1};
  hsize_t total = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = in.ConsumeIntegralInRange<hsize_t>(0, 40);
    total *= dims[d];
  }
  if (total > 100000) return;
  const hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, nullptr);
  const hid_t set = H5Dcreate2(file, path, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (set >= 0) {
    std::vector<std::uint8_t> bytes = in.ConsumeBytes<std::uint8_t>(H5Tget_size(type) * total);
    bytes.resize(H5Tget_size(type) * total);
    H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    // The right checksum (for float32 data), so that the reader goes past it, or any other.
    std::uint64_t checksum = in.ConsumeBool() ? fnv1a(bytes.data(), bytes.size()) : in.ConsumeIntegral<std::uint64_t>();
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(set, "checksum", H5T_STD_U64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, H5T_NATIVE_UINT64, &checksum), H5Aclose(a);
    H5Sclose(scalar);
    H5Dclose(set);
  }
  H5Sclose(space);
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// Raw damage to a sealed file, never resealed: up to 8 operations, offsets biased toward the header
// (the first 512 bytes) and libhdf5's superblock and root group just behind it.
std::vector<std::uint8_t> damage(std::vector<std::uint8_t> bytes, FuzzedDataProvider& in) {
  const int operations = in.ConsumeIntegralInRange(1, 8);
  for (int op = 0; op < operations && !bytes.empty(); ++op) {
    const std::size_t near = in.ConsumeBool() ? std::min<std::size_t>(bytes.size(), 1024) : bytes.size();
    const std::size_t at = in.ConsumeIntegralInRange<std::size_t>(0, near - 1);
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:  // flip bits of one byte
        bytes[at] ^= in.ConsumeIntegralInRange<std::uint8_t>(1, 255);
        break;
      case 1: {  // overwrite a run of bytes
        const std::vector<std::uint8_t> patch = in.ConsumeBytes<std::uint8_t>(in.ConsumeIntegralInRange(1, 16));
        for (std::size_t i = 0; i < patch.size() && at + i < bytes.size(); ++i) bytes[at + i] = patch[i];
        break;
      }
      case 2:  // cut off the end
        bytes.resize(at);
        break;
      default: {  // append
        const std::vector<std::uint8_t> tail = in.ConsumeBytes<std::uint8_t>(in.ConsumeIntegralInRange(1, 64));
        bytes.insert(bytes.end(), tail.begin(), tail.end());
      }
    }
  }
  return bytes;
}

// The raw-byte oracle: a changed version-2 file must be refused, with a cnn::Error.
void expect_refused(const std::string& path, const std::vector<std::uint8_t>& original) {
  const std::vector<std::uint8_t> damaged = read_bytes(path);
  static constexpr std::uint8_t kHdf5Signature[] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  // Unchanged (a flip undone, a patch equal to the bytes), or libhdf5's signature written over the
  // header: that is a version-1 file, which is checked by its dataset checksums only (and fuzzed as such).
  if (damaged == original ||
      (damaged.size() >= sizeof(kHdf5Signature) && std::equal(std::begin(kHdf5Signature), std::end(kHdf5Signature), damaged.begin())))
    return;
  try {
    const cnn::CheckpointConfig saved = cnn::read_checkpoint_config(path);
    const cnn::Network net = cnn::build_network(saved.spec, saved.filters, saved.input, saved.classes);
    (void)cnn::read_checkpoint(path, net.layout);
  } catch (const cnn::Error&) {
    return;  // refused, as it must be
  }
  std::fprintf(stderr, "fuzz: a damaged checkpoint (%zu bytes, was %zu) was accepted\n", damaged.size(),
               original.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const bool raw = in.ConsumeIntegralInRange(0, 3) == 0;
  // A valid checkpoint of a small seed model, written by our own writer.
  cnn::CheckpointState state;
  cnn::CheckpointConfig& c = state.config;
  c.model = "seed";
  c.filters = in.ConsumeIntegralInRange(1, 3);
  c.input = {1, in.ConsumeIntegralInRange(4, 9), in.ConsumeIntegralInRange(4, 9)};
  c.classes = in.ConsumeIntegralInRange(2, 10);
  c.global_batch = 10;
  c.lr = 0.1;
  c.optimizer = in.ConsumeBool() ? "momentum" : "sgd";
  c.momentum = 0.9;
  c.seed = 1;
  c.dataset = "fashion";
  c.train_samples = 100;
  const cnn::Network network = cnn::build_network(c.model, c.filters, c.input, c.classes);
  c.spec = network.spec;
  const cnn::ParamLayout& layout = network.layout;
  state.params.assign(static_cast<std::size_t>(layout.total()), 0.25f);
  if (c.optimizer == "momentum") state.optimizer_state.assign(state.params.size(), 0.5f);
  const cnn::fuzz::TempDir dir;
  const std::string path = dir.path() + "/ckpt.h5";
  state.progress = {0, 0, 0, 0, 1};  // the start of a run: in range for any /config
  cnn::write_checkpoint(path, state, layout);

  if (raw) {
    const std::vector<std::uint8_t> original = read_bytes(path);
    write_bytes(path, damage(original, in));
    expect_refused(path, original);
    return 0;
  }

  {  // the edits
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // HDF5 refusing a nonsensical edit is fine and quiet
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0) std::abort();
    const int edits = in.ConsumeIntegralInRange(0, 6);
    for (int e = 0; e < edits && in.remaining_bytes() > 0; ++e) {
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0:
        case 1:
          rewrite_attr(file, kAttrs[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kAttrs) - 1)], in);
          break;
        case 2:
          rewrite_dataset(file, kDatasets[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kDatasets) - 1)], in);
          break;
        default: {
          const char* group = kGroups[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kGroups) - 1)];
          H5Ldelete(file, group, H5P_DEFAULT);
          if (in.ConsumeBool()) {  // a dataset where a group belongs
            const hid_t scalar = H5Screate(H5S_SCALAR);
            const hid_t set = H5Dcreate2(file, group, H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (set >= 0) H5Dclose(set);
            H5Sclose(scalar);
          }
        }
      }
    }
    H5Fclose(file);
    cnn::reseal_checkpoint(path);  // past the whole-file digest, to the checks behind it
  }

  // Our reader, as eval and --resume use it.
  cnn::fuzz::expect_clean([&] {
    const cnn::CheckpointConfig saved = cnn::read_checkpoint_config(path);
    // As eval does: the network the saved spec describes (a bad spec is a usage error, reported).
    const cnn::Network net = cnn::build_network(saved.spec, saved.filters, saved.input, saved.classes);
    const cnn::CheckpointState read = cnn::read_checkpoint(path, net.layout);
    if (read.params.size() != static_cast<std::size_t>(net.layout.total())) std::abort();
    (void)cnn::check_resume(saved, state.config);
  });
  return 0;
}
