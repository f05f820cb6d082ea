// LoadConfig, FormatConfig and AllConfigKeys (see config_loader.h); ValidateConfig is in
// config_validate.cpp.
#include "config/config_loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/log.h"
#include "config/config_keys.h"
#include "config/suggest.h"

namespace trainer {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += (i ? ", " : "") + items[i];
  return text;
}

std::string Trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

bool IsSection(const std::string& name) {
  const std::vector<std::string>& sections = ConfigSectionNames();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

int LineOf(const YAML::Node& node) {
  return node.Mark().line + 1;
}

std::string AtLine(const std::string& path, const YAML::Node& node) {
  return path + " line " + std::to_string(LineOf(node));
}

// The valid key nearest to section.name as "Section.key", or "": within the section when it
// exists, across all keys when it does not, and finally a key of the same (or nearly the same)
// name in another section ("Model.lr" -> "Optimizer.lr").
std::string SuggestKey(const std::string& section, const std::string& name) {
  if (IsSection(section)) {
    std::string match = ClosestMatch(name, ConfigKeyNames(section));
    if (!match.empty()) return section + "." + match;
    // A nested key one level too high ("Distributed.sharding_stage"): its map's key.
    for (const std::string& key : ConfigKeyNames(section))
      if (key.find('.') != std::string::npos && key.substr(key.rfind('.') + 1) == name)
        return section + "." + key;
  } else {
    std::string match = ClosestMatch(section + "." + name, ConfigKeyNames(""));
    if (!match.empty()) return match;
  }
  std::vector<std::string> bare_names;
  for (const ConfigKey& key : ConfigKeyTable()) bare_names.push_back(key.name);
  // Only near-exact here: a short unrelated name is always within 2 edits of some key.
  std::string match = ClosestMatch(name, bare_names);
  if (match.empty() || EditDistance(name, match) > name.size() / 4) return "";
  for (const ConfigKey& key : ConfigKeyTable())
    if (match == key.name) return key.full_name();
  return "";
}

Status UnknownKey(const std::string& section, const std::string& name, const std::string& where) {
  std::string message = "unknown key " + section + "." + name + " (" + where + ").";
  std::string suggestion = SuggestKey(section, name);
  if (!suggestion.empty()) return UsageError(message + " Did you mean " + suggestion + "?");
  if (IsSection(section))
    return UsageError(message + " Keys of " + section + ": " + Join(ConfigKeyNames(section)) + ".");
  return UsageError(message + " Sections are " + Join(ConfigSectionNames()) +
                    "; docs/config.md lists every key.");
}

// A section that is not one of ours: report its first key with a suggestion across sections
// (a misspelt section usually holds valid keys), or the section itself when it holds none.
Status UnknownSection(const std::string& path, const YAML::Node& name, const YAML::Node& body) {
  if (body.IsMap() && body.size() > 0) {
    const YAML::Node first_key = body.begin()->first;
    return UnknownKey(name.Scalar(), first_key.Scalar(), AtLine(path, first_key));
  }
  std::string message = "unknown section " + name.Scalar() + " (" + AtLine(path, name) + ").";
  std::string suggestion = ClosestMatch(name.Scalar(), ConfigSectionNames());
  if (!suggestion.empty()) return UsageError(message + " Did you mean " + suggestion + "?");
  return UsageError(message + " Sections are " + Join(ConfigSectionNames()) + ".");
}

// Reads the whole file, or says why it cannot.
StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    return UsageError("cannot read config file (" + path +
                      "): it is a directory. Pass a YAML file, e.g. configs/tiny-cpu.yaml.");
  std::ifstream file(path);
  if (!file) {
    return UsageError("cannot open config file (" + path + "): " + std::strerror(errno) +
                      ". Check the path; the shipped configs are in configs/, e.g. "
                      "configs/tiny-cpu.yaml.");
  }
  // Read as a stream (a pipe, <(...) or /dev/stdin cannot seek back), at most one byte past the
  // largest config.
  constexpr size_t kMostBytes = 1 << 20;  // configs are a few KiB
  std::string text(kMostBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  // A packed dataset or a checkpoint given as the config: named as such.
  static const std::string kHdf5Signature("\x89HDF\r\n\x1a\n", 8);
  if (text.compare(0, kHdf5Signature.size(), kHdf5Signature) == 0)
    return UsageError(StrFormat(
        "config file is an HDF5 file (%s): a packed dataset or a checkpoint, not a YAML config. "
        "Pass a config with -c (configs/*.yaml) and the data as -o Data.train_path=%s, or a "
        "checkpoint with --resume",
        path.c_str(), path.c_str()));
  if (text.size() > kMostBytes) {
    const std::uintmax_t size = std::filesystem::file_size(path, error);
    return UsageError(StrFormat(
        "config file is %s (%s): not a YAML config (those are a few KiB). Pass a config with "
        "-c, e.g. configs/tiny-cpu.yaml",
        error ? "over 1 MiB" : StrFormat("%.1f MiB", size / 1048576.0).c_str(), path.c_str()));
  }
  return text;
}

// The `key: value` entries of a section, a nested map (Distributed.sharding) flattened into
// "sub.key" names.
struct SectionEntry {
  std::string name;
  YAML::Node key_node, value;
};
std::vector<SectionEntry> FlattenSection(const std::string& section, const YAML::Node& body) {
  std::vector<SectionEntry> entries;
  for (const auto& entry : body) {
    const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    bool nested = entry.second.IsMap();
    if (nested) {
      nested = false;
      for (const std::string& key : ConfigKeyNames(section))
        if (key.rfind(name + ".", 0) == 0) nested = true;
    }
    if (!nested) {
      entries.push_back({name, entry.first, entry.second});
      continue;
    }
    for (const auto& sub : entry.second)
      entries.push_back(
          {name + "." + (sub.first.IsScalar() ? sub.first.Scalar() : "?"), sub.first, sub.second});
  }
  return entries;
}

// Applies the sections of a parsed YAML document to `config`.
Status ApplyDocument(const std::string& path, const YAML::Node& root, TrainConfig* config) {
  if (root.IsNull()) return Status::Ok();  // an empty file: defaults
  if (!root.IsMap()) {
    return UsageError("config is not a map of sections (" + AtLine(path, root) +
                      "): the top level must hold sections such as `Model:` with indented "
                      "`key: value` lines. Rewrite it in that form (see configs/tiny-cpu.yaml).");
  }
  std::map<std::string, int> section_lines;  // section -> line of its first appearance
  std::map<std::string, std::pair<std::string, int>> key_lines;  // canonical -> (spelling, line)
  for (const auto& section_entry : root) {
    const YAML::Node& name_node = section_entry.first;
    const YAML::Node& body = section_entry.second;
    if (!name_node.IsScalar())
      return UsageError("config section name is not a plain word (" + AtLine(path, name_node) +
                        "). Use one of " + Join(ConfigSectionNames()) + ".");
    const std::string section = name_node.Scalar();
    if (!IsSection(section)) return UnknownSection(path, name_node, body);
    auto [previous, inserted] = section_lines.emplace(section, LineOf(name_node));
    if (!inserted) {
      return UsageError(
          StrFormat("duplicate section %s (%s line %d; first at line %d). Merge the two into one.",
                    section.c_str(), path.c_str(), LineOf(name_node), previous->second));
    }
    if (body.IsNull()) continue;  // `Model:` with nothing under it
    if (!body.IsMap()) {
      return UsageError("section " + section + " is not a map (" + AtLine(path, name_node) +
                        "): it must hold indented `key: value` lines. Indent its keys under `" +
                        section + ":`.");
    }
    std::map<std::string, int> map_lines;  // a nested map (sharding:) given twice: refused
    for (const auto& entry : body) {
      if (!entry.first.IsScalar() || !entry.second.IsMap()) continue;
      auto [first_map, new_map] = map_lines.emplace(entry.first.Scalar(), LineOf(entry.first));
      if (!new_map)
        return UsageError(
            StrFormat("duplicate key %s.%s (%s line %d; first at line %d). Merge the two into one.",
                      section.c_str(), entry.first.Scalar().c_str(), path.c_str(),
                      LineOf(entry.first), first_map->second));
    }
    for (const auto& [name, key_node, value] : FlattenSection(section, body)) {
      const ConfigKey* key = FindConfigKey(section, name);
      if (key == nullptr) return UnknownKey(section, name, AtLine(path, key_node));
      const std::string spelling = section + "." + name;
      auto [seen, first] = key_lines.emplace(key->full_name(), std::make_pair(spelling, 0));
      if (!first) {
        const auto& [previous_spelling, previous_line] = seen->second;
        if (previous_spelling == spelling) {
          return UsageError(StrFormat("duplicate key %s (%s line %d; first at line %d). Keep one.",
                                      spelling.c_str(), path.c_str(), LineOf(key_node),
                                      previous_line));
        }
        return UsageError(
            StrFormat("%s and %s both set (%s lines %d and %d): they are the same key. Keep one.",
                      previous_spelling.c_str(), spelling.c_str(), path.c_str(), previous_line,
                      LineOf(key_node)));
      }
      seen->second.second = LineOf(key_node);
      // A missing value has no position of its own: point at its key.
      const std::string where = AtLine(path, value.IsNull() ? key_node : value);
      TRAINER_RETURN_IF_ERROR(ParseField(key->field(*config), value, spelling, where));
    }
  }
  return Status::Ok();
}

// The line where the second YAML document of `text` starts: its root's, or (an empty document has
// no position) the second document marker's, the first not counted when it opens the file.
int SecondDocumentLine(const std::string& text, const YAML::Node& second) {
  if (second.Mark().line >= 0 && !second.IsNull()) return LineOf(second);
  std::istringstream lines(text);
  std::string line;
  int number = 0, markers = 0;
  bool content_before = false;
  while (std::getline(lines, line)) {
    ++number;
    const bool marker = line.rfind("---", 0) == 0 &&
                        (line.size() == 3 || std::isspace(static_cast<unsigned char>(line[3])));
    if (marker && (++markers > 1 || content_before)) return number;
    const std::string trimmed = Trim(line);
    if (!marker && !trimmed.empty() && trimmed[0] != '#' && trimmed[0] != '%')
      content_before = true;
  }
  return number;
}

// Applies one "Section.key=value" override.
Status ApplyOverride(const std::string& text, TrainConfig* config) {
  const std::string where = "from -o " + text;
  const size_t equals = text.find('=');
  if (equals == std::string::npos) {
    return UsageError("malformed override -o " + text +
                      " (command line): no '=' between key and value. Write -o "
                      "Section.key=value, e.g. -o Model.hidden_size=256.");
  }
  const std::string name = Trim(text.substr(0, equals));
  const std::string value_text = text.substr(equals + 1);
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    std::string message =
        "malformed override -o " + text + " (command line): the key must be Section.key. ";
    std::string suggestion = dot == std::string::npos ? SuggestKey("", name) : "";
    if (!suggestion.empty())
      return UsageError(message + "Did you mean -o " + suggestion + "=" + value_text + "?");
    return UsageError(message + "Write -o Section.key=value, e.g. -o Model.hidden_size=256.");
  }
  const std::string section = name.substr(0, dot);
  const std::string key_name = name.substr(dot + 1);
  const ConfigKey* key = FindConfigKey(section, key_name);
  if (key == nullptr) return UnknownKey(section, key_name, where);
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    return UsageError("invalid value in override -o " + text + " (command line): " + e.msg +
                      ". Quote the value in YAML, e.g. -o 'Data.train_path=\"a: b.h5\"'.");
  }
  return ParseField(key->field(*config), value, name, where);
}

}  // namespace

