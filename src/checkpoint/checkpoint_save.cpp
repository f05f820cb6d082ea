// Saving checkpoints (checkpoint.h): gather to rank 0, atomic commit, retention, cleanup of
// interrupted saves. A failed save ends with one line naming the path, the system's reason and
// what to do; the last committed checkpoint is never touched before the new one is committed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_layout.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"

namespace trainer {
namespace {

std::string LayoutString(const Topology& t) {
  return StrFormat("dp=%d tp=%d pp=%d ep=%d", t.dp, t.tp, t.pp, t.ep);
}

// One line per world rank: the random generator state it would need to resume. The run draws no
// random numbers after initialisation (no dropout; the data order is a pure function of the seed
// and consumed_samples), so every rank's state is empty; the manifest says so rank by rank.
std::string RngStates(const Topology& t) {
  std::string lines;
  for (int r = 0; r < t.world_size; ++r)
    lines += StrFormat("rank %d (%s): none\n", r, t.Describe(r).c_str());
  return lines;
}

// The system error number inside an HDF5 error text ("... errno = 28, error message = ..."),
// or 0 when HDF5 did not report one.
int Hdf5Errno(const std::string& text) {
  const size_t at = text.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 8);
}

// What to do about a save that failed with `error_number`.
std::string SaveAdvice(int error_number, const std::string& dir) {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
      return "Free space in " + dir + " or set Checkpoint.dir to a larger file system";
    case EROFS:
    case EACCES:
    case EPERM:
      return "Make " + dir + " writable or set Checkpoint.dir to a writable folder";
    case ENOENT:
    case ESTALE:
      return dir +
             " (or its step folder) was removed: recreate it, keep it in place while training, "
             "or set Checkpoint.dir to an existing folder";
    default:
      return "Check " + dir + " (Checkpoint.dir) and its file system";
  }
}

// Test hook: TRAINER_FAULT_CHECKPOINT_WRITE=<k> makes the k-th tensor write fail as a full disk
// would (for tests on machines where no small file system can be mounted).
bool InjectedWriteFault(int tensor_index) {
  const char* v = std::getenv("TRAINER_FAULT_CHECKPOINT_WRITE");
  return v != nullptr && std::atoi(v) == tensor_index;
}


// Rank 0's side of one save: the folders, the open file, and the first error.
class SaveOnRoot {
 public:
  // write_behind (background saves): the file's data goes to disk as it is written (fdatasync
  // after each slab, outside HDF5), so that the page cache never holds enough dirty pages for the
  // kernel to throttle a write while it holds HDF5's lock, which the training data's reads wait
  // for. The total I/O is the same: the commit fsyncs the whole file anyway.
  SaveOnRoot(const CheckpointWriteRequest& r, const Topology& topo, bool write_behind = false)
      : r_(r), topo_(topo), write_behind_(write_behind) {
    final_dir_ = r.directory + "/" + CheckpointFolderName(r.step);
    tmp_dir_ = final_dir_ + ".tmp";
    const std::string latest = LatestCheckpointName(r.directory);
    previous_ = latest.empty() ? "" : r.directory + "/" + latest;
  }
  ~SaveOnRoot() { CloseFlushFile(); }
  SaveOnRoot(const SaveOnRoot&) = delete;
  SaveOnRoot& operator=(const SaveOnRoot&) = delete;
  const std::string& final_dir() const { return final_dir_; }
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

