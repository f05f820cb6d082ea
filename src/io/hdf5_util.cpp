// HDF5 helpers (see hdf5_util.h).
#include "io/hdf5_util.h"

#include <vector>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {
namespace {

struct ErrorWalk {
  std::string api;        // the outermost frame: the API call the program made
  std::string innermost;  // the deepest frame: the actual reason
};

herr_t CollectErrorFrame(unsigned n, const H5E_error2_t* frame, void* data) {
  auto* walk = static_cast<ErrorWalk*>(data);
  if (n == 0 && frame->func_name != nullptr) walk->api = frame->func_name;
  std::string reason = frame->desc != nullptr ? frame->desc : "";
  char minor[256] = {0};
  if (H5Eget_msg(frame->min_num, nullptr, minor, sizeof(minor)) > 0 && minor[0] != '\0')
    reason += std::string(reason.empty() ? "" : " (") + minor + (reason.empty() ? "" : ")");
  if (!reason.empty()) walk->innermost = reason;
  return 0;
}

}  // namespace

void SilenceHdf5Errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string Hdf5ErrorText() {
  ErrorWalk walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, CollectErrorFrame, &walk);
  if (walk.api.empty() && walk.innermost.empty()) return "unknown HDF5 error";
  if (walk.api.empty()) return walk.innermost;
  return walk.api + ": " + walk.innermost;
}

int64_t Hdf5AttributeValueCount(hid_t attribute) {
  Hdf5Handle space(H5Aget_space(attribute), H5Sclose);
  if (!space.valid()) return -1;
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  return points < 0 ? -1 : static_cast<int64_t>(points);
}

namespace {
// A virtual dataset's mapping `i`: "" when its source is there, else what is missing.
std::string MissingVirtualSource(hid_t create_props, size_t i, const std::string& folder) {
  auto text = [&](ssize_t (*get)(hid_t, size_t, char*, size_t)) {
    const ssize_t length = get(create_props, i, nullptr, 0);
    if (length < 0) return std::string();
    std::vector<char> buffer(static_cast<size_t>(length) + 1, '\0');
    get(create_props, i, buffer.data(), buffer.size());
    return std::string(buffer.data());
  };
  const std::string file = text(H5Pget_virtual_filename), name = text(H5Pget_virtual_dsetname);
  if (file == ".") return "";  // the dataset's own file (checked as it is opened)
  std::string path = file;
  if (!file.empty() && file[0] != '/' && H5Fis_hdf5(file.c_str()) <= 0) path = folder + "/" + file;
  if (H5Fis_hdf5(path.c_str()) <= 0) return "its source file " + file + " is missing";
  Hdf5Handle source;
  if (!Hdf5OpenReadOnly(path, &source)) return "its source file " + path + " cannot be opened";
  if (H5Lexists(source.get(), name.c_str(), H5P_DEFAULT) <= 0)
    return "its source " + path + " has no dataset " + name;
  return "";
}
}  // namespace

std::string Hdf5MissingFilter(hid_t dataset) {
  Hdf5Handle create_props(H5Dget_create_plist(dataset), H5Pclose);
  if (!create_props.valid()) return "";
  const int filters = H5Pget_nfilters(create_props.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    char name[128] = {0};
    const H5Z_filter_t id = H5Pget_filter2(create_props.get(), static_cast<unsigned>(i), &flags,
                                           &values, nullptr, sizeof(name), name, &config);
    if (id >= 0 && H5Zfilter_avail(id) <= 0)
      return StrFormat(
          "it is compressed with filter %d (%s), which this trainer's HDF5 cannot "
          "decode. Write it uncompressed or with gzip (h5repack -f NONE IN OUT where "
          "that filter is installed; h5py: compression='gzip')",
          static_cast<int>(id), name[0] != '\0' ? name : "unnamed");
  }
  return "";
}

std::string Hdf5MissingVirtualSource(hid_t dataset, const std::string& folder) {
  Hdf5Handle create_props(H5Dget_create_plist(dataset), H5Pclose);
  if (!create_props.valid() || H5Pget_layout(create_props.get()) != H5D_VIRTUAL) return "";
  size_t mappings = 0;
  if (H5Pget_virtual_count(create_props.get(), &mappings) < 0) return "";
  for (size_t i = 0; i < mappings; ++i) {
    const std::string missing = MissingVirtualSource(create_props.get(), i, folder);
    if (!missing.empty())
      return "it is a virtual dataset and " + missing +
             ", whose part HDF5 would read as zeros. Put the source back, or write the data into "
             "the file itself";
  }
  return "";
}

