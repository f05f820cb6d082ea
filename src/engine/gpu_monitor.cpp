// GpuMonitor (gpu_monitor.h).
#include "engine/gpu_monitor.h"

#include "common/log.h"

namespace trainer {
namespace {
constexpr double kSamplePeriodSeconds = 0.1;
constexpr double kNone = -1e300;  // an all-reduce (max) entry of a rank that has nothing to say
}  // namespace

std::string GpuReport::Text(int world_size) const {
  std::string text;
  if (own.samples > 0) text = StrFormat(" | %.0f MHz %.0f W", own.sm_mhz, own.power_w);
  if (world_size > 1 && lowest_rank >= 0)
    text += StrFormat("%s lowest %.0f MHz on rank %d", text.empty() ? " |" : ",", lowest_sm_mhz,
                      lowest_rank);
  return text;
}

std::vector<std::pair<std::string, double>> GpuReport::Fields(double tokens_per_s) const {
  std::vector<std::pair<std::string, double>> fields;
  if (own.samples > 0)
    fields = {{"gpu_sm_mhz", own.sm_mhz},
              {"gpu_power_w", own.power_w},
              {"gpu_temperature_c", own.max_temperature_c}};
  if (lowest_rank >= 0) {
    fields.emplace_back("gpu_sm_mhz_lowest", lowest_sm_mhz);
    fields.emplace_back("gpu_sm_mhz_lowest_rank", lowest_rank);
  }
  if (total_power_w > 0) {
    fields.emplace_back("gpu_power_w_total", total_power_w);
    if (tokens_per_s > 0) fields.emplace_back("gpu_joules_per_token", total_power_w / tokens_per_s);
  }
  return fields;
}

Status AgreeOnGpuReport(Communicator* world, const GpuWindow& own, GpuReport* out) {
  *out = GpuReport();
  out->own = own;
  const bool sampled = own.samples > 0;
  double lowest = sampled ? -own.sm_mhz : kNone;  // max of the negated clocks: the lowest clock
  TRAINER_RETURN_IF_ERROR(world->AllReduce(&lowest, 1, DType::kF64, ReduceOp::kMax));
  double rank = sampled && -own.sm_mhz == lowest ? -static_cast<double>(world->rank()) : kNone;
  TRAINER_RETURN_IF_ERROR(world->AllReduce(&rank, 1, DType::kF64, ReduceOp::kMax));
  double power[2] = {sampled ? own.power_w : 0.0, sampled ? 1.0 : 0.0};  // summed, and the count
  TRAINER_RETURN_IF_ERROR(world->AllReduce(power, 2, DType::kF64, ReduceOp::kSum));
  if (lowest == kNone) return Status::Ok();
  out->lowest_sm_mhz = -lowest;
  out->lowest_rank = static_cast<int>(-rank);
  if (power[1] == world->size()) out->total_power_w = power[0];
  return Status::Ok();
}

GpuMonitor::GpuMonitor(Backend* backend) {
  const std::string bus_id = BackendPciBusId(backend);
  if (bus_id.empty()) return;  // not on a GPU
  std::string why;
  telemetry_ = GpuTelemetry::Start(bus_id, kSamplePeriodSeconds, &why);
  if (!telemetry_) LogInfo("GPU clock and power not reported: " + why);
}

Status GpuMonitor::Report(Communicator* world, GpuReport* out) {
  const GpuWindow own = telemetry_ ? telemetry_->TakeWindow() : GpuWindow();
  // Abnormal for at least half the window: a moment's flag at a clock change is not worth a line.
  const bool slowed = own.abnormal_samples > 0 && 2 * own.abnormal_samples >= own.samples;
  const uint64_t abnormal = slowed ? own.reasons : 0;
  if (abnormal != 0 && abnormal != warned_reasons_)
    LogWarning(StrFormat(
        "this rank's GPU ran at %.0f MHz (%.0f W, up to %.0f C), slowed by %s; the whole job "
        "runs at the pace of its slowest GPU. Have the node checked (nvidia-smi -q -d "
        "PERFORMANCE,TEMPERATURE) or leave it out of the job",
        own.sm_mhz, own.power_w, own.max_temperature_c,
        ClockLimitReasonNames(own.reasons).c_str()));
  warned_reasons_ = abnormal;
  return AgreeOnGpuReport(world, own, out);
}

}  // namespace trainer
