// Saving checkpoints (checkpoint.h): gather to rank 0, atomic commit, retention.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_layout.h"
#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {
namespace {

std::string StepFolderName(int64_t step) {
  return StrFormat("step-%08lld", static_cast<long long>(step));
}

std::string LayoutString(const Topology& t) {
  return StrFormat("dp=%d tp=%d pp=%d ep=%d", t.dp, t.tp, t.pp, t.ep);
}

// Test hook: TRAINER_FAULT_CHECKPOINT_WRITE=<k> makes the k-th tensor write fail as a full disk
// would (for tests on machines without a small file system to fill).
bool InjectedWriteFault(int tensor_index) {
  const char* v = std::getenv("TRAINER_FAULT_CHECKPOINT_WRITE");
  return v != nullptr && std::atoi(v) == tensor_index;
}

// Rank 0's side: open the file and write attributes.
Status CreateCheckpointFile(const std::string& file, const CheckpointWriteRequest& r,
                            const ModelConfig& model, const Topology& topo, Hdf5Handle* handle) {
  SilenceHdf5Errors();
  if (!handle->valid() &&
      handle->Reset(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose) < 0)
    return CheckpointError(
        StrFormat("cannot create checkpoint file %s: %s. Check that "
                  "Checkpoint.dir is writable and has free space",
                  file.c_str(), Hdf5ErrorText().c_str()));
  const hid_t f = handle->get();
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "format_version", kCheckpointFormatVersion));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "step", r.step));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "consumed_samples", r.consumed_samples));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "tokens_seen", r.tokens_seen));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "seed", static_cast<int64_t>(r.seed)));
  // The run draws no random numbers after initialisation (no dropout; the data order is a pure
  // function of seed and position), so (seed, consumed_samples) is the whole RNG state.
  TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "rng_state", "seed+consumed_samples"));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "config", r.config_text));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(f, "layout", LayoutString(topo)));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "world_size", topo.world_size));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "hidden_size", model.hidden_size));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "num_layers", model.num_layers));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "num_heads", model.num_heads));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "vocab_size", model.vocab_size));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "padded_vocab_size", model.padded_vocab()));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "ffn_hidden_size", model.ffn_size()));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(f, "max_seq_len", model.max_seq_len));
  return Status::Ok();
}

// Commit on rank 0: close, fsync, rename the folder, replace `latest`, apply retention.
Status Commit(const CheckpointWriteRequest& r, Hdf5Handle* file, const std::string& tmp_dir,
              const std::string& final_dir) {
  if (file->Close() < 0)
    return CheckpointError(
        StrFormat("closing %s/checkpoint.h5 failed: %s (disk full?). The "
                  "previous checkpoint is intact",
                  tmp_dir.c_str(), Hdf5ErrorText().c_str()));
  Status s = SyncPath(tmp_dir + "/checkpoint.h5");
  if (s.ok()) s = SyncPath(tmp_dir);
  if (s.ok() && PathExists(final_dir)) s = RemoveTree(final_dir);  // a re-save of the same step
  if (s.ok()) s = RenameDurably(tmp_dir, final_dir);
  if (s.ok()) s = WriteFileAtomically(r.directory + "/latest", StepFolderName(r.step) + "\n");
  if (!s.ok()) return CheckpointError(s.message() + ". The previous checkpoint is intact");
  // Retention, only now that the new one is committed.
  std::vector<std::string> committed = CommittedCheckpoints(r.directory);
  for (size_t i = 0; i < committed.size(); ++i) {
    const int64_t step = std::atoll(committed[i].c_str() + committed[i].rfind('-') + 1);
    const bool recent = r.keep_last <= 0 || static_cast<int>(i) < r.keep_last;
    const bool milestone = r.keep_every > 0 && step % r.keep_every == 0;
    if (!recent && !milestone) TRAINER_RETURN_IF_ERROR(RemoveTree(committed[i]));
  }
  return Status::Ok();
}

}  // namespace