bool Hdf5OpenReadOnly(const std::string& path, Hdf5Handle* file, std::string* why) {
  if (why != nullptr) *why = "not a regular file";
  if (!IsRegularFile(path)) return false;  // a FIFO would block the reader
  Hdf5Handle access;
  bool opened = access.Reset(H5Pcreate(H5P_FILE_ACCESS), H5Pclose) >= 0;
#if H5_VERSION_GE(1, 10, 7)
  opened = opened && H5Pset_file_locking(access.get(), false, true) >= 0;
#endif
  opened =
      opened && file->Reset(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()), H5Fclose) >= 0;
  if (why != nullptr) *why = opened ? "" : Hdf5ErrorText();
  return opened;
}

bool Hdf5StoredWhole(hid_t dataset, uint64_t* stored, uint64_t* needed) {
  uint64_t found = 0, taken = 0;
  bool whole = true;
  Hdf5Handle create_props(H5Dget_create_plist(dataset), H5Pclose);
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose);
  Hdf5Handle type(H5Dget_type(dataset), H5Tclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (create_props.valid() && type.valid() && rank >= 0) {
    std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    const H5D_layout_t layout = H5Pget_layout(create_props.get());
    H5D_fill_value_t fill = H5D_FILL_VALUE_DEFAULT;
    H5Pfill_value_defined(create_props.get(), &fill);
    if (layout == H5D_CHUNKED && fill != H5D_FILL_VALUE_USER_DEFINED &&
        H5Pget_chunk(create_props.get(), rank, chunk.data()) == rank) {
      taken = 1;
      for (int i = 0; i < rank; ++i) {
        const hsize_t per = chunk[i] > 0 ? (dims[i] + chunk[i] - 1) / chunk[i] : 0;
        if (dims[i] == 0) taken = 0;
        if (__builtin_mul_overflow(taken, per, &taken)) taken = 0, whole = false;
      }
      hsize_t chunks = 0;
      if (H5Dget_num_chunks(dataset, space.get(), &chunks) >= 0) found = chunks;
      whole = whole && found >= taken;
    } else if (layout == H5D_CONTIGUOUS) {
      taken = H5Tget_size(type.get());
      for (hsize_t d : dims)
        if (__builtin_mul_overflow(taken, d, &taken)) taken = 0, whole = false;
      found = H5Dget_storage_size(dataset);
      whole = whole && found >= taken;
    }
  }
  if (stored != nullptr) *stored = found;
  if (needed != nullptr) *needed = taken;
  return whole;
}

int64_t Hdf5Length1D(hid_t dataset) {
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose);
  if (!space.valid()) return -1;
  if (H5Sget_simple_extent_ndims(space.get()) != 1) return -1;
  hsize_t dims[1] = {0};
  if (H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0) return -1;
  return static_cast<int64_t>(dims[0]);
}

namespace {
// HDF5 converts a stored value outside the memory type's range (a negative int64 read as
// uint64) to the nearest one it holds, silently; this callback makes that read fail instead.
H5T_conv_ret_t RefuseOutOfRange(H5T_conv_except_t what, hid_t, hid_t, void*, void*, void* hit) {
  if (what != H5T_CONV_EXCEPT_RANGE_HI && what != H5T_CONV_EXCEPT_RANGE_LOW)
    return H5T_CONV_UNHANDLED;
  *static_cast<bool*>(hit) = true;
  return H5T_CONV_ABORT;
}

// Reads or writes elements [start, start + count) of a 1-D dataset by hyperslab.
Status TransferRange1D(hid_t dataset, int64_t start, int64_t count, hid_t mem_type, void* buffer,
                       bool write) {
  if (count <= 0) return Status::Ok();
  Hdf5Handle file_space;
  HDF5_CHECK(file_space.Reset(H5Dget_space(dataset), H5Sclose));
  hsize_t offset[1] = {static_cast<hsize_t>(start)};
  hsize_t extent[1] = {static_cast<hsize_t>(count)};
  HDF5_CHECK(
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset, nullptr, extent, nullptr));
  Hdf5Handle mem_space;
  HDF5_CHECK(mem_space.Reset(H5Screate_simple(1, extent, nullptr), H5Sclose));
  if (write) {
    HDF5_CHECK(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer));
    return Status::Ok();
  }
  Hdf5Handle transfer;
  HDF5_CHECK(transfer.Reset(H5Pcreate(H5P_DATASET_XFER), H5Pclose));
  bool out_of_range = false;
  HDF5_CHECK(H5Pset_type_conv_cb(transfer.get(), RefuseOutOfRange, &out_of_range));
  const herr_t read =
      H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), transfer.get(), buffer);
  if (out_of_range)
    return DataError(
        "it holds a value its reader's type cannot (a negative number where counts and ids are "
        "unsigned, or one too large)");
  HDF5_CHECK(read);
  return Status::Ok();
}
}  // namespace

