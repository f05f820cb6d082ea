// Engine.gpu_routes (docs/gpu.md): the routes file a run starts from, and the report of the
// routes the backend chose. Setup: every rank reads the file and pins its choices in the backend
// (CPU ranks say once that they ignore it). After the first step in which every rank's routes are
// settled (or the run's last): every rank's table is gathered to every rank and merged into one
// (a shape's route as the lowest rank that ran it chose it), which every rank adopts, so that all
// route a shape alike from then on; rank 0 warns about a rank that chose otherwise, prints the
// table, writes <output_dir>/gpu_routes.json, and puts the same text into the next metrics.jsonl
// record (`gpu_routes`) and every checkpoint's manifest.
#pragma once

#include <string>

#include "common/parallel_groups.h"
#include "common/status.h"
#include "model/backend.h"

namespace trainer {

// Before the first step: Engine.gpu_routes ("auto" or a file) into the backend.
Status PinGpuRoutes(const std::string& setting, Backend* backend);

class GpuRouteReport {
 public:
  GpuRouteReport(Backend* backend, const ParallelGroups* groups, std::string output_dir)
      : backend_(backend), groups_(groups), output_dir_(std::move(output_dir)) {}
  // After a step, until it has reported (collective over the world while not done): when every
  // rank's routes are settled, or at the run's last step (shapes still being timed are left out),
  // reports them and sets *json (rank 0: the merged table, one line; other ranks: empty).
  // Backends without routes report nothing.
  Status AfterStep(bool last_step, std::string* json);
  bool done() const { return done_; }
  const std::string& json() const { return json_; }  // rank 0, once done

 private:
  Backend* backend_;
  const ParallelGroups* groups_;
  std::string output_dir_;
  bool done_ = false;
  std::string json_;
};

}  // namespace trainer