Status SaveCheckpointCollective(const CheckpointWriteRequest& r, GptModel* model, AdamW* optimizer,
                                const ParallelGroups& groups, CheckpointSaveReport* report) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& mc = model->config();
  DistributedConfig dist;
  dist.tp_degree = groups.topology.tp;
  dist.pp_degree = groups.topology.pp;
  dist.dp_degree = groups.topology.dp;
  dist.pp_layers = r.stage_layers;
  std::vector<float> state[kStateCount];
  for (int w = 0; w < kStateCount; ++w) TRAINER_RETURN_IF_ERROR(optimizer->Download(w, &state[w]));

  const bool is_root = groups.world_rank == 0;
  const std::string final_dir = r.directory + "/" + StepFolderName(r.step);
  const std::string tmp_dir = final_dir + ".tmp";
  Status write_status;
  Hdf5Handle file;
  if (is_root) {
    write_status = MakeDirectories(r.directory);
    if (write_status.ok() && PathExists(tmp_dir)) write_status = RemoveTree(tmp_dir);
    if (write_status.ok()) write_status = MakeDirectories(tmp_dir);
    if (write_status.ok())
      write_status =
          CreateCheckpointFile(tmp_dir + "/checkpoint.h5", r, mc, groups.topology, &file);
    if (!write_status.ok() && write_status.code() != ExitCode::kCheckpoint)
      write_status = CheckpointError(write_status.message());
  }
  const std::vector<ParameterInfo> full_list = FullParameterList(mc);
  std::vector<float> full, shard;
  int tensor_index = 0;
  for (const ParameterInfo& fp : full_list) {
    const std::vector<int> holders = CanonicalHolders(fp, mc, dist, groups.topology);
    const ParameterInfo* mine = model->Find(fp.name);
    const bool i_hold = mine != nullptr && mine->canonical && groups.coord.dp == 0;
    for (int w = 0; w < kStateCount; ++w) {
      if (i_hold && !is_root) {
        TRAINER_RETURN_IF_ERROR(groups.world_host->Send(state[w].data() + mine->offset,
                                                        static_cast<size_t>(mine->local_numel()),
                                                        DType::kF32, 0));
        continue;
      }
      if (!is_root) continue;
      full.assign(static_cast<size_t>(fp.full_numel()), 0.f);
      for (size_t t = 0; t < holders.size(); ++t) {
        ParameterInfo shard_info = fp;
        shard_info.shard = holders.size() == 1 ? ShardKind::kReplicated : fp.shard;
        const size_t n =
            static_cast<size_t>(fp.full_numel() / static_cast<int64_t>(holders.size()));
        const float* src = nullptr;
        if (holders[t] == 0) {
          src = state[w].data() + mine->offset;
        } else {
          shard.resize(n);
          TRAINER_RETURN_IF_ERROR(
              groups.world_host->Recv(shard.data(), n, DType::kF32, holders[t]));
          src = shard.data();
        }
        InsertShard(shard_info, static_cast<int>(t), static_cast<int>(holders.size()), src,
                    full.data());
      }
      if (!write_status.ok()) continue;  // keep receiving so that no sender hangs
      if (InjectedWriteFault(tensor_index)) {
        write_status = CheckpointError(
            StrFormat("writing %s to %s failed: No space left on device (injected by "
                      "TRAINER_FAULT_CHECKPOINT_WRITE). The previous checkpoint is intact",
                      fp.name.c_str(), tmp_dir.c_str()));
        continue;
      }
      Status s = WriteTensor(file.get(), std::string(StateGroup(w)) + "/" + fp.name, fp.full_shape,
                             full.data());
      if (!s.ok())
        write_status =
            CheckpointError(StrFormat("writing %s to %s failed: %s. The previous "
                                      "checkpoint is intact; free space or fix "
                                      "permissions on Checkpoint.dir",
                                      fp.name.c_str(), tmp_dir.c_str(), s.message().c_str()));
      ++tensor_index;
    }
  }
  if (is_root && write_status.ok()) write_status = Commit(r, &file, tmp_dir, final_dir);
  if (is_root && !write_status.ok()) {
    file.Close();
    RemoveTree(tmp_dir);  // best effort; a leftover .tmp is also cleaned at the next start
  }
  int code = write_status.exit_code();
  TRAINER_RETURN_IF_ERROR(groups.world_host->Broadcast(&code, 1, DType::kI32, 0));
  if (code != 0) return is_root ? write_status : Status(static_cast<ExitCode>(code), "");
  report->path = final_dir;
  report->bytes = is_root ? FileSize(final_dir + "/checkpoint.h5") : 0;
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

Status RemoveIncompleteCheckpoints(const std::string& directory) {
  if (!IsDirectory(directory)) return Status::Ok();
  auto names = ListDirectory(directory);
  if (!names.ok()) return names.status();
  for (const std::string& name : names.value()) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      LogWarning(StrFormat("removing incomplete checkpoint %s/%s left by an interrupted save",
                           directory.c_str(), name.c_str()));
      TRAINER_RETURN_IF_ERROR(RemoveTree(directory + "/" + name));
    }
  }
  return Status::Ok();
}

}  // namespace trainer