  void Begin(const ModelConfig& model, int tensor_count) {
    errno = 0;
    // The folder removed or replaced since the run locked it: not made again (another run may
    // have taken it meanwhile, and this one's checkpoints are gone from it).
    if (r_.lock != nullptr && !r_.lock->StillInPlace()) {
      const ProcessIdentity& id = GetProcessIdentity();
      status_ = CheckpointError(StrFormat(
          "saving checkpoint step %lld failed (%s/.lock, Checkpoint.dir, rank %d on %s): the "
          "run's lock file is gone or replaced, so the folder was removed or replaced during the "
          "run (with the checkpoints it held), and another run may hold it now. This run stops "
          "rather than make it again: restore the folder, or give the run a Checkpoint.dir of "
          "its own, and resume",
          static_cast<long long>(r_.step), r_.directory.c_str(), id.rank, id.host.c_str()));
      return;
    }
    if (Try(MakeDirectories(r_.directory), r_.directory) &&
        (!PathExists(tmp_dir_) || Try(RemoveTree(tmp_dir_), tmp_dir_)) &&
        Try(MakeDirectories(tmp_dir_), tmp_dir_))
      CreateFile(model, tensor_count);
  }

  void Write(int tensor_index, int state, const ParameterInfo& p, const float* full) {
    if (!ok()) return;
    const std::string path = std::string(StateGroup(state)) + "/" + p.name;
    ReportProgress(r_.progress, "writing a checkpoint");
    InjectedCheckpointDelay("TRAINER_FAULT_CHECKPOINT_SLOW");
    if (InjectedWriteFault(tensor_index)) {
      Fail(file_path() + ":" + path, ENOSPC,
           "No space left on device (injected by TRAINER_FAULT_CHECKPOINT_WRITE)");
      return;
    }
    std::function<void()> flush;
    if (flush_fd_ >= 0) flush = [this] { (void)fdatasync(flush_fd_); };
    Status s = WriteTensor(file_.get(), path, p.full_shape, full, flush);
    if (!s.ok()) FailHdf5(file_path() + ":" + path, s.message());
  }

  // Close, fsync, rename into place, replace `latest`, then apply retention.
  void Commit() {
    CloseFlushFile();
    if (!ok()) return;
    // A beat before and after each step: on a slow file system each flush, fsync and rename
    // may take long.
    auto beat = [this] { ReportProgress(r_.progress, "committing a checkpoint"); };
    beat();
    if (file_.Close() < 0) {
      FailHdf5(file_path(), Hdf5ErrorText());  // the final flush: a full disk often shows here
      return;
    }
    beat();  // the file's final flush is done
    errno = 0;
    // A GiB at a time, beating: a large synchronous save's data may still be in the page cache.
    if (!Try(SyncFileInRanges(file_path(), int64_t{1} << 30, beat), file_path())) return;
    beat();
    if (!Try(SyncPath(tmp_dir_), tmp_dir_)) return;
    beat();
    if (IsDirectory(final_dir_)) {
      // A re-save of a step (after resuming from an earlier one): replace the file atomically so
      // that step-N/ always holds a complete checkpoint.
      if (!Try(RenameDurably(file_path(), final_dir_ + "/checkpoint.h5"), final_dir_)) return;
      (void)RemoveTree(tmp_dir_);  // now empty; a leftover is removed at the next start
    } else if (!Try(RenameDurably(tmp_dir_, final_dir_), final_dir_)) {
      return;
    }
    beat();
    if (!Try(WriteFileAtomically(r_.directory + "/latest", CheckpointFolderName(r_.step) + "\n"),
             r_.directory + "/latest"))
      return;
    beat();
    SetAsideAbandonedSteps();
    ApplyRetention();
  }

  // After a failure: close and remove the partial folder (best effort; the next start also does).
  void Abandon() {
    CloseFlushFile();
    file_.Close();
    if (PathExists(tmp_dir_)) (void)RemoveTree(tmp_dir_);
  }

 private:
  std::string file_path() const { return tmp_dir_ + "/checkpoint.h5"; }
  void CloseFlushFile() {
    if (flush_fd_ >= 0) close(flush_fd_);
    flush_fd_ = -1;
  }

