// GpuMonitor: at each logging step, this rank's GPU clock, power and temperature over the window
// (model/gpu_telemetry.h), the lowest SM clock in the job with its rank, and the job's total GPU
// power and energy per token, for the log line and metrics.jsonl; and a warning from any rank whose
// GPU is slowed by heat or its board, since a synchronous job runs at the pace of its slowest GPU.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/communicator.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/gpu_telemetry.h"

namespace trainer {

struct GpuReport {
  GpuWindow own;             // this rank's GPU over the window (samples == 0: not sampled)
  double lowest_sm_mhz = 0;  // the lowest mean SM clock of any sampled GPU in the job
  int lowest_rank = -1;      // its rank; -1 when no rank sampled its GPU
  double total_power_w = 0;  // every GPU's mean power, summed; 0 unless every rank sampled

  // " | 1485 MHz 692 W" (and ", lowest 1440 MHz on rank 13" for several ranks); "" unsampled.
  std::string Text(int world_size) const;
  // The metrics.jsonl fields: gpu_sm_mhz, gpu_power_w, gpu_temperature_c (this rank's GPU),
  // gpu_sm_mhz_lowest, gpu_sm_mhz_lowest_rank, and with every GPU sampled gpu_power_w_total and
  // the job's GPU energy per token at `tokens_per_s`, gpu_joules_per_token; none unsampled.
  std::vector<std::pair<std::string, double>> Fields(double tokens_per_s) const;
};

// The job's report from every rank's window (collective over `world`: every rank calls it at the
// same step, sampled or not).
Status AgreeOnGpuReport(Communicator* world, const GpuWindow& own, GpuReport* out);

class GpuMonitor {
 public:
  // Samples the backend's GPU; on the CPU path, or where NVML cannot read the GPU, it reports
  // nothing (rank 0 says why once).
  explicit GpuMonitor(Backend* backend);
  // The window since the last call, agreed over `world` (collective).
  Status Report(Communicator* world, GpuReport* out);

 private:
  std::unique_ptr<GpuTelemetry> telemetry_;
  uint64_t warned_reasons_ = 0;  // the abnormal reasons last warned about
};

}  // namespace trainer
