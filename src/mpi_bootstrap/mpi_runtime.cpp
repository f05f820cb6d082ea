// MpiRuntime and MpiCommunicator (mpi_runtime.h).
#include "mpi_bootstrap/mpi_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/agree.h"
#include "common/log.h"
#include "mpi_bootstrap/mpi_check.h"

namespace trainer {
namespace {

MPI_Datatype ToMpi(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI32:
      return MPI_INT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kU16:
      return MPI_UINT16_T;  // only moved, never reduced, on the host path
  }
  return MPI_BYTE;
}

Status CheckReducible(DType t, const std::string& group) {
  if (t == DType::kBF16 || t == DType::kU16)
    return RuntimeError(
        StrFormat("MPI reduction of %s on group %s is not supported: the CPU path "
                  "is fp32",
                  DTypeName(t), group.c_str()));
  return Status::Ok();
}

// The pieces [at, at + n) of a message of `count` elements, n at most `most`: one call of
// `piece` for each (one, empty, for count 0).
template <typename Piece>
Status InPieces(size_t count, size_t most, Piece&& piece) {
  size_t at = 0;
  do {
    const size_t n = std::min(most, count - at);
    TRAINER_RETURN_IF_ERROR(piece(at, n));
    at += n;
  } while (at < count);
  return Status::Ok();
}

// MPI counts are int: refuse what does not fit instead of truncating (the all-to-alls, whose
// per-peer counts no training message comes near).
Status CheckCount(size_t count, const std::string& group) {
  if (count > static_cast<size_t>(INT_MAX))
    return RuntimeError(
        StrFormat("MPI message of %zu elements on group %s exceeds INT_MAX", count, group.c_str()));
  return Status::Ok();
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool owns)
    : comm_(comm), name_(std::move(name)), owns_(owns) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiCommunicator::AllReduce(void* data, size_t count, DType dtype, ReduceOp op) {
  TRAINER_RETURN_IF_ERROR(CheckReducible(dtype, name_));
  char* bytes = static_cast<char*>(data);
  return InPieces(count, most_per_message_, [&](size_t at, size_t n) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + at * DTypeSize(dtype), static_cast<int>(n),
                            ToMpi(dtype), op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm_));
    return Status::Ok();
  });
}

size_t MpiCommunicator::BlockPiece(DType dtype) const {
  constexpr size_t kPieceBytes = size_t{256} << 20;  // of all members' parts together
  return std::min(
      most_per_message_,
      std::max<size_t>(1, kPieceBytes / (DTypeSize(dtype) * static_cast<size_t>(size_))));
}

Status MpiCommunicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  const size_t elem = DTypeSize(dtype);
  if (count <= most_per_message_) {
    const int whole = static_cast<int>(count);
    if (send == static_cast<const char*>(recv) + count * elem * rank_) {
      MPI_CHECK(
          MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, whole, ToMpi(dtype), comm_));
    } else {
      MPI_CHECK(MPI_Allgather(send, whole, ToMpi(dtype), recv, whole, ToMpi(dtype), comm_));
    }
    return Status::Ok();
  }
  // Columns [at, at + n) of every member's block at a time, through pieces_ (this rank's part in
  // its slot, the in-place gather filling the others). In place, the part written back for this
  // rank is the part just read.
  return InPieces(count, BlockPiece(dtype), [&](size_t at, size_t n) {
    const size_t part = n * elem;
    pieces_.resize(std::max(pieces_.size(), part * static_cast<size_t>(size_)));
    std::memcpy(pieces_.data() + part * rank_, static_cast<const char*>(send) + at * elem, part);
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, pieces_.data(), static_cast<int>(n),
                            ToMpi(dtype), comm_));
    for (int r = 0; r < size_; ++r)
      std::memcpy(static_cast<char*>(recv) + (static_cast<size_t>(r) * count + at) * elem,
                  pieces_.data() + part * r, part);
    return Status::Ok();
  });
}

Status MpiCommunicator::ReduceScatter(const void* send, void* recv, size_t count, DType dtype) {
  TRAINER_RETURN_IF_ERROR(CheckReducible(dtype, name_));
  const size_t elem = DTypeSize(dtype), block = count * elem;
  char* base = static_cast<char*>(recv) - block * static_cast<size_t>(rank_);
  if (count <= most_per_message_) {
    if (send != base) {
      MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), ToMpi(dtype), MPI_SUM,
                                         comm_));
      return Status::Ok();
    }
    // In place (NCCL's convention: recv is this rank's block of send). MPI's in-place form leaves
    // the result at the start of the buffer instead: move it to this rank's block.
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, static_cast<int>(count), ToMpi(dtype),
                                       MPI_SUM, comm_));
    if (rank_ != 0) std::memmove(recv, base, block);
    return Status::Ok();
  }
  // Columns [at, at + n) of every member's block at a time, gathered into pieces_ in member
  // order. In place, the part written is one already read, and no later piece reads it.
  return InPieces(count, BlockPiece(dtype), [&](size_t at, size_t n) {
    const size_t part = n * elem;
    pieces_.resize(std::max(pieces_.size(), part * static_cast<size_t>(size_)));
    for (int r = 0; r < size_; ++r)
      std::memcpy(pieces_.data() + part * r,
                  static_cast<const char*>(send) + (static_cast<size_t>(r) * count + at) * elem,
                  part);
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, pieces_.data(), static_cast<int>(n),
                                       ToMpi(dtype), MPI_SUM, comm_));
    std::memcpy(static_cast<char*>(recv) + at * elem, pieces_.data(), part);
    return Status::Ok();
  });
}

