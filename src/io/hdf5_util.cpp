#include "io/hdf5_util.hpp"

#include <mutex>
#include <sstream>

#include "cnn/errors.hpp"

namespace cnn::h5 {
namespace {

constexpr const char* kStringType = "a string";
constexpr const char* kIntegerType = "an integer";
constexpr const char* kFloatType = "a float";

// The innermost entry of HDF5's error stack says why (e.g. "truncated file: eof = ..." or
// "unable to open file: ... errno = 2, error message = 'No such file or directory'").
herr_t keep_innermost(unsigned depth, const H5E_error2_t* entry, void* data) {
  if (depth == 0 && entry != nullptr && entry->desc != nullptr) {
    *static_cast<std::string*>(data) = std::string(entry->func_name) + ": " + entry->desc;
  }
  return 0;
}

std::string innermost_hdf5_error() {
  std::string reason;
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &reason) < 0 || reason.empty()) {
    return "no detail from HDF5";
  }
  return reason;
}

const char* type_class_text(H5T_class_t type_class) {
  switch (type_class) {
    case H5T_STRING: return kStringType;
    case H5T_INTEGER: return kIntegerType;
    case H5T_FLOAT: return kFloatType;
    default: return "of another type";
  }
}

std::string attr_label(const Node& node, const char* name) {
  return "attribute '" + std::string(name) + "' on " + node.path;
}

// An attribute opened after checking that it exists, has the expected type class and element count.
struct OpenAttr {
  Handle attr;
  Handle type;
};

OpenAttr open_attr(const FileContext& file, const Node& node, const char* name, H5T_class_t expected,
                   hssize_t expected_elements) {
  const std::string label = attr_label(node, name);
  const htri_t present = file.check(H5Aexists(node.id(), name), "H5Aexists", label);
  if (present == 0) file.fail("missing " + label);
  OpenAttr opened{file.own(H5Aopen(node.id(), name, H5P_DEFAULT), H5Aclose, "H5Aopen", label), {}};
  opened.type = file.own(H5Aget_type(opened.attr.get()), H5Tclose, "H5Aget_type", label);
  const H5T_class_t found = H5Tget_class(opened.type.get());
  if (found < 0) file.fail_call("H5Tget_class", label);
  if (found != expected) {
    file.fail("wrong datatype: " + label + " is " + type_class_text(found) + ", expected " +
              type_class_text(expected));
  }
  const Handle space = file.own(H5Aget_space(opened.attr.get()), H5Sclose, "H5Aget_space", label);
  const hssize_t elements = H5Sget_simple_extent_npoints(space.get());
  if (elements < 0) file.fail_call("H5Sget_simple_extent_npoints", label);
  if (elements != expected_elements) {
    file.fail(label + " has " + std::to_string(elements) + " element(s), expected " +
              std::to_string(expected_elements));
  }
  return opened;
}

void write_attr_raw(const FileContext& file, const Node& node, const char* name, hid_t file_type,
                    hid_t memory_type, const void* data, hsize_t elements, bool scalar) {
  const std::string label = attr_label(node, name);
  const Handle space = scalar ? file.own(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", label)
                              : file.own(H5Screate_simple(1, &elements, nullptr), H5Sclose,
                                         "H5Screate_simple", label);
  const Handle attr = file.own(H5Acreate2(node.id(), name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                               H5Aclose, "H5Acreate2", label);
  file.check(H5Awrite(attr.get(), memory_type, data), "H5Awrite", label);
}

// A variable-length string type of the given character set. HDF5 has no conversion between ASCII and
// UTF-8 strings, so a read must name the charset the file's attribute has: h5py and C tools write
// ASCII, the writer here UTF-8.
Handle variable_string_type(const FileContext& file, H5T_cset_t charset, const std::string& label) {
  Handle type = file.own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", label);
  file.check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size", label);
  file.check(H5Tset_cset(type.get(), charset), "H5Tset_cset", label);
  return type;
}

Node open_object(const FileContext& file, hid_t file_id, const std::string& path, H5I_type_t kind,
                 const char* noun) {
  if (!exists(file, file_id, path)) file.fail(std::string("missing ") + noun + " " + path);
  Handle object = file.own(H5Oopen(file_id, path.c_str(), H5P_DEFAULT), H5Oclose, "H5Oopen", path);
  const H5I_type_t found = H5Iget_type(object.get());
  if (found != kind) file.fail(path + " is not a " + noun);
  return Node{std::move(object), path};
}

}  // namespace

namespace {
std::recursive_mutex& library_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}
}  // namespace