Status Hdf5ReadRange1D(hid_t dataset, int64_t start, int64_t count, hid_t mem_type, void* buffer) {
  return TransferRange1D(dataset, start, count, mem_type, buffer, /*write=*/false);
}

Status Hdf5WriteRange1D(hid_t dataset, int64_t start, int64_t count, hid_t mem_type,
                        const void* buffer) {
  return TransferRange1D(dataset, start, count, mem_type, const_cast<void*>(buffer),
                         /*write=*/true);
}

Status Hdf5WriteIntAttribute(hid_t object, const char* name, int64_t value) {
  Hdf5Handle space, attribute;
  HDF5_CHECK(space.Reset(H5Screate(H5S_SCALAR), H5Sclose));
  HDF5_CHECK(attribute.Reset(
      H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose));
  HDF5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value));
  return Status::Ok();
}

Status Hdf5WriteStringAttribute(hid_t object, const char* name, const std::string& value) {
  Hdf5Handle type, space, attribute;
  HDF5_CHECK(type.Reset(H5Tcopy(H5T_C_S1), H5Tclose));
  HDF5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE));
  HDF5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  HDF5_CHECK(space.Reset(H5Screate(H5S_SCALAR), H5Sclose));
  HDF5_CHECK(attribute.Reset(
      H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose));
  const char* text = value.c_str();
  HDF5_CHECK(H5Awrite(attribute.get(), type.get(), &text));
  return Status::Ok();
}

namespace {
// An attribute read into one value must hold one: HDF5 writes every value it holds.
Status CheckOneValue(hid_t attribute, const char* name) {
  const int64_t count = Hdf5AttributeValueCount(attribute);
  if (count == 1) return Status::Ok();
  return RuntimeError(StrFormat("HDF5 attribute '%s' holds %lld values where one was expected",
                                name, static_cast<long long>(count)));
}
}  // namespace

Status Hdf5ReadIntAttribute(hid_t object, const char* name, int64_t* value) {
  Hdf5Handle attribute;
  HDF5_CHECK(attribute.Reset(H5Aopen(object, name, H5P_DEFAULT), H5Aclose));
  TRAINER_RETURN_IF_ERROR(CheckOneValue(attribute.get(), name));
  HDF5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_INT64, value));
  return Status::Ok();
}

Status Hdf5ReadStringAttribute(hid_t object, const char* name, std::string* value) {
  Hdf5Handle attribute, file_type, mem_type;
  HDF5_CHECK(attribute.Reset(H5Aopen(object, name, H5P_DEFAULT), H5Aclose));
  TRAINER_RETURN_IF_ERROR(CheckOneValue(attribute.get(), name));
  HDF5_CHECK(file_type.Reset(H5Aget_type(attribute.get()), H5Tclose));
  HDF5_CHECK(mem_type.Reset(H5Tcopy(H5T_C_S1), H5Tclose));
  // HDF5 does not convert between ASCII and UTF-8: read in the file's character set.
  HDF5_CHECK(H5Tset_cset(mem_type.get(), H5Tget_cset(file_type.get())));
  htri_t variable = H5Tis_variable_str(file_type.get());
  HDF5_CHECK(variable);
  if (variable > 0) {
    HDF5_CHECK(H5Tset_size(mem_type.get(), H5T_VARIABLE));
    char* text = nullptr;
    HDF5_CHECK(H5Aread(attribute.get(), mem_type.get(), &text));
    *value = text != nullptr ? text : "";
    H5free_memory(text);
    return Status::Ok();
  }
  size_t size = H5Tget_size(file_type.get());
  std::vector<char> text(size + 1, '\0');
  HDF5_CHECK(H5Tset_size(mem_type.get(), size + 1));  // room for the terminator
  HDF5_CHECK(H5Aread(attribute.get(), mem_type.get(), text.data()));
  *value = text.data();
  return Status::Ok();
}

}  // namespace trainer
