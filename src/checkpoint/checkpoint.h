// Checkpoints: one HDF5 file per step with full (unsharded) fp32 tensors under nanoGPT names
// (/model/<name>, /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>), each chunked with HDF5's
// Fletcher32 checksum filter and carrying a `crc32` attribute (CRC-32 of the whole tensor, as
// zlib computes it), and root attributes (the manifest) for the training state, every rank's RNG
// state, the resolved config and the layout it was written from (docs/checkpoint-format.md).
//
// Save: every rank sends its canonical shards, tensor by tensor, to world rank 0 (memory bounded
// by one full tensor), which writes step-N.tmp/checkpoint.h5, fsyncs the file and the folder,
// renames the folder to step-N/, then atomically replaces `latest` (write, fsync, rename), and only
// then sets aside the step folders above N (step-M.superseded: a line of training that a resume
// from an earlier step left) and applies retention. Asynchronous saves (checkpoint_async.h) split this in two: the gather
// into host memory (GatherCheckpointCollective) and rank 0's write and commit
// (WriteCheckpointSnapshot), which may run on another thread. Load: rank 0 verifies every checksum
// of the chosen checkpoint (falling back to the previous one under --resume auto), then every rank
// reads only its own slices by hyperslab, so any layout resumes any checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/filesystem.h"
#include "common/parallel_groups.h"
#include "common/progress.h"
#include "config/train_config.h"
#include "optimizer/adamw.h"

namespace trainer {

// 2 added the per-tensor `crc32` attributes and `tensor_count`; version 1 files still load
// (verified by their Fletcher32 chunk checksums alone).
constexpr int kCheckpointFormatVersion = 2;

struct CheckpointWriteRequest {
  std::string directory;  // Checkpoint.dir
  int64_t step = 0;
  int64_t consumed_samples = 0;
  int64_t tokens_seen = 0;
  uint64_t seed = 0;
  std::string config_text;  // FormatConfig(config)
  int keep_last = 0;
  int keep_every = 0;
  // Told of each tensor gathered and written, and of rank 0's commit (nullptr: nobody watches).
  Progress* progress = nullptr;
  std::vector<int> stage_layers;  // blocks per pipeline stage of the writing layout
  // The training data's tokenizer and end-of-document id (`trainer export`'s eos_token_id);
  // not recorded when eod_id < 0.
  int64_t eod_id = -1;
  std::string tokenizer;
  // The GPU routes the run took (route_table.h's file format, one line); empty: none (CPU).
  std::string gpu_routes;
  // LoRA: the base model the adapters apply to (Checkpoint.init_from, or the seed's
  // initialisation); the file holds the adapters only. Empty without LoRA.
  std::string lora_base;
  // Rank 0: the run's lock on `directory` (null where the file system keeps none). A save fails
  // where it is no longer in place: the folder was removed or replaced, and another run may hold
  // it.
  const FileLock* lock = nullptr;
};

struct CheckpointSaveReport {
  std::string path;
  long long bytes = 0;
  double seconds = 0;
};

struct CheckpointLoadResult {
  std::string path;  // the folder loaded, empty when starting from scratch
  int64_t step = 0;
  int64_t consumed_samples = 0;
  int64_t tokens_seen = 0;
  std::string config_text;  // the resolved config the checkpoint was saved with
};

// Collective over the world. Errors (disk full, permissions) reach every rank; the last committed
// checkpoint is never touched before the new one is committed.
Status SaveCheckpointCollective(const CheckpointWriteRequest& request, GptModel* model,
                                AdamW* optimizer, const ParallelGroups& groups,
                                CheckpointSaveReport* report);

// Host memory for one optimizer buffer's copy (AdamW::DownloadTo): page-locked through the
// model's backend (Backend::AllocateHost) so that a GPU copies into it at full speed, ordinary
// memory where the host refuses to lock that much. Kept from one save to the next.
class SnapshotBuffer {
 public:
  SnapshotBuffer() = default;
  ~SnapshotBuffer();
  SnapshotBuffer(const SnapshotBuffer&) = delete;
  SnapshotBuffer& operator=(const SnapshotBuffer&) = delete;
  // Holds at least `elements` floats afterwards. A refused page-locked allocation falls back to
  // ordinary memory and is reported in *refusal (otherwise left as it is).
  void Reserve(Backend* backend, size_t elements, std::string* refusal);
  float* data() { return locked_ != nullptr ? locked_ : ordinary_.data(); }
  const float* data() const { return locked_ != nullptr ? locked_ : ordinary_.data(); }
  size_t size() const { return size_; }
  bool page_locked() const { return locked_ != nullptr; }

