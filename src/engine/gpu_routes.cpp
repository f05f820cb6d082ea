// Engine.gpu_routes: pins at setup, the report after the first settled step (gpu_routes.h).
#include "engine/gpu_routes.h"

#include <cstring>
#include <vector>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {

namespace {

// Every rank's `text`, on every rank (the world's host communicator).
Status GatherText(Communicator* world, const std::string& text, std::vector<std::string>* out) {
  double longest = static_cast<double>(text.size());
  TRAINER_RETURN_IF_ERROR(world->AllReduce(&longest, 1, DType::kF64, ReduceOp::kMax));
  // As int32 words: the length first, then the bytes, padded.
  const size_t words = 1 + (static_cast<size_t>(longest) + 3) / 4;
  std::vector<int32_t> send(words, 0), recv(words * world->size());
  send[0] = static_cast<int32_t>(text.size());
  std::memcpy(send.data() + 1, text.data(), text.size());
  TRAINER_RETURN_IF_ERROR(world->AllGather(send.data(), recv.data(), words, DType::kI32));
  out->clear();
  for (int r = 0; r < world->size(); ++r) {
    const int32_t* piece = recv.data() + r * words;
    out->emplace_back(reinterpret_cast<const char*>(piece + 1), static_cast<size_t>(piece[0]));
  }
  return Status::Ok();
}

}  // namespace

Status PinGpuRoutes(const std::string& setting, Backend* backend) {
  if (setting == "auto") return Status::Ok();
  if (!backend->device_memory()) {
    LogInfo("Engine.gpu_routes=" + setting + " is ignored: the CPU backend has no GPU routes");
    return Status::Ok();
  }
  RouteTable pins;
  TRAINER_RETURN_IF_ERROR(RouteTable::Load(setting, &pins));
  TRAINER_RETURN_IF_ERROR(backend->PinRoutes(pins));
  LogInfo(StrFormat("GPU routes: %zu shapes pinned by %s (Engine.gpu_routes); others are timed",
                    pins.entries().size(), setting.c_str()));
  return Status::Ok();
}

Status GpuRouteReport::AfterStep(bool last_step, std::string* json) {
  json->clear();
  if (done_) return Status::Ok();
  const RouteTable* mine = backend_->routes();
  if (mine == nullptr) {  // every rank runs the same kind of backend
    done_ = true;
    return Status::Ok();
  }
  Communicator* world = groups_->world_host;
  double unsettled = backend_->routes_settled() ? 0.0 : 1.0;
  TRAINER_RETURN_IF_ERROR(world->AllReduce(&unsettled, 1, DType::kF64, ReduceOp::kSum));
  if (unsettled > 0 && !last_step) return Status::Ok();
  done_ = true;
  std::vector<std::string> texts;
  TRAINER_RETURN_IF_ERROR(GatherText(world, mine->ToJson(), &texts));
  // One table, the same on every rank: each shape's entry as the lowest rank that ran it chose it
  // (pipeline stages differ in shapes). Every rank takes its timed choices from the next call of
  // each shape on; a rank that timed otherwise is named. Choices by rule stay each rank's own.
  const bool root = groups_->world_rank == 0;
  RouteTable merged;
  for (size_t r = 0; r < texts.size(); ++r) {
    RouteTable table;
    TRAINER_RETURN_IF_ERROR(RouteTable::Parse(texts[r], StrFormat("rank %zu's routes", r), &table));
    for (const RouteEntry& e : table.entries()) {
      const RouteEntry* first = merged.Find(e.op, e.shape);
      if (first == nullptr)
        merged.Record(e);
      else if (first->chosen_name() != e.chosen_name() && root && first->how == "timed")
        LogWarning(
            StrFormat("rank %zu chose %s for %s (%s) where a lower rank chose %s; it takes "
                      "the lower rank's from the next step on",
                      r, e.chosen_name().c_str(), e.op.c_str(), e.shape.c_str(),
                      first->chosen_name().c_str()));
    }
  }
  TRAINER_RETURN_IF_ERROR(backend_->AdoptRoutes(merged));
  if (!root) return Status::Ok();
  LogInfo(merged.Format());
  if (unsettled > 0)
    LogInfo(
        StrFormat("%d rank(s) were still timing some shapes' routes at the end of the run; "
                  "those shapes are left out",
                  static_cast<int>(unsettled)));
  const std::string path = output_dir_ + "/gpu_routes.json";
  TRAINER_RETURN_IF_ERROR(WriteFileAtomically(path, merged.ToJson(1) + "\n"));
  LogInfo("GPU routes written to " + path + " (Engine.gpu_routes=" + path +
          " pins them in another run)");
  json_ = merged.ToJson();
  *json = json_;
  return Status::Ok();
}

}  // namespace trainer