  // Records the first failure as one line: where, the system's reason, what to do.
  void Fail(const std::string& where, int error_number, const std::string& why) {
    if (!ok()) return;
    const ProcessIdentity& id = GetProcessIdentity();
    const std::string previous = previous_.empty()
                                     ? "no checkpoint had been committed yet"
                                     : "the last committed checkpoint (" + previous_ +
                                           ") is intact, resume from it with --resume auto";
    status_ = CheckpointError(StrFormat(
        "saving checkpoint step %lld failed (%s, Checkpoint.dir, rank %d on %s): %s. %s; %s",
        static_cast<long long>(r_.step), where.c_str(), id.rank, id.host.c_str(), why.c_str(),
        SaveAdvice(error_number, r_.directory).c_str(), previous.c_str()));
  }
  // A file-system helper's result; errno still holds its reason when it failed.
  bool Try(const Status& s, const std::string& where) {
    if (s.ok()) return true;
    const int error_number = errno;
    Fail(where, error_number, error_number != 0 ? std::strerror(error_number) : s.message());
    return false;
  }
  // `text` holds HDF5's error stack as it was at the failure (later calls clear it).
  void FailHdf5(const std::string& where, std::string text) {
    const int error_number = Hdf5Errno(text);
    for (char& c : text)
      if (c == '\n') c = ' ';
    Fail(where, error_number, error_number != 0 ? std::strerror(error_number) : text);
  }