Status MpiCommunicator::Broadcast(void* data, size_t count, DType dtype, int root) {
  char* bytes = static_cast<char*>(data);
  return InPieces(count, most_per_message_, [&](size_t at, size_t n) {
    MPI_CHECK(
        MPI_Bcast(bytes + at * DTypeSize(dtype), static_cast<int>(n), ToMpi(dtype), root, comm_));
    return Status::Ok();
  });
}

Status MpiCommunicator::Send(const void* data, size_t count, DType dtype, int peer) {
  const char* bytes = static_cast<const char*>(data);
  return InPieces(count, most_per_message_, [&](size_t at, size_t n) {
    MPI_CHECK(
        MPI_Send(bytes + at * DTypeSize(dtype), static_cast<int>(n), ToMpi(dtype), peer, 0, comm_));
    return Status::Ok();
  });
}

Status MpiCommunicator::Recv(void* data, size_t count, DType dtype, int peer) {
  char* bytes = static_cast<char*>(data);
  return InPieces(count, most_per_message_, [&](size_t at, size_t n) {
    MPI_CHECK(MPI_Recv(bytes + at * DTypeSize(dtype), static_cast<int>(n), ToMpi(dtype), peer, 0,
                       comm_, MPI_STATUS_IGNORE));
    return Status::Ok();
  });
}

Status MpiCommunicator::SendRecv(const void* send, size_t send_count, int send_peer, void* recv,
                                 size_t recv_count, int recv_peer, DType dtype) {
  if (send_count <= most_per_message_ && recv_count <= most_per_message_) {
    MPI_CHECK(MPI_Sendrecv(send, static_cast<int>(send_count), ToMpi(dtype), send_peer, 0, recv,
                           static_cast<int>(recv_count), ToMpi(dtype), recv_peer, 0, comm_,
                           MPI_STATUS_IGNORE));
    return Status::Ok();
  }
  // Every piece of both sides posted at once, then waited for: the peers' pieces match these in
  // order whether they send and receive here in one call, in pieces, or by Send and Recv.
  const size_t elem = DTypeSize(dtype);
  std::vector<MPI_Request> requests;
  TRAINER_RETURN_IF_ERROR(InPieces(recv_count, most_per_message_, [&](size_t at, size_t n) {
    requests.emplace_back();
    MPI_CHECK(MPI_Irecv(static_cast<char*>(recv) + at * elem, static_cast<int>(n), ToMpi(dtype),
                        recv_peer, 0, comm_, &requests.back()));
    return Status::Ok();
  }));
  TRAINER_RETURN_IF_ERROR(InPieces(send_count, most_per_message_, [&](size_t at, size_t n) {
    requests.emplace_back();
    MPI_CHECK(MPI_Isend(static_cast<const char*>(send) + at * elem, static_cast<int>(n),
                        ToMpi(dtype), send_peer, 0, comm_, &requests.back()));
    return Status::Ok();
  }));
  MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  return Status::Ok();
}

Status MpiCommunicator::AllToAllV(const void* send, const int64_t* send_counts,
                                  const int64_t* send_displs, void* recv,
                                  const int64_t* recv_counts, const int64_t* recv_displs,
                                  DType dtype) {
  // MPI's counts and displacements are int: each must fit, on every rank (the counts differ
  // between ranks, so the ranks agree first rather than leave the others in the collective).
  std::vector<int> ints(4 * static_cast<size_t>(size_));
  const int64_t* from[4] = {send_counts, send_displs, recv_counts, recv_displs};
  Status fits;
  for (int a = 0; a < 4 && fits.ok(); ++a)
    for (int p = 0; p < size_ && fits.ok(); ++p) {
      fits = CheckCount(static_cast<size_t>(from[a][p]), name_);
      ints[a * size_ + p] = static_cast<int>(from[a][p]);
    }
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(this, fits));
  const MPI_Datatype type = ToMpi(dtype);
  MPI_CHECK(MPI_Alltoallv(send, ints.data(), ints.data() + size_, type, recv,
                          ints.data() + 2 * size_, ints.data() + 3 * size_, type, comm_));
  return Status::Ok();
}

