// RunContext (run_context.h).
#include "cli/run_context.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "cli/check_gpu.h"
#include "common/agree.h"
#include "common/device_groups.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "config/config_diff.h"
#include "engine/memory_plan.h"
#include "mpi_bootstrap/host_staged_communicator.h"
#include "mpi_bootstrap/nccl_bootstrap.h"

namespace trainer {

Status RunContext::Init() {
  Status s = MpiRuntime::Init(nullptr, nullptr, &runtime);
  if (!s.ok()) {
    LogError(s.message() + ". Is this binary started by mpirun/srun with a working MPI?");
    return Status(ExitCode::kEnvironment, "");
  }
  return Status::Ok();
}

Status RunContext::ParseAgreedCommandLine(const char* command, const std::vector<std::string>& args,
                                          po::options_description& options, po::variables_map* vm,
                                          bool* help) {
  TRAINER_RETURN_IF_ERROR(Agree(ParseCommandLine(command, args, options, vm, help)));
  const std::string mine = std::string("trainer ") + command + (*help ? " --help" : "") +
                           (vm->count("print-config") ? " --print-config" : "");
  std::string root = mine;  // rank 0's, after the broadcast
  TRAINER_RETURN_IF_ERROR(BroadcastText(runtime->world(), &root));
  Status local;
  if (root != mine)
    local = UsageError(StrFormat(
        "rank %d (%s) runs `%s`, rank 0 `%s`: every rank of a run needs the same command line. "
        "Start them with one command (an MPMD launch or a wrapper script gave them others)",
        runtime->rank(), runtime->host().c_str(), mine.c_str(), root.c_str()));
  return Agree(local);
}

Status RunContext::Agree(const Status& local) {
  bool should_print = false;
  Status s = runtime->Agree(local, &should_print);
  if (!s.ok() && should_print && !s.message().empty()) LogError(s.message());
  reported_ = !s.ok();
  return s;
}

Status RunContext::AgreeOnConfig(const TrainConfig& config) {
  const std::string mine = ConfigKeyLines(config);
  std::string root = mine;  // rank 0's, after the broadcast
  TRAINER_RETURN_IF_ERROR(BroadcastText(runtime->world(), &root));
  Status local;
  if (root != mine) {
    const std::vector<std::string> differ = DifferingKeyLines(mine, root, "rank 0");
    const std::string more = differ.size() > 2
                                 ? StrFormat(" (and %zu more keys)", differ.size() - 1)
                             : differ.size() > 1 ? std::string(" (and 1 more key)")
                                                 : std::string();
    local = UsageError(StrFormat(
        "rank %d loaded another config than rank 0 (%s): %s%s. Every rank of a run needs the "
        "same config file, -o overrides and --resume: start them with one command line (a copy "
        "of the file on each host must be the same)",
        runtime->rank(), runtime->host().c_str(), differ.empty() ? "" : differ.front().c_str(),
        more.c_str()));
  }
  return Agree(local);
}

Status RunContext::SetupDevice(const TrainConfig& config) {
  const std::string& wanted = config.global.device;
  std::string cuda_says;  // why the CUDA runtime found none: no driver, or one too old for it
  const int visible = VisibleCudaDevices(&cuda_says);
  const bool use_cuda = wanted == "cuda" || (wanted == "auto" && visible > 0);
  if (!use_cuda) {
    backend = MakeCpuBackend();
    if (wanted == "auto")
      LogInfo(CudaBackendCompiled()
                  ? "device: cpu (no GPU visible" +
                        (cuda_says.empty() ? std::string() : " to CUDA, " + cuda_says) +
                        "; fp32 CPU path)"
                  : std::string("device: cpu (built without CUDA; fp32 CPU path)"));
    else
      LogInfo("device: cpu (fp32 CPU path)");
    return Status::Ok();
  }
  if (!CudaBackendCompiled())
    return EnvironmentError(
        "Global.device=cuda but this trainer was built without CUDA. Rebuild "
        "with -DTRAINER_CUDA=ON or set Global.device=cpu");
  // One GPU per rank: of the GPUs this rank sees, the one at its index among the ranks of its
  // host that see the same ones (Slurm's --gpus-per-task / --gpu-bind give each rank or socket
  // its own CUDA_VISIBLE_DEVICES; without it, every rank of the host sees all of them).
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == 0)
    return EnvironmentError(StrFormat(
        "Global.device=cuda but no GPU is visible (rank %d on %s, CUDA_VISIBLE_DEVICES=%s%s). Run "
        "on a GPU node (check the driver with nvidia-smi: a driver older than this build's CUDA "
        "runtime shows its GPUs there but not here), or set Global.device=cpu or auto",
        runtime->rank(), runtime->host().c_str(), cvd ? cvd : "unset",
        cuda_says.empty() ? "" : ("; CUDA says " + cuda_says).c_str()));
  // With host-staged collectives ranks may share a GPU: round robin over the visible ones.
  if (visible == 1) {
    device = 0;
  } else if (runtime->gpu_peer_rank() < visible || config.distributed.host_staged()) {
    device = runtime->gpu_peer_rank() % visible;
  } else {
    return EnvironmentError(StrFormat(
        "%d ranks on host %s see the same %d GPU(s) (CUDA_VISIBLE_DEVICES=%s), too few for rank "
        "%d. Start one rank per GPU (e.g. --ntasks-per-node=%d)",
        runtime->gpu_peers(), runtime->host().c_str(), visible, cvd ? cvd : "unset",
        runtime->rank(), visible));
  }
  const bool bf16 = config.engine.mix_precision == "bf16";
  const std::string name = CudaDeviceName(device);
  LogInfo(StrFormat("device: cuda (%s compute, fp32 master weights), %d GPU(s) per host, %s",
                    bf16 ? "bf16" : "fp32", visible, name.c_str()));
  if (runtime->rank() == 0 && !PeakFitsDevice(name, config.engine.peak_tflops)) {
    const double known = DenseBf16PeakTflops(name);
    LogWarning(StrFormat(
        "MFU is counted against Engine.peak_tflops=%g TFLOP/s, the dense bf16 peak of an "
        "H100/H200 SXM, but this GPU is an %s: set Engine.peak_tflops to its dense bf16 peak "
        "(%s) for a true MFU",
        config.engine.peak_tflops, name.c_str(),
        known > 0 ? StrFormat("-o Engine.peak_tflops=%g", known).c_str() : "312 for an A100"));
  }
  return MakeCudaBackend(device, &backend, bf16 ? DType::kBF16 : DType::kF32);
}

