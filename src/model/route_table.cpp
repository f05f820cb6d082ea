// RouteTable (route_table.h): the file format, the log table, the pins' checks.
#include "model/route_table.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/log.h"

namespace trainer {

namespace {

using Json = nlohmann::json;
constexpr size_t kShown = 6;  // candidates per line in the log's table

std::string NameList(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// One line naming where a pin fails and what to do.
Status PinError(const std::string& source, const std::string& op, const std::string& shape,
                const std::string& candidate, const std::string& why) {
  return UsageError(StrFormat(
      "Engine.gpu_routes file %s: op %s, shape %s: candidate %s %s. Remove the route from the "
      "file (the shape is then timed) or set Engine.gpu_routes=auto",
      source.c_str(), op.c_str(), shape.c_str(), candidate.c_str(), why.c_str()));
}

// routes[i] into *entry; *pins = false for a route without a choice ("chosen": null: no
// candidate ran the shape), which pins nothing.
Status ParseEntry(const Json& route, const std::string& source, size_t i, RouteEntry* entry,
                  bool* pins) {
  *pins = !route.is_object() || !route.contains("chosen") || !route["chosen"].is_null();
  auto text = [&](const char* key, std::string* out) -> Status {
    if (!route.contains(key) || !route[key].is_string())
      return UsageError(StrFormat("Engine.gpu_routes file %s: routes[%zu] has no string \"%s\"",
                                  source.c_str(), i, key));
    *out = route[key].get<std::string>();
    return Status::Ok();
  };
  std::string chosen;
  TRAINER_RETURN_IF_ERROR(text("op", &entry->op));
  TRAINER_RETURN_IF_ERROR(text("shape", &entry->shape));
  if (!*pins) return Status::Ok();
  TRAINER_RETURN_IF_ERROR(text("chosen", &chosen));
  if (route.contains("how") && route["how"].is_string())
    entry->how = route["how"].get<std::string>();
  if (route.contains("candidates") && route["candidates"].is_array()) {
    for (const Json& c : route["candidates"]) {
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string())
        return UsageError(StrFormat(
            "Engine.gpu_routes file %s: routes[%zu] (op %s) has a candidate without a \"name\"",
            source.c_str(), i, entry->op.c_str()));
      RouteCandidate candidate{c["name"].get<std::string>(), -1.f};
      if (c.contains("ms") && c["ms"].is_number()) candidate.ms = c["ms"].get<float>();
      entry->candidates.push_back(candidate);
    }
  }
  for (size_t c = 0; c < entry->candidates.size(); ++c)
    if (entry->candidates[c].name == chosen) entry->chosen = static_cast<int>(c);
  if (entry->chosen < 0) {
    entry->candidates.push_back({chosen, -1.f});
    entry->chosen = static_cast<int>(entry->candidates.size()) - 1;
  }
  return Status::Ok();
}

}  // namespace

const std::string& RouteEntry::chosen_name() const {
  static const std::string none = "(none)";
  return chosen >= 0 ? candidates[chosen].name : none;
}

Status RouteTable::Parse(const std::string& text, const std::string& source, RouteTable* out) {
  *out = RouteTable();
  out->source_ = source;
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return UsageError(
        StrFormat("Engine.gpu_routes file %s is not a JSON object (a run writes "
                  "one as <output_dir>/gpu_routes.json)",
                  source.c_str()));
  if (!doc.contains("format") || doc["format"] != kFormat || !doc.contains("version") ||
      doc["version"] != kVersion)
    return UsageError(
        StrFormat("Engine.gpu_routes file %s is not a routes file of this trainer (want "
                  "\"format\": \"%s\", \"version\": %d)",
                  source.c_str(), kFormat, kVersion));
  if (!doc.contains("routes") || !doc["routes"].is_array())
    return UsageError(
        StrFormat("Engine.gpu_routes file %s has no \"routes\" list", source.c_str()));
  for (size_t i = 0; i < doc["routes"].size(); ++i) {
    RouteEntry entry;
    bool pins = true;
    TRAINER_RETURN_IF_ERROR(ParseEntry(doc["routes"][i], source, i, &entry, &pins));
    if (!pins) continue;
    if (out->Find(entry.op, entry.shape) != nullptr)
      return UsageError(StrFormat("Engine.gpu_routes file %s: op %s, shape %s is listed twice",
                                  source.c_str(), entry.op.c_str(), entry.shape.c_str()));
    out->Record(std::move(entry));
  }
  return Status::Ok();
}

Status RouteTable::Load(const std::string& path, RouteTable* out) {
  std::ifstream in(path);
  if (!in)
    return UsageError(
        StrFormat("Engine.gpu_routes file %s cannot be read; give a file a run "
                  "wrote (<output_dir>/gpu_routes.json) or auto",
                  path.c_str()));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path, out);
}