Status MpiCommunicator::AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) {
  TRAINER_RETURN_IF_ERROR(CheckCount(per_peer, name_));
  MPI_CHECK(MPI_Alltoall(send, static_cast<int>(per_peer), MPI_INT64_T, recv,
                         static_cast<int>(per_peer), MPI_INT64_T, comm_));
  return Status::Ok();
}

Status MpiCommunicator::Barrier() {
  MPI_CHECK(MPI_Barrier(comm_));
  return Status::Ok();
}

Status MpiRuntime::Init(int* argc, char*** argv, std::unique_ptr<MpiRuntime>* out) {
  std::unique_ptr<MpiRuntime> rt(new MpiRuntime());
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as codes (turned into Status), not as aborts inside MPI.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rt->rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &rt->size_));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  rt->host_ = host;
  SetProcessIdentity({rt->rank_, rt->size_, rt->host_});

  MPI_Comm local;
  MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &rt->local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &rt->local_size_));
  MPI_Comm_free(&local);

  std::vector<char> names(static_cast<size_t>(rt->size_) * 256);
  MPI_CHECK(MPI_Allgather(host, 256, MPI_CHAR, names.data(), 256, MPI_CHAR, MPI_COMM_WORLD));
  rt->local_ranks_.resize(rt->size_);
  MPI_CHECK(MPI_Allgather(&rt->local_rank_, 1, MPI_INT, rt->local_ranks_.data(), 1, MPI_INT,
                          MPI_COMM_WORLD));
  for (int r = 0; r < rt->size_; ++r) rt->hosts_.emplace_back(&names[static_cast<size_t>(r) * 256]);
  // The ranks of this host that see the same GPUs, in rank order.
  char visible[256] = {0};
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"))
    std::snprintf(visible, sizeof(visible), "=%s", cvd);  // "" (unset) differs from "=" (empty)
  std::vector<char> sets(static_cast<size_t>(rt->size_) * 256);
  MPI_CHECK(MPI_Allgather(visible, 256, MPI_CHAR, sets.data(), 256, MPI_CHAR, MPI_COMM_WORLD));
  rt->gpu_peers_ = 0;
  for (int r = 0; r < rt->size_; ++r) {
    if (rt->hosts_[r] != rt->host_ || std::strcmp(&sets[static_cast<size_t>(r) * 256], visible))
      continue;
    if (r < rt->rank_) ++rt->gpu_peer_rank_;
    ++rt->gpu_peers_;
  }
  rt->world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
  *out = std::move(rt);
  return Status::Ok();
}

MpiRuntime::~MpiRuntime() {
  Finalize();
}

Status MpiRuntime::Agree(const Status& local, bool* should_print) {
  return AgreeOnStatus(world_.get(), local, should_print);
}

Status MpiRuntime::MakeGroups(const Topology& topo, ProcessGroups* out) {
  out->topology = topo;
  out->coord = topo.CoordOf(rank_);
  const Topology::Coord c = out->coord;
  auto split = [&](int color, int key, const char* name, std::unique_ptr<MpiCommunicator>* g) {
    MPI_Comm comm;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
    if (rc != MPI_SUCCESS) return rc;
    if (comm != MPI_COMM_NULL) *g = std::make_unique<MpiCommunicator>(comm, name, true);
    return MPI_SUCCESS;
  };
  // Same (dp, pp): TP group; same (tp, pp): DP group; same (tp, dp): PP group.
  MPI_CHECK(split(c.dp + topo.dp * c.pp, c.tp, "tp", &out->tp));
  MPI_CHECK(split(c.tp + topo.tp * c.pp, c.dp, "dp", &out->dp));
  MPI_CHECK(split(c.tp + topo.tp * c.dp, c.pp, "pp", &out->pp));
  // The sharding group (same tp, replica, pp), the replica group (same tp, shard, pp) and its
  // EP and expert-DP parts, from the order string's dimensions.
  int color = 0, key = 0;
  topo.Group(rank_, kDimSharding, &color, &key);
  MPI_CHECK(split(color, key, "sharding", &out->sharding));
  topo.Group(rank_, kDimReplica, &color, &key);
  MPI_CHECK(split(color, key, "replica", &out->replica));
  topo.Group(rank_, kDimEp, &color, &key);
  MPI_CHECK(split(color, key, "ep", &out->ep));
  topo.Group(rank_, kDimExpertDp, &color, &key);
  MPI_CHECK(split(color, key, "expert_dp", &out->expert_dp));
  const bool ends = topo.pp > 1 && (c.pp == 0 || c.pp == topo.pp - 1);
  MPI_CHECK(
      split(ends ? c.tp + topo.tp * c.dp : MPI_UNDEFINED, c.pp, "embedding", &out->embedding));
  return Status::Ok();
}

void MpiRuntime::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void MpiRuntime::Finalize() {
  if (finalized_) return;
  finalized_ = true;
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace trainer
