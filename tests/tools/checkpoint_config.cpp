// checkpoint_config FILE [--set]: prints the /config attribute of a checkpoint file (the resolved
// YAML config it was saved with), or with --set replaces it with the text read from stdin, as a
// UTF-8 variable-length string as the trainer writes it (HDF5 C API, independent of the
// trainer's own code). Tests use it to make checkpoints saved with a config that no longer
// validates. checkpoint_config FILE --set-int NAME VALUE writes an int64 attribute of the root
// (step, consumed_samples, ...): damaged progress; checkpoint_config FILE --delete NAME removes
// a root attribute: an incomplete manifest; --get NAME and --set-string NAME (stdin) print and
// replace another string attribute (lora_base). Exit 0 on success, 1 otherwise.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

// Replaces the root's int64 attribute `name` with `value`.
int SetInt(const char* path, const char* name, long long value) {
  const hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return 1;
  if (H5Aexists(file, name) > 0) H5Adelete(file, name);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = attribute >= 0 && H5Awrite(attribute, H5T_NATIVE_LLONG, &value) >= 0;
  if (attribute >= 0) H5Aclose(attribute);
  H5Sclose(space);
  return H5Fclose(file) >= 0 && ok ? 0 : 1;
}

// Removes the root's attribute `name`, or with "OBJECT@ATTRIBUTE" that object's (a tensor's crc32).
int Delete(const char* path, const std::string& name) {
  const hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return 1;
  const size_t at = name.find('@');
  const std::string object = at == std::string::npos ? "/" : name.substr(0, at);
  const std::string attribute = at == std::string::npos ? name : name.substr(at + 1);
  const bool ok = H5Adelete_by_name(file, object.c_str(), attribute.c_str(), H5P_DEFAULT) >= 0;
  return H5Fclose(file) >= 0 && ok ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[2]) == "--set-int")
    return SetInt(argv[1], argv[3], std::strtoll(argv[4], nullptr, 10));
  if (argc == 4 && std::string(argv[2]) == "--delete") return Delete(argv[1], argv[3]);
  // FILE [--set], or FILE --get NAME / --set-string NAME: another string attribute than config.
  const std::string mode = argc >= 3 ? argv[2] : "";
  const bool named = argc == 4 && (mode == "--get" || mode == "--set-string");
  const bool set = (argc == 3 && mode == "--set") || (named && mode == "--set-string");
  const char* name = named ? argv[3] : "config";
  if (argc != 2 && !(argc == 3 && set) && !named) {
    std::fprintf(stderr,
                 "usage: checkpoint_config FILE [--set < config.yaml | --set-int NAME VALUE | "
                 "--delete NAME|OBJECT@NAME | --get NAME | --set-string NAME < text]\n");
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
    if (H5Aexists(file, name) > 0) H5Adelete(file, name);
    const hid_t attribute = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    ok = attribute >= 0 && H5Awrite(attribute, type, &data) >= 0;
    if (attribute >= 0) H5Aclose(attribute);
    H5Sclose(space);
  } else {
    const hid_t attribute = H5Aopen(file, name, H5P_DEFAULT);
    char* text = nullptr;
    ok = attribute >= 0 && H5Aread(attribute, type, &text) >= 0;
    if (ok) std::fputs(text, stdout);
    if (text != nullptr) H5free_memory(text);
    if (attribute >= 0) H5Aclose(attribute);
  }
  H5Tclose(type);
  return H5Fclose(file) >= 0 && ok ? 0 : 1;
}
