// compare_checkpoints A B [rel_tol [tensor_tol]]: compares every tensor of two checkpoint files
// (HDF5 C API, independent of the trainer's own reader). The whole state's relative difference
// ||a - b|| / ||b|| (over all tensors) must be <= rel_tol (0: bit-identical), and each tensor's
// own relative difference <= tensor_tol (default rel_tol). A per-tensor bound looser than the
// global one is needed for small tensors with gradient elements as small as Adam's eps (the
// biases, which start at zero; the LayerNorm parameters): there g / (sqrt(v) + eps) turns the
// reduction order's rounding into visibly different updates (tests/integration/lib.sh,
// TINY_LAYOUT_GPT). The key bias's gradient, zero in exact arithmetic, is written as exactly zero.
// The root attributes (the manifest) must match too: every integer one exactly (step,
// consumed_samples, tokens_seen, seed, the model shape, ...) except world_size, which is the
// writing layout's; and the string rng_state. rng_states ("rank 1 (dp 1/2 ...): STATE", one line
// per writing rank): each rank's STATE, where both have as many ranks. The rank descriptions are
// left out (ZeRO adds "(sharding 1/2, ...)" on an otherwise equal layout), and so is the whole
// attribute across world sizes: there the ranks are other ranks (and today no rank has
// generator state to restore: checkpoint-format.md).
// Exit 0 when all pass, 1 otherwise.
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
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

struct Attributes {
  std::map<std::string, long long> integers;
  std::map<std::string, std::string> strings;
};

herr_t CollectAttribute(hid_t location, const char* name, const H5A_info_t*, void* out) {
  Attributes* attributes = static_cast<Attributes*>(out);
  hid_t a = H5Aopen(location, name, H5P_DEFAULT);
  if (a < 0) return -1;
  hid_t type = H5Aget_type(a);
  if (H5Tget_class(type) == H5T_INTEGER) {
    long long value = 0;
    if (H5Aread(a, H5T_NATIVE_LLONG, &value) >= 0) attributes->integers[name] = value;
  } else if (H5Tget_class(type) == H5T_STRING) {
    hid_t memory = H5Tcopy(H5T_C_S1);
    H5Tset_size(memory, H5T_VARIABLE);
    H5Tset_cset(memory, H5Tget_cset(type));  // the trainer writes UTF-8
    char* text = nullptr;
    if (H5Tis_variable_str(type) > 0 && H5Aread(a, memory, &text) >= 0 && text != nullptr) {
      attributes->strings[name] = text;
      H5free_memory(text);
    } else if (H5Tis_variable_str(type) <= 0) {
      std::string fixed(H5Tget_size(type), '\0');
      if (H5Aread(a, type, fixed.data()) >= 0) attributes->strings[name] = fixed.c_str();
    }
    H5Tclose(memory);
  }
  H5Tclose(type);
  H5Aclose(a);
  return 0;
}

// The STATE of each "rank R (...): STATE" line, in order.
std::vector<std::string> RankStates(const std::string& lines) {
  std::vector<std::string> states;
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    const std::string line = lines.substr(start, end - start);
    const size_t colon = line.rfind("): ");
    states.push_back(colon == std::string::npos ? line : line.substr(colon + 3));
    start = end + 1;
  }
  return states;
}

// Prints every root attribute that differs where it must match; the number of them.
int CompareManifests(hid_t a, hid_t b) {
  Attributes x, y;
  H5Aiterate2(a, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, CollectAttribute, &x);
  H5Aiterate2(b, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, CollectAttribute, &y);
  std::set<std::string> keys;
  for (const auto& [name, value] : x.integers) keys.insert(name);
  for (const auto& [name, value] : y.integers) keys.insert(name);
  int bad = 0;
  for (const std::string& name : keys) {
    if (name == "world_size") continue;  // the writing layout's
    const auto in_x = x.integers.find(name), in_y = y.integers.find(name);
    if (in_x != x.integers.end() && in_y != y.integers.end() && in_x->second == in_y->second)
      continue;
    std::printf("root attribute %s differs: %s vs %s\n", name.c_str(),
                in_x == x.integers.end() ? "absent" : std::to_string(in_x->second).c_str(),
                in_y == y.integers.end() ? "absent" : std::to_string(in_y->second).c_str());
    ++bad;
  }
  if (x.strings["rng_state"] != y.strings["rng_state"]) {
    std::printf("root attribute rng_state differs: \"%s\" vs \"%s\"\n",
                x.strings["rng_state"].c_str(), y.strings["rng_state"].c_str());
    ++bad;
  }
  if (x.integers["world_size"] == y.integers["world_size"] &&
      RankStates(x.strings["rng_states"]) != RankStates(y.strings["rng_states"])) {
    std::printf("root attribute rng_states differs: \"%s\" vs \"%s\"\n",
                x.strings["rng_states"].c_str(), y.strings["rng_states"].c_str());
    ++bad;
  }
  return bad;
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
  const int manifest_differences = CompareManifests(a, b);
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
  if (manifest_differences > 0)
    std::printf("%d root attributes differ (the manifest; lines above)\n", manifest_differences);
  return global <= tol && worst <= tensor_tol && manifest_differences == 0 ? 0 : 1;
}
