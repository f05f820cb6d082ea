// compare_checkpoints A B [rel_tol [tensor_tol]]: compares every tensor of two checkpoint files
// (HDF5 C API, independent of the trainer's own reader). The whole state's relative difference
// ||a - b|| / ||b|| (over all tensors) must be <= rel_tol (0: bit-identical), and each tensor's
// own relative difference <= tensor_tol (default rel_tol). A per-tensor bound looser than the
// global one is needed for small tensors with gradient elements as small as Adam's eps (the
// biases, which start at zero; the LayerNorm parameters): there g / (sqrt(v) + eps) turns the
// reduction order's rounding into visibly different updates (tests/integration/lib.sh,
// TINY_LAYOUT_GPT). The key bias's gradient, zero in exact arithmetic, is written as exactly zero.
// Exit 0 when both pass, 1 otherwise.
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

herr_t Collect(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

bool ReadAll(hid_t file, const std::string& name, std::vector<float>* data) {
  hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (d < 0) return false;
  hid_t space = H5Dget_space(d);
  data->resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data->data());
  H5Sclose(space);
  H5Dclose(d);
  return rc >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: compare_checkpoints A.h5 B.h5 [rel_tol]\n");
    return 2;
  }
  const double tol = argc > 3 ? std::atof(argv[3]) : 0.0;
  const double tensor_tol = argc > 4 ? std::atof(argv[4]) : tol;
  double total_diff = 0, total_norm = 0;
  hid_t a = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t b = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (a < 0 || b < 0) return 2;
  std::vector<std::string> names, names_b;
  H5Ovisit(a, H5_INDEX_NAME, H5_ITER_NATIVE, Collect, &names);
  H5Ovisit(b, H5_INDEX_NAME, H5_ITER_NATIVE, Collect, &names_b);
  if (names != names_b || names.empty()) {
    std::printf("tensor lists differ (%zu vs %zu)\n", names.size(), names_b.size());
    return 1;
  }
  double worst = 0;
  std::string worst_name;
  std::vector<float> x, y;
  for (const std::string& n : names) {
    if (!ReadAll(a, n, &x) || !ReadAll(b, n, &y) || x.size() != y.size()) {
      std::printf("%s: unreadable or shapes differ\n", n.c_str());
      return 1;
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      norm += double(y[i]) * y[i];
    }
    total_diff += diff;
    total_norm += norm;
    const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (rel > worst || worst_name.empty()) {
      worst = rel;
      worst_name = n;
    }
  }
  const double global = std::sqrt(total_diff) / std::max(std::sqrt(total_norm), 1e-30);
  std::printf(
      "%zu tensors; relative difference %.3e overall (tolerance %.1e), worst tensor "
      "%.3e (%s, tolerance %.1e)\n",
      names.size(), global, tol, worst, worst_name.c_str(), tensor_tol);
  return global <= tol && worst <= tensor_tol ? 0 : 1;
}