StatusOr<TrainConfig> LoadConfigText(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides) {
  TrainConfig config;
  config.config_path = source;
  config.config_overrides = overrides;
  if (!source.empty()) {
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      return UsageError(
          StrFormat("invalid YAML in config file (%s line %d, column %d): %s. Fix "
                    "the syntax at that line.",
                    source.c_str(), e.mark.line + 1, e.mark.column + 1, e.msg.c_str()));
    }
    if (documents.size() > 1) {
      return UsageError(StrFormat(
          "config file holds more than one YAML document (%s line %d: a second document after "
          "'---'): only one is read. Merge the documents into one, or remove the '---' line.",
          source.c_str(), SecondDocumentLine(text, documents[1])));
    }
    TRAINER_RETURN_IF_ERROR(
        ApplyDocument(source, documents.empty() ? YAML::Node() : documents[0], &config));
  }
  for (const std::string& o : overrides) TRAINER_RETURN_IF_ERROR(ApplyOverride(o, &config));
  return config;
}

StatusOr<TrainConfig> LoadConfig(const std::string& yaml_path,
                                 const std::vector<std::string>& overrides) {
  std::string text;
  if (!yaml_path.empty()) {
    TRAINER_ASSIGN_OR_RETURN(text, ReadConfigFile(yaml_path));
  }
  return LoadConfigText(text, yaml_path, overrides);
}