 private:
  Backend* backend_ = nullptr;
  float* locked_ = nullptr;
  std::vector<float> ordinary_;
  size_t size_ = 0;
};

// A save's content in host memory, for asynchronous saves: this rank's copy of its optimizer
// state and, on rank 0, where each full tensor of the file lies (in `state`, or assembled from
// the other ranks' shards in `assembled`). The buffers keep their size from one save to the next.
struct CheckpointSnapshot {
  CheckpointWriteRequest request;
  ModelConfig model;
  Topology topology;
  SnapshotBuffer state[3];                    // master weights, exp_avg, exp_avg_sq
  std::vector<std::vector<float>> assembled;  // rank 0: by tensor index, those it assembled
  std::vector<const float*> tensors;          // rank 0: each tensor's values, in file order
};

// Collective over the world: the first half of SaveCheckpointCollective. Every rank copies its
// state to host memory and sends its canonical shards to rank 0, which keeps every full tensor
// (12 bytes per parameter) in `snapshot`. Training may change the model and optimizer afterwards.
Status GatherCheckpointCollective(const CheckpointWriteRequest& request, GptModel* model,
                                  AdamW* optimizer, const ParallelGroups& groups,
                                  CheckpointSnapshot* snapshot);
// Sizes `snapshot`'s state buffers for this rank's optimizer (GatherCheckpointCollective does it
// at the first save; the trainer does it at start, so that the first save does not wait for the
// allocation). A refused page-locked allocation: a warning from world rank 0 naming the fallback.
void ReserveCheckpointSnapshot(GptModel* model, const AdamW& optimizer, int world_rank,
                               CheckpointSnapshot* snapshot);
// Rank 0, on any thread (no communication): the second half. Writes `snapshot` to step-N.tmp,
// commits it atomically and applies retention, as SaveCheckpointCollective does; a failure is the
// same one-line checkpoint error, and leaves the last committed checkpoint as it was.
Status WriteCheckpointSnapshot(const CheckpointSnapshot& snapshot, CheckpointSaveReport* report);

// resume: "auto" (Checkpoint.dir's newest committed checkpoint that verifies: the one `latest`
// names, else the newest older one; none found means a fresh start), a checkpoint folder (the
// same in it), or a step folder or its file. Under "auto" (or the run's own Checkpoint.dir
// named), step folders that fail verification are renamed <step folder>.damaged, so that
// retention never keeps them in place of good ones, and `latest` is pointed at the checkpoint
// loaded.
// `progress` (optional) is told of each tensor verified on rank 0 and read on every rank.
Status LoadCheckpointCollective(const std::string& directory, const std::string& resume,
                                const TrainConfig& config, GptModel* model, AdamW* optimizer,
                                const ParallelGroups& groups, CheckpointLoadResult* result,
                                Progress* progress = nullptr);

// Rank 0 at start: report and remove step-<digits>.tmp folders left by a crash (and a stray
// latest.tmp); nothing else in the folder is touched.
Status RemoveIncompleteCheckpoints(const std::string& directory);

// Rank 0 at the start of a fresh run (no --resume): a checkpoint error naming `directory`, its
// newest checkpoint and the fix when it already holds committed checkpoints (the run would
// start over at step 0, move `latest` and, through retention, remove the older run's steps).
Status CheckNoEarlierCheckpoints(const std::string& directory);
// Rank 0 at the start of a run with --resume PATH: a checkpoint error when PATH lies outside
// `directory` (a step of another run's folder) while `directory` holds committed checkpoints:
// the run would write its steps among another line of training's. Resuming another folder's
// step into an empty `directory` (a branch of that run) is fine; "auto" always is.
Status CheckResumeFolder(const std::string& resume, const std::string& directory);

// Rank 0 at start, before anything else touches the folder: creates `directory` and takes its
// lock (<directory>/.lock) for the whole run, so that two runs never write one checkpoint folder
// (their saves and retention would remove each other's checkpoints). A lock held by another run
// is a checkpoint error naming the holder (host, pid, Slurm job, since when). A holder from an
// earlier run of this Slurm job (requeued after a node failure: an NFS lock outlives its process
// until the server's lease ends) is waited for, up to `wait_s` seconds. Where the folder cannot
// be made or written: a checkpoint error, before step 1. Where its file system keeps no locks: a
// warning, *lock stays empty, and the run goes on. `progress` (optional) hears of each retry.
Status LockCheckpointDirectory(const std::string& directory, double wait_s,
                               std::unique_ptr<FileLock>* lock, Progress* progress = nullptr);
// The same lock on Engine.output_dir (where it is not Checkpoint.dir): two runs there would
// interleave their metrics.jsonl and TensorBoard events.
Status LockOutputDirectory(const std::string& directory, double wait_s,
                           std::unique_ptr<FileLock>* lock, Progress* progress = nullptr);
// Who holds `directory`'s lock ("host node1, pid 1234, Slurm job 77, since ..."), "" when no run
// does; asked without taking it (`trainer inspect`).
std::string CheckpointDirectoryHolder(const std::string& directory);

// ---- single-process helpers (also used by `trainer inspect`) ----
struct CheckpointSummary {
  int format_version = 0;
  int64_t step = 0, consumed_samples = 0, tokens_seen = 0;
  uint64_t seed = 0;
  std::string layout;  // "dp=2 tp=2 pp=2"
  std::string config_text;
  int64_t eod_id = -1;    // the training data's end-of-document id; -1: not recorded
  std::string tokenizer;  // the training data's tokenizer ("bytes", "gpt2", ...); "": not recorded
  std::string lora_base;  // LoRA: the base model its adapters apply to; "": not a LoRA checkpoint
  struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<TensorInfo> tensors;  // under /model
};
// The weights of a checkpoint (a step folder or its checkpoint.h5) into `model`, this process's
// slices of them, after checking the file's model shape against `config` (`trainer sample`);
// LoRA: the adapters, and the frozen base that `config` names (LoadLoraBaseWeights).
Status LoadCheckpointWeights(const std::string& folder_or_file, const TrainConfig& config,
                             GptModel* model);
// The slices that `part` holds of a checkpoint's weights into `flat`, in the buffer order of
// `params` (this rank's list, or FullParameterList's for whole tensors), after checking the
// file's model shape against `config`. `progress` (optional) is told of each tensor read.
Status ReadCheckpointWeights(const std::string& folder_or_file, const ModelConfig& config,
                             const std::vector<ParameterInfo>& params, const ModelPartition& part,
                             std::vector<float>* flat, Progress* progress = nullptr);
// The checks ReadCheckpointWeights makes before reading, for the whole model (`trainer inspect`):
// the file's weights fit `config`'s model, tensor by tensor.
Status CheckCheckpointWeightsFit(const std::string& folder_or_file, const ModelConfig& config);
// LoRA (`config` trains adapters): the base that the checkpoint's adapters were trained on (its
// `lora_base`) is the one `config` names now (LoraBaseIdentity: the same resolved file, step and
// size, or the same seed); else one error naming both. ok for a checkpoint without adapters.
// Resume, `trainer eval`, `sample` and `export --lora` check it before loading the base.
Status CheckLoraBase(const std::string& folder_or_file, const TrainConfig& config);
// Reads the attributes and tensor shapes of `file` (a checkpoint.h5).
Status ReadCheckpointSummary(const std::string& file, CheckpointSummary* summary);
// Reads every tensor (one at a time) and checks its Fletcher32 chunk checksums, its CRC-32
// attribute and the tensor count, so that a flipped bit or a truncation shows. ok when it verifies.
// `progress` (optional) is told of each tensor.
Status VerifyCheckpoint(const std::string& file, Progress* progress = nullptr);
// The checkpoint file inside a step folder (or the path itself when it is a file).
std::string CheckpointFile(const std::string& folder_or_file);
// What an HDF5 file holds by its content: a checkpoint (the manifest's step attribute), a
// packed-token dataset (/tokens), or neither (not HDF5, unreadable, or something else).
enum class Hdf5FileKind { kCheckpoint, kDataset, kNeither };
Hdf5FileKind KindOfHdf5File(const std::string& file);
// A trainer checkpoint's weights in one number: the CRC-32 over every /model tensor's name and
// its stored CRC-32, in name order (attributes only: no tensor is read). Two files with the same
// weights give the same value wherever they lie. Fails for format version 1 files (no CRCs).
Status CheckpointWeightsChecksum(const std::string& file, uint32_t* crc);
// The checkpoint file that `path` names: a step folder's, the file itself, or a checkpoint
// directory's newest (NewestCheckpointFolder); "" when there is none.
std::string FindCheckpointFile(const std::string& path);
// A checkpoint directory's newest checkpoint: the step folder `latest` names; where `latest` is
// missing, the newest committed step folder, and where it names a folder that is gone, the
// newest below it; "" when there is none.
std::string NewestCheckpointFolder(const std::string& directory);
// The step of a step folder's path (".../step-00000300": 300).
int64_t CheckpointFolderStep(const std::string& folder);
// Renames `folder` to <folder><suffix> (or <folder><suffix>-2, ...: a free name, in *aside),
// durably, so that it is no longer a committed step folder.
Status RenameStepFolderAside(const std::string& folder, const std::string& suffix,
                             std::string* aside);
// "step-00000100": the folder name of a step's checkpoint (zero-padded, so names sort by step).
std::string CheckpointFolderName(int64_t step);
// Whether `name` is a committed step folder's ("step-" and digits only).
bool IsStepFolderName(const std::string& name);
// The step folder name `latest` holds in `directory` ("step-00000300"; a hand-written "step-300"
// as that), "" when there is none or it names no step folder (its text in *names_no_step, for
// WarnLatestNamesNoStep where one process speaks for the run).
std::string LatestCheckpointName(const std::string& directory,
                                 std::string* names_no_step = nullptr);
void WarnLatestNamesNoStep(const std::string& directory, const std::string& text);
// Committed step folders in `directory`, newest first.
std::vector<std::string> CommittedCheckpoints(const std::string& directory);

}  // namespace trainer