  void CreateFile(const ModelConfig& model, int tensor_count) {
    SilenceHdf5Errors();
    // The 1.8 file format: HDF5 checksums its metadata (the superblock, the object headers that
    // hold the manifest's attributes), so a damaged attribute fails to read instead of loading
    // as another value. HDF5 1.8 and later (h5py) read it.
    Hdf5Handle access;
    if (access.Reset(H5Pcreate(H5P_FILE_ACCESS), H5Pclose) < 0 ||
        H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
        file_.Reset(H5Fcreate(file_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                    H5Fclose) < 0) {
      FailHdf5(file_path(), Hdf5ErrorText());
      return;
    }
    if (write_behind_) flush_fd_ = open(file_path().c_str(), O_RDONLY | O_CLOEXEC);  // -1: none
    Status s = WriteManifest(model, tensor_count);
    if (!s.ok()) FailHdf5(file_path(), s.message());
  }

  // Root attributes: the training state, the RNG states, the config and the writing layout.
  Status WriteManifest(const ModelConfig& model, int tensor_count) {
    const hid_t f = file_.get();
    const std::pair<const char*, int64_t> integers[] = {
        {"format_version", kCheckpointFormatVersion},
        {"step", r_.step},
        {"consumed_samples", r_.consumed_samples},
        {"tokens_seen", r_.tokens_seen},
        {"seed", static_cast<int64_t>(r_.seed)},
        {"world_size", topo_.world_size},
        {"tensor_count", tensor_count},
        {"hidden_size", model.hidden_size},
        {"num_layers", model.num_layers},
        {"num_heads", model.num_heads},
        {"vocab_size", model.vocab_size},
        {"padded_vocab_size", model.padded_vocab()},
        {"ffn_hidden_size", model.ffn_size()},
        {"max_seq_len", model.max_seq_len}};
    for (const auto& [name, value] : integers)
      TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, name, value));
    TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "rng_state", "seed+consumed_samples"));
    TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "rng_states", RngStates(topo_)));
    TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "config", r_.config_text));
    TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "layout", LayoutString(topo_)));
    if (r_.eod_id >= 0) {  // the training data's, for `trainer export`
      TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "eod_id", r_.eod_id));
      TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "tokenizer", r_.tokenizer));
    }
    if (!r_.gpu_routes.empty())  // Engine.gpu_routes can pin them in a resumed run
      TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "gpu_routes", r_.gpu_routes));
    if (!r_.lora_base.empty())
      TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "lora_base", r_.lora_base));
    return Hdf5WriteStringAttribute(f, "checksum", "crc32 (zlib) of each tensor's float32 bytes");
  }

  // Committed steps above the one just written come from a line of training that this run
  // left by resuming from an earlier step: renamed <step folder>.superseded (one warning), so
  // that neither retention nor a later --resume auto takes them for this run's checkpoints.
  // Runs after `latest` names the new step; a failed rename is a warning.
  void SetAsideAbandonedSteps() {
    std::string moved, failed;
    const std::vector<std::string> committed = CommittedCheckpoints(r_.directory);
    for (auto it = committed.rbegin(); it != committed.rend(); ++it) {  // oldest first
      const std::string& folder = *it;
      if (CheckpointFolderStep(folder) <= r_.step) continue;
      std::string aside;
      Status s = RenameStepFolderAside(folder, ".superseded", &aside);
      if (s.ok())
        moved += (moved.empty() ? "" : ", ") + aside.substr(aside.rfind('/') + 1);
      else
        failed += StrFormat("%s%s (%s)", failed.empty() ? "" : ", ", folder.c_str(),
                            s.message().c_str());
    }
    if (!moved.empty())
      LogWarning(StrFormat(
          "set aside %s in %s: newer than step %lld, which this run wrote after resuming from "
          "an earlier step, so they belong to the line of training it left. They are no longer "
          "checkpoints (retention and --resume auto skip them); rename one back to step-N to "
          "return to it, or remove them",
          moved.c_str(), r_.directory.c_str(), static_cast<long long>(r_.step)));
    if (!failed.empty())
      LogWarning(StrFormat("cannot set aside %s, newer than step %lld that this run wrote: "
                           "remove them by hand, or --resume auto may return to them",
                           failed.c_str(), static_cast<long long>(r_.step)));
  }

  // Keeps the newest keep_last (0: all) of the steps up to the new one, every multiple of
  // keep_every, and always the new one. Runs only after the new checkpoint is committed; a
  // failure to delete is a warning. Steps above the new one (left where they could not be set
  // aside) are neither counted nor removed.
  void ApplyRetention() {
    std::vector<std::string> committed = CommittedCheckpoints(r_.directory);
    committed.erase(std::remove_if(committed.begin(), committed.end(),
                                   [&](const std::string& c) { return CheckpointFolderStep(c) > r_.step; }),
                    committed.end());
    for (size_t i = 0; i < committed.size(); ++i) {
      const int64_t step = CheckpointFolderStep(committed[i]);
      const bool recent = r_.keep_last <= 0 || static_cast<int>(i) < r_.keep_last;
      const bool milestone = r_.keep_every > 0 && step % r_.keep_every == 0;
      if (recent || milestone || committed[i] == final_dir_) continue;
      // Renamed first, so that a half-removed step never looks committed to a reader (eval,
      // inspect, another run's init_from) resolving the folder's newest meanwhile.
      const std::string removing = committed[i] + ".removing";
      Status s = PathExists(removing) ? RemoveTree(removing) : Status::Ok();  // an earlier one's
      if (s.ok()) s = RenameDurably(committed[i], removing);
      if (s.ok()) s = RemoveTree(removing);
      if (!s.ok())
        LogWarning(
            StrFormat("cannot remove old checkpoint %s (Checkpoint.keep_last=%d): %s. It "
                      "stays on disk; remove it by hand",
                      committed[i].c_str(), r_.keep_last, s.message().c_str()));
    }
  }

  const CheckpointWriteRequest& r_;
  const Topology& topo_;
  std::string final_dir_, tmp_dir_, previous_;
  const bool write_behind_;
  int flush_fd_ = -1;
  Hdf5Handle file_;
  Status status_;
};

}  // namespace

std::string CheckpointFolderName(int64_t step) {
  return StrFormat("step-%08lld", static_cast<long long>(step));
}

