// HDF5 helpers (the io layer, below data and checkpoint, which both use them):
// Hdf5Handle (an RAII holder for hid_t), HDF5_CHECK (a failed call returns a Status naming the
// call and HDF5's own reason), silencing of HDF5's automatic error printing, 1-D hyperslab reads
// and writes, and integer/string attribute helpers. Serial HDF5 C API only.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "common/check.h"
#include "common/status.h"

namespace trainer {

// Turns off HDF5's printing of error stacks to stderr; failures travel as Status instead.
void SilenceHdf5Errors();

// One line from HDF5's current error stack: "<API call>: <innermost reason>".
std::string Hdf5ErrorText();

// The number of values an attribute holds (1 for a scalar), or -1 when HDF5 cannot say.
int64_t Hdf5AttributeValueCount(hid_t attribute);

// A filter (compression) in `dataset`'s pipeline that this HDF5 cannot apply, with the fix, or
// "": what explains a read that failed.
std::string Hdf5MissingFilter(hid_t dataset);
// For a virtual dataset, a source file or dataset that is missing, with the fix, or "": HDF5
// reads that part as the fill value, without an error. `folder` is the folder of the dataset's
// file, where HDF5 also looks for relative source files.
std::string Hdf5MissingVirtualSource(hid_t dataset, const std::string& folder);

inline bool Hdf5Succeeded(int64_t result) {
  return result >= 0;
}
inline std::string DescribeHdf5Result(int64_t result) {
  return std::to_string(result) + " (" + Hdf5ErrorText() + ")";
}

}  // namespace trainer

// HDF5_CHECK(expr): herr_t or hid_t < 0 is failure; returns a kRuntime Status upward.
#define HDF5_CHECK(expr)                                               \
  TRAINER_LIBRARY_CHECK("HDF5", expr, #expr, ::trainer::Hdf5Succeeded, \
                        ::trainer::DescribeHdf5Result)

namespace trainer {

// Owns one HDF5 identifier and closes it with the matching H5?close function.
class Hdf5Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Hdf5Handle() = default;
  Hdf5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Hdf5Handle() { Close(); }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle(Hdf5Handle&& other) noexcept : id_(other.id_), close_(other.close_) {
    other.id_ = H5I_INVALID_HID;
  }
  Hdf5Handle& operator=(Hdf5Handle&& other) noexcept {
    if (this != &other) {
      Close();
      id_ = other.id_;
      close_ = other.close_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Takes ownership of `id` (closing the previous one) and returns it, so that
  // HDF5_CHECK(handle.Reset(H5Dopen2(...), H5Dclose)) both checks and keeps the identifier.
  hid_t Reset(hid_t id, Closer close) {
    Close();
    id_ = id;
    close_ = close;
    return id;
  }
  // Closes now; the result matters for files being written (the final flush happens here).
  herr_t Close() {
    herr_t result = 0;
    if (id_ >= 0 && close_ != nullptr) result = close_(id_);
    id_ = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Number of elements of a 1-D dataset; -1 with HDF5's error stack set when it is not 1-D.
// Opens `path` read-only, without HDF5's file lock (readers never write; some parallel file
// systems keep no locks, and HDF5 refuses a second open of one file with other locking flags).
// False when HDF5 cannot open it; *why (optional) then holds HDF5's reason (taken before the
// clean-up calls, which clear HDF5's error stack).
bool Hdf5OpenReadOnly(const std::string& path, Hdf5Handle* file, std::string* why = nullptr);
// Whether `dataset`'s storage covers its whole extent, so that no element reads as the fill
// value by default: a chunked one stores every chunk its shape takes (compressed or not; where
// its writer set a fill value, chunks left out on purpose read as that, and pass), a contiguous
// one the bytes of its shape. *stored and *needed (when given): the chunks, or bytes, found and
// taken (needed 0: a shape too large to count).
bool Hdf5StoredWhole(hid_t dataset, uint64_t* stored = nullptr, uint64_t* needed = nullptr);

int64_t Hdf5Length1D(hid_t dataset);

// Elements [start, start + count) of a 1-D dataset to/from `buffer` (as `mem_type`) by hyperslab.
Status Hdf5ReadRange1D(hid_t dataset, int64_t start, int64_t count, hid_t mem_type, void* buffer);
Status Hdf5WriteRange1D(hid_t dataset, int64_t start, int64_t count, hid_t mem_type,
                        const void* buffer);

// Scalar attributes on any object: integers as 64-bit little-endian, strings as variable-length
// UTF-8 (h5py reads them as int and str).
Status Hdf5WriteIntAttribute(hid_t object, const char* name, int64_t value);
Status Hdf5WriteStringAttribute(hid_t object, const char* name, const std::string& value);
// Reads an integer attribute of any integer type (converted to int64). The caller checks that it
// exists (H5Aexists) and is an integer first to report a missing attribute in its own words.
Status Hdf5ReadIntAttribute(hid_t object, const char* name, int64_t* value);
// Reads a fixed- or variable-length string attribute.
Status Hdf5ReadStringAttribute(hid_t object, const char* name, std::string* value);

}  // namespace trainer