Status RunContext::BuildGroups(const TrainConfig& config) {
  const Topology topo = config.distributed.topology(runtime->size());
  TRAINER_RETURN_IF_ERROR(runtime->MakeGroups(topo, &mpi_groups));
  groups.topology = topo;
  groups.coord = mpi_groups.coord;
  groups.world_rank = runtime->rank();
  groups.ranks_on_host = runtime->local_size();
  groups.world_host = runtime->world();
  groups.tp = mpi_groups.tp.get();
  groups.dp = mpi_groups.dp.get();
  groups.pp = mpi_groups.pp.get();
  groups.embedding = mpi_groups.embedding.get();
  groups.sharding = mpi_groups.sharding.get();
  groups.replica = mpi_groups.replica.get();
  groups.ep = mpi_groups.ep.get();
  groups.expert_dp = mpi_groups.expert_dp.get();
  config_zero_stage_ = config.distributed.zero_stage();
  TRAINER_RETURN_IF_ERROR(AgreeOnDeviceKind());
  if (!backend->device_memory()) return Status::Ok();
  std::vector<double> gpus;
  TRAINER_RETURN_IF_ERROR(GatherGpuIds(&gpus));
  groups.gpus = static_cast<int>(std::set<double>(gpus.begin(), gpus.end()).size());
  if (config.distributed.host_staged()) {  // the ranks on this rank's GPU share its memory
    ranks_per_gpu_ = static_cast<int>(
        std::count(gpus.begin(), gpus.end(), gpus[static_cast<size_t>(runtime->rank())]));
  } else {
    TRAINER_RETURN_IF_ERROR(AgreeOnDistinctGpus(gpus));
  }
  return BuildDeviceGroups(config);
}

Status RunContext::AgreeOnDeviceKind() {
  // Global.device=auto decides per rank: a rank that sees no GPU (a missing driver, an empty
  // CUDA_VISIBLE_DEVICES) would take the CPU path beside GPU ranks, which then wait for it in
  // NCCL's setup. Every rank learns which ranks are on the CPU and stops with the same line.
  std::vector<double> on_cpu(static_cast<size_t>(runtime->size()), 0.0);
  on_cpu[static_cast<size_t>(runtime->rank())] = backend->device_memory() ? 0.0 : 1.0;
  TRAINER_RETURN_IF_ERROR(
      runtime->world()->AllReduce(on_cpu.data(), on_cpu.size(), DType::kF64, ReduceOp::kSum));
  std::string cpu_ranks;
  int count = 0;
  for (int r = 0; r < runtime->size(); ++r) {
    if (on_cpu[static_cast<size_t>(r)] == 0.0) continue;
    if (count++ < 8)
      cpu_ranks += StrFormat("%s%d (%s)", cpu_ranks.empty() ? "" : ", ", r,
                             runtime->hosts()[static_cast<size_t>(r)].c_str());
  }
  if (count == 0 || count == runtime->size()) return Status::Ok();
  if (count > 8) cpu_ranks += StrFormat(" and %d more", count - 8);
  return EnvironmentError(StrFormat(
      "rank(s) %s see no GPU and would run on the CPU while the other ranks use GPUs. Check the "
      "driver (nvidia-smi) and CUDA_VISIBLE_DEVICES on those hosts, or set Global.device=cuda "
      "so that a rank without a GPU stops at once",
      cpu_ranks.c_str()));
}