namespace {

DistributedConfig SavingLayout(const CheckpointWriteRequest& r, const Topology& topo) {
  DistributedConfig dist;
  dist.tp_degree = topo.tp;
  dist.pp_degree = topo.pp;
  dist.dp_degree = topo.dp;
  dist.ep_degree = topo.ep;
  dist.pp_layers = r.stage_layers;
  return dist;
}

// The gather of one save, tensor by tensor in file order: the canonical holders (DP rank 0 of the
// stage, each TP rank) send their shards of `state` (this rank's host copy of the optimizer's
// flat buffers) to rank 0, which assembles the full tensor in dest(tensor_index, numel) and hands
// it to take(tensor_index, state, info, full). A tensor that rank 0 holds whole, in the full
// layout, is handed over from where it lies in `state`.
template <class Dest, class Take>
Status GatherTensors(const CheckpointWriteRequest& r, GptModel* model, const ParallelGroups& groups,
                     const float* const* state, Dest dest, Take take) {
  const ModelConfig& mc = model->config();
  const DistributedConfig dist = SavingLayout(r, groups.topology);
  const bool is_root = groups.world_rank == 0;
  std::vector<float> shard;
  int tensor_index = 0;
  for (const ParameterInfo& fp : FullParameterList(mc)) {
    const std::vector<int> holders = CanonicalHolders(fp, mc, dist, groups.topology);
    const ParameterInfo* mine = model->Find(fp.name);
    // DP rank 0 holds each canonical tensor; sharding rank 0 of replica i < ep (the first EP
    // group) the experts of EP rank i.
    const bool expert = fp.shard == ShardKind::kSplitExperts;
    const bool i_hold = mine != nullptr && mine->canonical && groups.coord.shard == 0 &&
                        groups.coord.replica == (expert ? groups.coord.ep : 0);
    for (int w = 0; w < kStateCount; ++w, ++tensor_index) {
      ReportProgress(r.progress, "gathering a checkpoint");
      if (i_hold && !is_root) {
        // Rank 0 takes the tensors in order, writing each (a synchronous save): a holder of later
        // ones (a later pipeline stage) waits for its writes of the earlier ones, which it reports.
        AwaitRoot(r.progress, groups.world_rank, "rank 0's gathering and writing of a checkpoint");
        TRAINER_RETURN_IF_ERROR(groups.world_host->Send(state[w] + mine->offset,
                                                        static_cast<size_t>(mine->local_numel()),
                                                        DType::kF32, 0));
        continue;
      }
      if (!is_root) continue;
      if (holders.size() == 1 && holders[0] == 0 && mine != nullptr &&
          mine->local_numel() == fp.full_numel()) {
        take(tensor_index, w, fp, state[w] + mine->offset);
        continue;
      }
      float* full = dest(tensor_index, fp.full_numel());
      for (size_t t = 0; t < holders.size(); ++t) {
        ParameterInfo shard_info = fp;
        shard_info.shard = holders.size() == 1 ? ShardKind::kReplicated : fp.shard;
        const size_t n =
            static_cast<size_t>(fp.full_numel() / static_cast<int64_t>(holders.size()));
        const float* src = nullptr;
        if (holders[t] == 0) {
          src = state[w] + mine->offset;
        } else {
          // Keep receiving after a write error, so that no sender hangs.
          shard.resize(n);
          TRAINER_RETURN_IF_ERROR(
              groups.world_host->Recv(shard.data(), n, DType::kF32, holders[t]));
          src = shard.data();
        }
        InsertShard(shard_info, static_cast<int>(t), static_cast<int>(holders.size()), src, full);
      }
      take(tensor_index, w, fp, full);
    }
  }
  return Status::Ok();
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status SaveCheckpointCollective(const CheckpointWriteRequest& r, GptModel* model, AdamW* optimizer,
                                const ParallelGroups& groups, CheckpointSaveReport* report) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& mc = model->config();
  // A host copy of the state, or the state itself where it lives in host memory already (an
  // offloaded optimizer: 12 bytes per parameter that a copy would take again).
  std::vector<float> state[kStateCount];
  const float* state_data[kStateCount];
  for (int w = 0; w < kStateCount; ++w) {
    state_data[w] = optimizer->HostState(w);
    if (state_data[w] != nullptr) continue;
    TRAINER_RETURN_IF_ERROR(optimizer->Download(w, &state[w]));
    state_data[w] = state[w].data();
  }

  const bool is_root = groups.world_rank == 0;
  const std::vector<ParameterInfo> full_list = FullParameterList(mc);
  SaveOnRoot root(r, groups.topology);
  if (is_root) root.Begin(mc, static_cast<int>(full_list.size()) * kStateCount);

  // Rank 0 writes each tensor as soon as it is assembled, so that it holds at most one full
  // tensor: the buffer is sized once and never cleared (every element comes from a shard).
  std::vector<float> full;
  if (is_root) {
    int64_t largest = 0;
    for (const ParameterInfo& fp : full_list) largest = std::max(largest, fp.full_numel());
    full.resize(static_cast<size_t>(largest));
  }
  TRAINER_RETURN_IF_ERROR(GatherTensors(
      r, model, groups, state_data, [&](int, int64_t) { return full.data(); },
      [&](int index, int w, const ParameterInfo& fp, const float* values) {
        root.Write(index, w, fp, values);
      }));
  if (is_root) {
    root.Commit();
    if (!root.ok()) root.Abandon();
  }
  int code = is_root ? root.status().exit_code() : 0;
  AwaitRoot(r.progress, groups.world_rank, "rank 0's checkpoint write");
  TRAINER_RETURN_IF_ERROR(groups.world_host->Broadcast(&code, 1, DType::kI32, 0));
  if (code != 0) return is_root ? root.status() : Status(static_cast<ExitCode>(code), "");
  report->path = root.final_dir();
  report->bytes = is_root ? FileSize(root.final_dir() + "/checkpoint.h5") : 0;
  report->seconds = SecondsSince(start);
  return Status::Ok();
}

static_assert(sizeof(CheckpointSnapshot::state) / sizeof(SnapshotBuffer) == kStateCount);

Status GatherCheckpointCollective(const CheckpointWriteRequest& r, GptModel* model,
                                  AdamW* optimizer, const ParallelGroups& groups,
                                  CheckpointSnapshot* snapshot) {
  snapshot->request = r;
  snapshot->model = model->config();
  snapshot->topology = groups.topology;
  ReserveCheckpointSnapshot(model, *optimizer, groups.world_rank, snapshot);
  const float* state[kStateCount];
  for (int w = 0; w < kStateCount; ++w) {
    TRAINER_RETURN_IF_ERROR(optimizer->DownloadTo(w, snapshot->state[w].data()));
    state[w] = snapshot->state[w].data();
  }
  const size_t count = FullParameterList(snapshot->model).size() * kStateCount;
  snapshot->tensors.assign(groups.world_rank == 0 ? count : 0, nullptr);
  if (groups.world_rank == 0) snapshot->assembled.resize(count);
  // The buffers keep their size from one save to the next: no allocation (and no page faults)
  // after the first.
  return GatherTensors(
      r, model, groups, state,
      [snapshot](int index, int64_t numel) {
        std::vector<float>& buffer = snapshot->assembled[static_cast<size_t>(index)];
        buffer.resize(static_cast<size_t>(numel));
        return buffer.data();
      },
      [snapshot](int index, int, const ParameterInfo&, const float* values) {
        snapshot->tensors[static_cast<size_t>(index)] = values;
      });
}

Status WriteCheckpointSnapshot(const CheckpointSnapshot& snapshot, CheckpointSaveReport* report) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ParameterInfo> full_list = FullParameterList(snapshot.model);
  SaveOnRoot root(snapshot.request, snapshot.topology, /*write_behind=*/true);
  root.Begin(snapshot.model, static_cast<int>(snapshot.tensors.size()));
  int index = 0;
  for (const ParameterInfo& fp : full_list)
    for (int w = 0; w < kStateCount; ++w, ++index)
      root.Write(index, w, fp, snapshot.tensors[static_cast<size_t>(index)]);
  root.Commit();
  if (!root.ok()) {
    root.Abandon();
    return root.status();
  }
  report->path = root.final_dir();
  report->bytes = FileSize(root.final_dir() + "/checkpoint.h5");
  report->seconds = SecondsSince(start);
  return Status::Ok();
}