LibraryLock::LibraryLock() { library_mutex().lock(); }
LibraryLock::~LibraryLock() { library_mutex().unlock(); }

QuietErrors::QuietErrors() {
  // If saving fails we simply leave printing as it is; nothing here may throw.
  if (H5Eget_auto2(H5E_DEFAULT, &saved_func_, &saved_data_) < 0) saved_func_ = nullptr;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() {
  // Our one-line message was taken from the stack when the error was thrown. Left on the stack of a
  // thread that then ends (the data loader's), the entries keep HDF5 from closing at exit, which
  // then prints "HDF5: infinite loop closing library" after our line.
  H5Eclear2(H5E_DEFAULT);
  H5Eset_auto2(H5E_DEFAULT, saved_func_, saved_data_);
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t Handle::close() {
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id >= 0 ? closer_(id) : 0;
}

void Handle::reset() {
  if (id_ >= 0) closer_(id_);
  id_ = H5I_INVALID_HID;
}

void FileContext::fail(const std::string& what) const {
  const std::string message = path_ + ": " + what;
  if (mode_ == Mode::kWrite) throw IoError(message);
  throw InputError(message);
}

void FileContext::fail_call(const char* call, const std::string& object) const {
  const std::string target = object.empty() ? "" : "(" + object + ")";
  const std::string detail = std::string(call) + target + " failed: " + innermost_hdf5_error();
  if (mode_ == Mode::kWrite) fail(detail);
  fail("cannot be read as HDF5 (truncated or corrupt?): " + detail);
}

hid_t FileContext::check(hid_t id, const char* call, const std::string& object) const {
  if (id < 0) fail_call(call, object);
  return id;
}

herr_t FileContext::check(herr_t status, const char* call, const std::string& object) const {
  if (status < 0) fail_call(call, object);
  return status;
}

bool exists(const FileContext& file, hid_t file_id, const std::string& path) {
  // Check "/a", then "/a/b", ...: H5Lexists on a path whose parent is missing is an error.
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (file.check(H5Lexists(file_id, prefix.c_str(), H5P_DEFAULT), "H5Lexists", prefix) == 0) return false;
    if (slash == std::string::npos) return true;
  }
}

Node create_group(const FileContext& file, hid_t file_id, const std::string& path) {
  return Node{file.own(H5Gcreate2(file_id, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                       "H5Gcreate2", path),
              path};
}

Node open_group(const FileContext& file, hid_t file_id, const std::string& path) {
  return open_object(file, file_id, path, H5I_GROUP, "group");
}

Node write_float_dataset(const FileContext& file, hid_t file_id, const std::string& path,
                         const std::vector<std::int64_t>& shape, const float* data) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  const Handle space = file.own(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                                "H5Screate_simple", path);
  // Intermediate groups (/optimizer/conv1/weight/...) are created on the way, so no group bookkeeping.
  const Handle link_props = file.own(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate", path);
  file.check(H5Pset_create_intermediate_group(link_props.get(), 1), "H5Pset_create_intermediate_group", path);
  // Default creation properties give a contiguous, unfiltered layout: one write, readable by anything.
  Node dataset{file.own(H5Dcreate2(file_id, path.c_str(), H5T_IEEE_F32LE, space.get(), link_props.get(),
                                   H5P_DEFAULT, H5P_DEFAULT),
                        H5Dclose, "H5Dcreate2", path),
               path};
  file.check(H5Dwrite(dataset.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dwrite", path);
  return dataset;
}

Node read_float_dataset(const FileContext& file, hid_t file_id, const std::string& path,
                        const std::vector<std::int64_t>& shape, float* out) {
  Node dataset = open_object(file, file_id, path, H5I_DATASET, "dataset");
  const Handle type = file.own(H5Dget_type(dataset.id()), H5Tclose, "H5Dget_type", path);
  const H5T_class_t type_class = H5Tget_class(type.get());
  if (type_class < 0) file.fail_call("H5Tget_class", path);
  if (type_class != H5T_FLOAT || H5Tget_size(type.get()) != sizeof(float)) {
    file.fail("wrong datatype: " + path + " is " + type_class_text(type_class) + " of " +
              std::to_string(H5Tget_size(type.get())) + " bytes, expected float32");
  }
  const Handle space = file.own(H5Dget_space(dataset.id()), H5Sclose, "H5Dget_space", path);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) file.fail_call("H5Sget_simple_extent_ndims", path);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  file.check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims", path);
  const std::vector<std::int64_t> found(dims.begin(), dims.end());
  if (found != shape) file.fail(path + " has shape " + shape_text(found) + ", expected " + shape_text(shape));
  file.check(H5Dread(dataset.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), "H5Dread", path);
  return dataset;
}

void write_attr(const FileContext& file, const Node& node, const char* name, const char* value) {
  const Handle type = variable_string_type(file, H5T_CSET_UTF8, attr_label(node, name));
  // A variable-length string is written through a pointer to its char pointer.
  write_attr_raw(file, node, name, type.get(), type.get(), &value, 1, true);
}

void write_attr(const FileContext& file, const Node& node, const char* name, const std::string& value) {
  write_attr(file, node, name, value.c_str());
}

void write_attr(const FileContext& file, const Node& node, const char* name, std::int64_t value) {
  write_attr_raw(file, node, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, 1, true);
}

void write_attr(const FileContext& file, const Node& node, const char* name, std::uint64_t value) {
  write_attr_raw(file, node, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value, 1, true);
}

void write_attr(const FileContext& file, const Node& node, const char* name, double value) {
  write_attr_raw(file, node, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, 1, true);
}

void write_attr(const FileContext& file, const Node& node, const char* name, const std::vector<std::int64_t>& value) {
  write_attr_raw(file, node, name, H5T_STD_I64LE, H5T_NATIVE_INT64, value.data(), value.size(), false);
}

std::string read_string_attr(const FileContext& file, const Node& node, const char* name) {
  const std::string label = attr_label(node, name);
  const OpenAttr opened = open_attr(file, node, name, H5T_STRING, 1);
  const htri_t variable = file.check(H5Tis_variable_str(opened.type.get()), "H5Tis_variable_str", label);
  if (variable > 0) {
    const H5T_cset_t charset = H5Tget_cset(opened.type.get());
    if (charset < 0) file.fail_call("H5Tget_cset", label);
    const Handle memory_type = variable_string_type(file, charset, label);
    char* text = nullptr;
    file.check(H5Aread(opened.attr.get(), memory_type.get(), &text), "H5Aread", label);
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);  // allocated by HDF5 for the variable-length read
    return value;
  }
  // Fixed-length (h5py's np.bytes_, Fortran writers): read the raw bytes, cut at NUL or space padding.
  const std::size_t size = H5Tget_size(opened.type.get());
  if (size == 0) file.fail_call("H5Tget_size", label);
  std::string value(size, '\0');
  file.check(H5Aread(opened.attr.get(), opened.type.get(), value.data()), "H5Aread", label);
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  if (H5Tget_strpad(opened.type.get()) == H5T_STR_SPACEPAD) {
    value.erase(value.find_last_not_of(' ') + 1);
  }
  return value;
}

std::int64_t read_int64_attr(const FileContext& file, const Node& node, const char* name) {
  const OpenAttr opened = open_attr(file, node, name, H5T_INTEGER, 1);
  std::int64_t value = 0;
  file.check(H5Aread(opened.attr.get(), H5T_NATIVE_INT64, &value), "H5Aread", attr_label(node, name));
  return value;
}

std::uint64_t read_uint64_attr(const FileContext& file, const Node& node, const char* name) {
  const OpenAttr opened = open_attr(file, node, name, H5T_INTEGER, 1);
  std::uint64_t value = 0;
  file.check(H5Aread(opened.attr.get(), H5T_NATIVE_UINT64, &value), "H5Aread", attr_label(node, name));
  return value;
}

double read_double_attr(const FileContext& file, const Node& node, const char* name) {
  const OpenAttr opened = open_attr(file, node, name, H5T_FLOAT, 1);
  double value = 0.0;
  file.check(H5Aread(opened.attr.get(), H5T_NATIVE_DOUBLE, &value), "H5Aread", attr_label(node, name));
  return value;
}

std::vector<std::int64_t> read_int64_array_attr(const FileContext& file, const Node& node, const char* name,
                                                std::size_t count) {
  const OpenAttr opened = open_attr(file, node, name, H5T_INTEGER, static_cast<hssize_t>(count));
  std::vector<std::int64_t> value(count);
  file.check(H5Aread(opened.attr.get(), H5T_NATIVE_INT64, value.data()), "H5Aread", attr_label(node, name));
  return value;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream text;
  text << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) text << (i ? "," : "") << shape[i];
  text << ']';
  return text.str();
}

}  // namespace cnn::h5