Status RunContext::GatherGpuIds(std::vector<double>* gpu) {
  // Each rank's GPU UUID (unique across machines: two containers of a host may see one GPU)
  // as a 52-bit hash, exact in a double, in its slot.
  // Every rank learns first whether each could read its GPU, so that none waits in the exchange
  // for one that stopped.
  const StatusOr<GpuFacts> mine = QueryGpu(device);
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(runtime->world(), mine.status()));
  gpu->assign(static_cast<size_t>(runtime->size()), 0.0);
  (*gpu)[static_cast<size_t>(runtime->rank())] =
      static_cast<double>(std::hash<std::string>{}(mine.value().uuid) & ((uint64_t{1} << 52) - 1));
  return runtime->world()->AllReduce(gpu->data(), gpu->size(), DType::kF64, ReduceOp::kSum);
}

Status RunContext::AgreeOnDistinctGpus(const std::vector<double>& gpu) {
  const size_t ranks = gpu.size();
  for (size_t a = 0; a < ranks; ++a)
    for (size_t b = a + 1; b < ranks; ++b) {
      if (gpu[a] != gpu[b]) continue;
      return EnvironmentError(StrFormat(
          "ranks %zu and %zu on host %s were given the same GPU, and each rank needs one of its "
          "own (NCCL refuses two ranks on one GPU). Start at most one rank per GPU of each host "
          "(e.g. --ntasks-per-node=<GPUs per node>, or --gpus-per-task=1), or check "
          "CUDA_VISIBLE_DEVICES (Distributed.gpu_collectives=mpi lets ranks share a GPU, "
          "slowly)",
          a, b, runtime->hosts()[a].c_str()));
    }
  return Status::Ok();
}

Status RunContext::MemoryFits(const TrainConfig& config, std::string* summary) const {
  // This rank's share of its host's memory; false where it cannot be read.
  RankMemoryAvailable host_share;
  const auto read_host = [&]() {
    const HostMemoryFacts host = QueryHostMemory();
    if (host.available_bytes < 0 || host.total_bytes < 0) return false;
    const int ranks = runtime->local_size();
    host_share.where = ranks == 1 ? "host " + runtime->host()
                                  : StrFormat("host %s (a share for each of its %d ranks)",
                                              runtime->host().c_str(), ranks);
    host_share.capacity = host.total_bytes / ranks;
    host_share.free_now = host.available_bytes / ranks;
    host_share.source = host.source;
    return true;
  };
  const bool device_memory = backend->device_memory();
  // sharding_offload: the optimizer's state in host memory (beside the arena on CPU ranks).
  if (config.distributed.sharding.sharding_offload && read_host())
    TRAINER_RETURN_IF_ERROR(
        CheckOffloadFitsHost(config, groups.coord.pp, device_memory, host_share));
  RankMemoryAvailable available;
  if (device_memory) {
    available.where = StrFormat("cuda:%d (%s)", device, CudaDeviceName(device).c_str());
    available.source = "cudaMemGetInfo";
    if (!DeviceMemoryInfo(backend.get(), &available.free_now, &available.capacity))
      return Status::Ok();
    if (ranks_per_gpu_ > 1) {  // host-staged collectives: the GPU's share of each of its ranks
      available.where += StrFormat(" (a share for each of its %d ranks)", ranks_per_gpu_);
      available.capacity /= ranks_per_gpu_;
      available.free_now /= ranks_per_gpu_;
    }
  } else {
    if (host_share.where.empty() && !read_host()) return Status::Ok();
    available = host_share;
  }
  return CheckRankMemoryFits(config, groups.coord.pp, device_memory, available, summary);
}

Status RunContext::CheckMemory(const TrainConfig& config, std::string* summary) const {
  const Status fits = MemoryFits(config, summary);
  if (fits.ok()) return fits;
  return Status(fits.code(), StrFormat("memory (rank %d on %s): %s", runtime->rank(),
                                       runtime->host().c_str(), fits.message().c_str()));
}