Status RemoveIncompleteCheckpoints(const std::string& directory) {
  if (!IsDirectory(directory)) return Status::Ok();
  auto names = ListDirectory(directory);
  if (!names.ok())
    return CheckpointError(names.status().message() + " (Checkpoint.dir). Check its permissions");
  for (const std::string& name : names.value()) {
    // Only what a save leaves: step-<digits>.tmp, latest.tmp, and a step-<digits>.removing whose
    // removal was cut short (other files are the user's).
    const auto step_with = [&name](const std::string& suffix) {
      return name.size() > 5 + suffix.size() && name.rfind("step-", 0) == 0 &&
             EndsWith(name, suffix) &&
             name.find_first_not_of("0123456789", 5) == name.size() - suffix.size();
    };
    const bool step_tmp = step_with(".tmp");
    if (!step_tmp && !step_with(".removing") && name != "latest.tmp") continue;
    if (step_tmp)
      LogWarning(StrFormat("removing incomplete checkpoint %s/%s left by an interrupted save",
                           directory.c_str(), name.c_str()));
    Status s = RemoveTree(directory + "/" + name);
    if (!s.ok())
      return CheckpointError(
          StrFormat("cannot remove the incomplete checkpoint %s/%s "
                    "(Checkpoint.dir): %s. Remove it by hand",
                    directory.c_str(), name.c_str(), s.message().c_str()));
  }
  return Status::Ok();
}

