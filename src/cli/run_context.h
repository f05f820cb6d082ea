// RunContext: what a distributed subcommand (train, check) sets up around its work: the MPI
// runtime, the backend of this rank (CPU, or the GPU of its local rank), the process groups of
// the configured layout, and the end of the run (one error line, every rank stopping).
#pragma once

#include <memory>
#include <vector>

#include "cli/cli_options.h"
#include "common/parallel_groups.h"
#include "config/train_config.h"
#include "model/backend.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

struct RunContext {
  std::unique_ptr<MpiRuntime> runtime;
  std::unique_ptr<Backend> backend;
  int device = -1;  // CUDA device of this rank, -1 on the CPU path
  ProcessGroups mpi_groups;
  std::vector<std::unique_ptr<Communicator>> device_groups;  // NCCL (GPU path)
  ParallelGroups groups;

  Status Init();
  // ParseCommandLine on every rank, agreed: a usage error on any rank stops every rank (exit 2),
  // and every rank must run the same subcommand with the same --help / --print-config (an MPMD
  // launch or a wrapper script may give ranks others, which would leave some waiting for ever in
  // the run's first collective): one line naming the first rank that differs, exit 2.
  Status ParseAgreedCommandLine(const char* command, const std::vector<std::string>& args,
                                po::options_description& options, po::variables_map* vm,
                                bool* help);
  // All ranks agree on `local`; the lowest failing rank prints its line once.
  Status Agree(const Status& local);
  // Every rank loaded the same config (keys and values, overrides and --resume included): a rank
  // started with other arguments (an MPMD launch, a host's own copy of the file) would train
  // another model, desynchronise the collectives or crash. One line naming the first key that
  // differs and the rank; exit 2.
  Status AgreeOnConfig(const TrainConfig& config);
  // Global.device: auto | cpu | cuda; binds the rank's GPU by local rank.
  Status SetupDevice(const TrainConfig& config);
  // MPI groups of the layout; NCCL communicators on the GPU path.
  Status BuildGroups(const TrainConfig& config);
  // This rank's need (`trainer plan`'s figure for its stage, after BuildGroups) against what its
  // memory holds: its GPU (cudaMemGetInfo), or its share of its host's memory (MemAvailable, or a
  // cgroup's limit) with the host's other ranks. Ok when it fits (*summary: the line to print) or
  // when the memory cannot be read (*summary left empty); else the need and the ways out.
  Status MemoryFits(const TrainConfig& config, std::string* summary) const;
  // MemoryFits as a run's error: the message names this rank and its host.
  Status CheckMemory(const TrainConfig& config, std::string* summary) const;
  // Rank 0 prints host, local rank, device and grid coordinates of every rank; warns when a TP
  // group spans hosts.
  void PrintRankMap();
  // Ends the run: agreed errors were printed by Agree; an error only this rank knows is printed
  // here and stops every rank through MPI_Abort. Returns the exit code.
  int Finish(const Status& status);
  // Prints now the line Finish would print for `status` (an error only this rank knows), for a
  // rank that still has long work before Finish (a checkpoint write in flight), during which a
  // watchdog or the launcher may end it; Finish then only stops the ranks.
  void SayNow(const Status& status);

  // The device communicator over MPI group `mpi` that Distributed.gpu_collectives asks for:
  // NCCL's (on the backend's stream, or with own_stream one of its own), or host-staged.
  Status MakeDeviceCommunicator(MpiCommunicator* mpi, const TrainConfig& config,
                                std::unique_ptr<Communicator>* out, bool own_stream = false);

 private:
  // A device communicator (MakeDeviceCommunicator) for each MPI group.
  Status BuildDeviceGroups(const TrainConfig& config);
  // Every rank on a GPU, or every rank on the CPU: one line naming the CPU ranks otherwise.
  Status AgreeOnDeviceKind();
  // Every rank's GPU UUID as a 52-bit hash, in rank order, on every rank.
  Status GatherGpuIds(std::vector<double>* gpu);
  // GPU ranks: no two ranks of a host on one GPU (NCCL would refuse it in its setup with a
  // "duplicate GPU" error that names neither the ranks nor the fix).
  Status AgreeOnDistinctGpus(const std::vector<double>& gpu);
  bool reported_ = false;      // the status handed to Finish went through Agree
  bool printed_ = false;       // SayNow printed it
  int config_zero_stage_ = 0;  // Distributed.sharding's stage in effect, for the rank map
  int ranks_per_gpu_ = 1;      // ranks on this rank's GPU (by UUID; host-staged collectives)
};

}  // namespace trainer