void RunContext::PrintRankMap() {
  const int n = runtime->size();
  std::vector<int> devices(n, -1);
  devices[runtime->rank()] = device;
  if (!runtime->world()->AllReduce(devices.data(), n, DType::kI32, ReduceOp::kMax).ok()) return;
  if (runtime->rank() != 0) return;
  const Topology& t = groups.topology;
  std::string map =
      StrFormat("rank map (%d ranks: dp %d x tp %d x pp %d, order %s, TP fastest):", n, t.dp, t.tp,
                t.pp, Topology::kOrder);
  if (t.sharding > 1)
    map += StrFormat(" sharding stage %d over %d ranks x %d replicas;", config_zero_stage_,
                     t.sharding, t.replicas());
  if (t.ep > 1) map += StrFormat(" experts over ep %d x expert-dp %d;", t.ep, t.expert_dp());
  bool tp_spans_hosts = false;
  for (int r = 0; r < n; ++r) {
    const Topology::Coord c = t.CoordOf(r);
    map += StrFormat("\n  rank %3d  host %-16s local %2d  device %-6s  %s", r,
                     runtime->hosts()[r].c_str(), runtime->local_ranks()[r],
                     devices[r] < 0 ? "cpu" : ("cuda:" + std::to_string(devices[r])).c_str(),
                     t.Describe(r).c_str());
    const int tp_leader = t.RankOf(0, c.dp, c.pp);
    if (runtime->hosts()[r] != runtime->hosts()[tp_leader]) tp_spans_hosts = true;
  }
  LogInfo(map);
  if (tp_spans_hosts)
    LogWarning(
        "a tensor-parallel group spans hosts: TP all-reduces will cross the network. Keep "
        "tp_degree <= GPUs per node and launch ranks host by host (TP is the fastest "
        "coordinate)");
}

void RunContext::SayNow(const Status& status) {
  if (status.ok() || reported_ || status.message().empty() || printed_) return;
  LogError(status.message());
  printed_ = true;
}

int RunContext::Finish(const Status& status) {
  const int code = status.exit_code();
  if (!status.ok() && !reported_ && !status.message().empty()) {
    // Only this rank may know: print, and stop every rank rather than leave one in a collective.
    if (!printed_) LogError(status.message());
    if (runtime && runtime->size() > 1) runtime->Abort(code);
  }
  if (runtime) runtime->Finalize();
  return code;
}

Status RunContext::MakeDeviceCommunicator(MpiCommunicator* mpi, const TrainConfig& config,
                                          std::unique_ptr<Communicator>* out, bool own_stream) {
  if (config.distributed.host_staged()) return MakeHostStagedCommunicator(mpi, out);
  return MakeNcclCommunicator(mpi, BackendStream(backend.get()), out, own_stream);
}

Status RunContext::BuildDeviceGroups(const TrainConfig& config) {
  // One device communicator per MPI group (the embedding group only where this rank belongs to
  // it), shared by the groups that have the same ranks (device_groups.h). With
  // Distributed.overlap_grad_reduce the DP group runs on a stream of its own (gradient buckets
  // reduced during the backward pass), as the sharding group does with
  // Distributed.sharding.reduce_overlap at stage 2-3.
  const DistributedConfig& d = config.distributed;
  const std::vector<DeviceGroupSpec> specs = PlanDeviceGroups(
      groups.topology, groups.coord.pp, d.overlap_grad_reduce, d.sharding_on_own_stream());
  // A shared communicator is named by all its groups ("dp/replica/expert_dp"), for its errors.
  std::vector<std::string> names(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    MpiCommunicator* mpi = mpi_groups.Of(specs[i].group);
    std::string& name = names[specs[i].shares >= 0 ? specs[i].shares : i];
    if (mpi != nullptr) name += (name.empty() ? "" : "/") + mpi->name();
  }
  // Every rank plans the same number of groups; after each, the world agrees on the outcome, so
  // that a group that failed on some hosts stops every rank there (with its message), not only
  // its members while the others wait for them in the next group's set-up.
  std::vector<Communicator*> built(specs.size(), nullptr);
  for (size_t i = 0; i < specs.size(); ++i) {
    MpiCommunicator* mpi = mpi_groups.Of(specs[i].group);
    Status made = Status::Ok();
    if (mpi != nullptr && mpi->size() != specs[i].members) {  // the plan and the split disagree
      made = RuntimeError(StrFormat("device group %s has %d ranks, planned %d", mpi->name().c_str(),
                                    mpi->size(), specs[i].members));
    } else if (mpi != nullptr && specs[i].shares >= 0) {
      built[i] = built[specs[i].shares];
    } else if (mpi != nullptr) {
      MpiCommunicator named(mpi->comm(), names[i], /*owns=*/false);
      std::unique_ptr<Communicator> comm;
      made = MakeDeviceCommunicator(&named, config, &comm, specs[i].own_stream);
      built[i] = comm.get();
      if (made.ok()) device_groups.push_back(std::move(comm));
    }
    TRAINER_RETURN_IF_ERROR(AgreeOnStatus(runtime->world(), made));
    if (mpi != nullptr) groups.Of(specs[i].group) = built[i];
  }
  return Status::Ok();
}

}  // namespace trainer
