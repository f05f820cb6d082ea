// HDF5 helpers (see hdf5_util.h).
#include "io/hdf5_util.h"

#include <vector>

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

int64_t Hdf5Length1D(hid_t dataset) {
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose);
  if (!space.valid()) return -1;
  if (H5Sget_simple_extent_ndims(space.get()) != 1) return -1;
  hsize_t dims[1] = {0};
  if (H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0) return -1;
  return static_cast<int64_t>(dims[0]);
}

namespace {
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
  if (write)
    HDF5_CHECK(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer));
  else
    HDF5_CHECK(H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer));
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

Status Hdf5ReadIntAttribute(hid_t object, const char* name, int64_t* value) {
  Hdf5Handle attribute;
  HDF5_CHECK(attribute.Reset(H5Aopen(object, name, H5P_DEFAULT), H5Aclose));
  HDF5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_INT64, value));
  return Status::Ok();
}

Status Hdf5ReadStringAttribute(hid_t object, const char* name, std::string* value) {
  Hdf5Handle attribute, file_type, mem_type;
  HDF5_CHECK(attribute.Reset(H5Aopen(object, name, H5P_DEFAULT), H5Aclose));
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
