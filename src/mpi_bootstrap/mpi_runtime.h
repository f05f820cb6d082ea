// The MPI side of a run: MPI_Init_thread, world rank/size, node-local rank from
// MPI_Comm_split_type(SHARED), host names, the process groups of the rank grid (one MPI
// communicator each, wrapped as Communicator), agreement on errors so that no rank hangs, and
// MPI_Abort for the last resort. Everything else sees only the Communicator interface.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "common/communicator.h"
#include "common/device_groups.h"
#include "common/status.h"
#include "common/topology.h"

namespace trainer {

// Communicator over an MPI communicator; buffers are host memory.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, bool owns);
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  bool device_memory() const override { return false; }
  MPI_Comm comm() const { return comm_; }

  // MPI's counts are int: a message of more elements than this (every rank of the group with the
  // same value) goes in pieces of at most this many, by one call per piece (the gathers and
  // reductions of several blocks through a host buffer of one piece a member). Tests set a small
  // one; 0 restores kMostElementsPerMessage.
  static constexpr size_t kMostElementsPerMessage = size_t{1} << 30;
  void SetMostElementsPerMessage(size_t most) {
    most_per_message_ = most == 0 ? kMostElementsPerMessage : most;
  }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) override;
  Status Broadcast(void* data, size_t count, DType dtype, int root) override;
  Status Send(const void* data, size_t count, DType dtype, int peer) override;
  Status Recv(void* data, size_t count, DType dtype, int peer) override;
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                  int recv_peer, DType dtype) override;
  Status Barrier() override;
  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override;
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) override;

 private:
  MPI_Comm comm_;
  std::string name_;
  bool owns_;
  int rank_ = 0, size_ = 1;
  // AllGather's and ReduceScatter's piece: at most 256 MiB of all members' parts together.
  size_t BlockPiece(DType dtype) const;

  size_t most_per_message_ = kMostElementsPerMessage;
  std::vector<char> pieces_;  // AllGather's and ReduceScatter's piece of every member
};

// The groups a rank belongs to, for a given Topology.
struct ProcessGroups {
  Topology topology;
  Topology::Coord coord;
  std::unique_ptr<MpiCommunicator> tp, dp, pp;
  // Sharding (Distributed.sharding): the ranks sharing one copy of the sharded state, and the
  // replicas of one shard (pure data parallelism across sharding groups).
  std::unique_ptr<MpiCommunicator> sharding, replica;
  // Expert parallelism: the EP group (ep consecutive replicas) and the expert-data-parallel
  // group (the replicas with this rank's EP index).
  std::unique_ptr<MpiCommunicator> ep, expert_dp;
  // First and last pipeline stage of the same (tp, dp) coordinates: sums the tied embedding's
  // gradient. Null on middle stages and when pp == 1.
  std::unique_ptr<MpiCommunicator> embedding;
  // The MPI group of a device group (null where this rank has none).
  MpiCommunicator* Of(DeviceGroup g) const {
    switch (g) {
      case DeviceGroup::kTp:
        return tp.get();
      case DeviceGroup::kDp:
        return dp.get();
      case DeviceGroup::kPp:
        return pp.get();
      case DeviceGroup::kSharding:
        return sharding.get();
      case DeviceGroup::kReplica:
        return replica.get();
      case DeviceGroup::kEp:
        return ep.get();
      case DeviceGroup::kExpertDp:
        return expert_dp.get();
      case DeviceGroup::kEmbedding:
        return embedding.get();
    }
    return nullptr;
  }
};

class MpiRuntime {
 public:
  // MPI_Init_thread (FUNNELED); sets the process identity used by logging.
  static Status Init(int* argc, char*** argv, std::unique_ptr<MpiRuntime>* out);
  ~MpiRuntime();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  MpiCommunicator* world() { return world_.get(); }
  // Host name of every rank, and local rank of every rank (gathered at Init).
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  // This rank's index among the ranks of its host that see the same GPUs (the same
  // CUDA_VISIBLE_DEVICES, or none set), and their count: the GPU it takes of those it sees
  // (with Slurm's --gpus-per-task=2 each rank sees two GPUs of its own and takes the first).
  int gpu_peer_rank() const { return gpu_peer_rank_; }
  int gpu_peers() const { return gpu_peers_; }

  // All ranks call this with their own status. Returns a non-ok status on every rank when any
  // rank failed: the failing rank's own status, or (on the others) the same exit code with an
  // empty message. The lowest failing rank is the one that should print.
  Status Agree(const Status& local, bool* should_print);

  Status MakeGroups(const Topology& topology, ProcessGroups* out);

  // MPI_Abort(world, code): the last resort when ranks cannot agree (e.g. one failed mid-step).
  [[noreturn]] void Abort(int code);
  void Finalize();

 private:
  MpiRuntime() = default;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, gpu_peer_rank_ = 0, gpu_peers_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;
  std::vector<int> local_ranks_;
  std::unique_ptr<MpiCommunicator> world_;
  bool finalized_ = false;
};

}  // namespace trainer