namespace {
// The newest committed step folder's name in `directory` ("step-00000010"), "" when none.
std::string NewestStepName(const std::string& directory) {
  const std::vector<std::string> committed = CommittedCheckpoints(directory);
  return committed.empty() ? "" : committed.front().substr(committed.front().rfind('/') + 1);
}
}  // namespace

Status CheckNoEarlierCheckpoints(const std::string& directory) {
  const std::string newest = NewestStepName(directory);
  if (newest.empty()) return Status::Ok();
  return CheckpointError(StrFormat(
      "checkpoint folder already holds checkpoints (%s, Checkpoint.dir; newest %s), and this run "
      "has no --resume: it would start over at step 0 and replace them. Continue that run with "
      "--resume auto, or give this one its own Checkpoint.dir (or Engine.output_dir), or remove "
      "the step folders",
      directory.c_str(), newest.c_str()));
}

Status CheckResumeFolder(const std::string& resume, const std::string& directory) {
  // A missing PATH: the resume names it, with the folders that exist.
  if (resume.empty() || resume == "auto" || !PathExists(resume)) return Status::Ok();
  std::error_code error;
  const std::filesystem::path folder =
      std::filesystem::weakly_canonical(std::filesystem::absolute(directory), error);
  const std::filesystem::path path =
      std::filesystem::weakly_canonical(std::filesystem::absolute(resume), error);
  if (error) return Status::Ok();
  const auto [inside, _] = std::mismatch(folder.begin(), folder.end(), path.begin(), path.end());
  if (inside == folder.end()) return Status::Ok();  // PATH is `directory` or below it
  const std::string newest = NewestStepName(directory);
  if (newest.empty()) return Status::Ok();
  return CheckpointError(StrFormat(
      "--resume %s is a checkpoint of another folder, and Checkpoint.dir (%s) holds checkpoints "
      "of its own (newest %s): this run would write its steps among them. Give it a "
      "Checkpoint.dir (or Engine.output_dir) of its own to branch from %s, or resume that "
      "folder's run with --resume auto",
      resume.c_str(), directory.c_str(), newest.c_str(), resume.c_str()));
}

}  // namespace trainer