std::string FormatConfig(const TrainConfig& config) {
  TrainConfig copy = config;  // the key table hands out pointers into a mutable config
  std::string text = "# trainer config, fully resolved (docs/config.md lists every key)\n";
  const DistributedConfig& dist = config.distributed;
  if (dist.dp_degree > 0 && config.global.micro_batch_size > 0) {
    const int sharding = dist.sharding.sharding_degree;
    text += StrFormat("# world size %d = dp %d%s x tp %d x pp %d; %d gradient accumulation steps\n",
                      config.world_size, dist.dp_degree,
                      sharding > 1 ? StrFormat(" x sharding %d", sharding).c_str() : "",
                      dist.tp_degree, dist.pp_degree, config.gradient_accumulation_steps());
  }
  std::string section, sub;
  for (const ConfigKey& key : ConfigKeyTable()) {
    if (section != key.section) {
      section = key.section;
      sub.clear();
      text += section + ":\n";
    }
    std::string name = key.name;
    const size_t dot = name.find('.');
    std::string indent = "  ";
    if (dot != std::string::npos) {  // a nested map: Distributed.sharding
      if (sub != name.substr(0, dot)) {
        sub = name.substr(0, dot);
        text += "  " + sub + ":\n";
      }
      name = name.substr(dot + 1);
      indent = "    ";
    }
    text += indent + name + ": " + FormatField(key.field(copy)) + "\n";
  }
  return text;
}

std::vector<std::string> AllConfigKeys() {
  return ConfigKeyNames("");
}

}  // namespace trainer
