// Reading and writing Hugging Face config.json values, shared by the llama family's mapping
// (hf_llama.h) and the mixture-of-experts classes' (hf_moe.h): a reader that keeps the default
// for an absent or null key and turns a value of the wrong type into a checkpoint error naming
// the file and the key, and numbers as JSON wants them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "common/filesystem.h"
#include "common/log.h"
#include "common/status.h"

namespace trainer {

// A JSON file (a config.json, an index) read as YAML, of which JSON is a subset; a file that is
// not JSON is a checkpoint error naming it, where it fails, and `fix` (when not empty).
inline Status LoadJsonFile(const std::string& path, YAML::Node* root, const std::string& fix = "") {
  if (!IsRegularFile(path))
    return CheckpointError(StrFormat("%s is not a file (a folder, FIFO or device)%s", path.c_str(),
                                     fix.empty() ? "" : (". " + fix).c_str()));
  try {
    *root = YAML::LoadFile(path);
  } catch (const std::exception& e) {  // YAML's, or the stream's (an unreadable file)
    return CheckpointError(StrFormat("%s is not JSON: %s%s", path.c_str(), e.what(),
                                     fix.empty() ? "" : (". " + fix).c_str()));
  }
  return Status::Ok();
}

// The shortest decimal that reads back as `v`.
inline std::string Decimal(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return StrFormat("%.0f", v);
  for (int digits = 1; digits <= 17; ++digits) {
    const std::string text = StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return StrFormat("%.17g", v);
}

// A number as JSON wants it: with a point or an exponent when it is a float key.
inline std::string JsonFloat(double v) {
  std::string text = Decimal(v);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

class ConfigReader {
 public:
  ConfigReader(const std::string& path, const YAML::Node& root) : path_(path), root_(root) {}

  bool Has(const char* key) const { return root_[key] && !root_[key].IsNull(); }
  const std::string& path() const { return path_; }
  const YAML::Node& root() const { return root_; }

  template <typename T>
  Status Get(const char* key, T* value, const YAML::Node& node = YAML::Node()) const {
    const YAML::Node n = node.IsDefined() && !node.IsNull() ? node[key] : root_[key];
    if (!n || n.IsNull()) return Status::Ok();  // the default stays
    try {
      *value = n.as<T>();
    } catch (const YAML::Exception&) {
      return CheckpointError(StrFormat("%s: %s is not a %s", path_.c_str(), key, Dump(n).c_str()));
    }
    return Status::Ok();
  }

  Status Refuse(const std::string& why) const {
    return CheckpointError(StrFormat("%s: %s", path_.c_str(), why.c_str()));
  }

 private:
  static std::string Dump(const YAML::Node& n) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string("value this trainer reads there: ") + e.c_str();
  }

  std::string path_;
  YAML::Node root_;
};

}  // namespace trainer