std::string RouteTable::ToJson(int indent) const {
  Json routes = Json::array();
  for (const RouteEntry& e : entries_) {
    Json candidates = Json::array();
    for (const RouteCandidate& c : e.candidates)
      candidates.push_back({{"name", c.name}, {"ms", c.ms >= 0 ? Json(c.ms) : Json(nullptr)}});
    routes.push_back({{"op", e.op},
                      {"shape", e.shape},
                      {"chosen", e.chosen >= 0 ? Json(e.chosen_name()) : Json(nullptr)},
                      {"how", e.how},
                      {"candidates", candidates}});
  }
  Json doc = {{"format", kFormat}, {"version", kVersion}, {"routes", routes}};
  return doc.dump(indent);
}

std::string RouteTable::Format() const {
  std::string text = "GPU routes (op | shape | candidates in ms, * chosen | how):";
  for (const RouteEntry& e : entries_) {
    // Long lists (cuBLASLt's algorithms) show the first (the library's own pick), the chosen
    // one and the fastest others, up to kShown; the file has them all.
    std::vector<bool> shown(e.candidates.size(), e.candidates.size() <= kShown);
    if (!shown.empty()) shown[0] = true;
    if (e.chosen >= 0) shown[e.chosen] = true;
    for (auto count = std::count(shown.begin(), shown.end(), true);
         count < static_cast<long>(kShown); ++count) {
      int next = -1;
      for (size_t c = 0; c < e.candidates.size(); ++c)
        if (!shown[c] && e.candidates[c].ms >= 0 &&
            (next < 0 || e.candidates[c].ms < e.candidates[next].ms))
          next = static_cast<int>(c);
      if (next < 0) break;
      shown[next] = true;
    }
    std::string times;
    for (size_t c = 0; c < e.candidates.size(); ++c) {
      if (!shown[c]) continue;
      const RouteCandidate& k = e.candidates[c];
      times += StrFormat("%s%s%s %s", times.empty() ? "" : ", ",
                         static_cast<int>(c) == e.chosen ? "*" : "", k.name.c_str(),
                         k.ms >= 0 ? StrFormat("%.3f", k.ms).c_str() : "-");
    }
    const long hidden = std::count(shown.begin(), shown.end(), false);
    if (hidden > 0) times += StrFormat(" (+%ld more)", hidden);
    text += StrFormat("\n  %s | %s | %s | %s", e.op.c_str(), e.shape.c_str(), times.c_str(),
                      e.how.c_str());
  }
  return text;
}

void RouteTable::Record(RouteEntry entry) {
  const auto key = std::make_pair(entry.op, entry.shape);
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second] = std::move(entry);
  } else {
    index_[key] = entries_.size();
    entries_.push_back(std::move(entry));
  }
}

const RouteEntry* RouteTable::Find(const std::string& op, const std::string& shape) const {
  auto it = index_.find(std::make_pair(op, shape));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Status RouteTable::CheckNames(const std::map<std::string, CandidateCheck>& ops) const {
  std::vector<std::string> known;
  for (const auto& op : ops) known.push_back(op.first);
  for (const RouteEntry& e : entries_) {
    auto op = ops.find(e.op);
    if (op == ops.end())
      return UsageError(
          StrFormat("Engine.gpu_routes file %s: op %s (shape %s) is not an op with routes (%s). "
                    "Remove the route from the file or set Engine.gpu_routes=auto",
                    source_.c_str(), e.op.c_str(), e.shape.c_str(), NameList(known).c_str()));
    if (!op->second(e.chosen_name()))
      return PinError(source_, e.op, e.shape, e.chosen_name(), "is not one of the op's routes");
  }
  return Status::Ok();
}

Status RouteTable::PinnedChoice(const std::string& op, const std::string& shape,
                                const std::vector<std::string>& names,
                                const std::vector<bool>& runs, int* index) const {
  *index = -1;
  const RouteEntry* entry = Find(op, shape);
  if (entry == nullptr) return Status::Ok();
  const std::string& pinned = entry->chosen_name();
  for (size_t c = 0; c < names.size(); ++c) {
    if (names[c] != pinned) continue;
    if (!runs[c]) return PinError(source_, op, shape, pinned, "cannot run this shape on this GPU");
    *index = static_cast<int>(c);
    return Status::Ok();
  }
  return PinError(source_, op, shape, pinned,
                  "is not a route of this shape (its routes: " + NameList(names) + ")");
}

}  // namespace trainer
