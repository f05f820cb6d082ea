// checkpoint_config FILE [--set]: prints the /config attribute of a checkpoint file (the resolved
// YAML config it was saved with), or with --set replaces it with the text read from stdin, as a
// UTF-8 variable-length string as the trainer writes it (HDF5 C API, independent of the
// trainer's own code). Tests use it to make checkpoints saved with a config that no longer
// validates. Exit 0 on success, 1 otherwise.
#include <hdf5.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  const bool set = argc == 3 && std::string(argv[2]) == "--set";
  if (argc != 2 && !set) {
    std::fprintf(stderr, "usage: checkpoint_config FILE [--set < config.yaml]\n");
    return 1;
  }
  const hid_t file = H5Fopen(argv[1], set ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return 1;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  bool ok = false;
  if (set) {
    const std::string text((std::istreambuf_iterator<char>(std::cin)),
                           std::istreambuf_iterator<char>());
    const char* data = text.c_str();
    const hid_t space = H5Screate(H5S_SCALAR);
    if (H5Aexists(file, "config") > 0) H5Adelete(file, "config");
    const hid_t attribute = H5Acreate2(file, "config", type, space, H5P_DEFAULT, H5P_DEFAULT);
    ok = attribute >= 0 && H5Awrite(attribute, type, &data) >= 0;
    if (attribute >= 0) H5Aclose(attribute);
    H5Sclose(space);
  } else {
    const hid_t attribute = H5Aopen(file, "config", H5P_DEFAULT);
    char* text = nullptr;
    ok = attribute >= 0 && H5Aread(attribute, type, &text) >= 0;
    if (ok) std::fputs(text, stdout);
    if (text != nullptr) H5free_memory(text);
    if (attribute >= 0) H5Aclose(attribute);
  }
  H5Tclose(type);
  return H5Fclose(file) >= 0 && ok ? 0 : 1;
}
