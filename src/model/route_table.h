// RouteTable: the routes a backend chose, one entry per (op, shape): the candidates, their times
// (route_policy.h) and the one chosen, and how (timed, pinned by a file, or the only one that
// runs the shape). The same table, read from a file, pins the choices of another run
// (Engine.gpu_routes). Backend-neutral and free of CUDA: tests/unit/route_table_test.cpp.
//
// The file (<output_dir>/gpu_routes.json, docs/gpu.md), one JSON object:
//   {"format": "trainer-gpu-routes", "version": 1,
//    "routes": [{"op": "gelu_gemm_forward", "shape": "N=8192 C=768 F=3072 bias",
//                "chosen": "sm90", "how": "timed",
//                "candidates": [{"name": "cublaslt", "ms": 0.118}, {"name": "cudnn", "ms": null},
//                               ...]}, ...]}
// Pinning reads op, shape and chosen; the rest is the record of how the choice was made. A route
// whose "chosen" is null (no candidate ran the shape) pins nothing.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

struct RouteCandidate {
  std::string name;
  float ms = -1.f;  // its time (route_policy.h); < 0: refused, not timed, or not for the shape
};

struct RouteEntry {
  std::string op, shape;
  std::vector<RouteCandidate> candidates;
  int chosen = -1;  // index into candidates; -1: none runs the shape (the op's plain route)
  std::string how;  // "timed", "pinned", "only" (one candidate runs the shape) or "untimed"
                    // (no memory for the trial: the library's first pick)
  const std::string& chosen_name() const;
};

class RouteTable {
 public:
  static constexpr const char* kFormat = "trainer-gpu-routes";
  static constexpr int kVersion = 1;

  // A routes file's text; errors are usage errors naming `source` and what is wrong.
  static Status Parse(const std::string& text, const std::string& source, RouteTable* out);
  // Parse of the file at `path`.
  static Status Load(const std::string& path, RouteTable* out);
  // The file's text (Parse(ToJson()) gives the same entries).
  // indent >= 0: one key per line, so indented (the file); -1: one line (metrics, manifest).
  std::string ToJson(int indent = -1) const;
  // The table for the log: one line per entry, the chosen candidate starred.
  std::string Format() const;

  // Records (or replaces) the entry of (entry.op, entry.shape).
  void Record(RouteEntry entry);
  const RouteEntry* Find(const std::string& op, const std::string& shape) const;
  const std::vector<RouteEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // Pins: every entry's op must be a key of `ops` and its chosen candidate accepted by that op's
  // function; else a usage error naming the file, op, shape and candidate.
  using CandidateCheck = std::function<bool(const std::string& candidate)>;
  Status CheckNames(const std::map<std::string, CandidateCheck>& ops) const;
  // For the shape's first call: *index = the pinned candidate's index in `names` (runs[i]: can
  // candidate i run the shape on this device), or -1 when the table does not pin the shape. A
  // pinned candidate that is not in `names`, or cannot run the shape: a usage error naming the
  // file, op, shape and candidate.
  Status PinnedChoice(const std::string& op, const std::string& shape,
                      const std::vector<std::string>& names, const std::vector<bool>& runs,
                      int* index) const;

 private:
  std::vector<RouteEntry> entries_;
  std::map<std::pair<std::string, std::string>, size_t> index_;
  std::string source_;  // the file a pinning table was read from
};

}  // namespace trainer
