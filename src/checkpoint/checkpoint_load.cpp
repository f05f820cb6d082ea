// Loading, verifying and summarising checkpoints (checkpoint.h).
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <type_traits>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_fit.h"
#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/pretrained.h"
#include "common/agree.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "io/checksum.h"

namespace trainer {
namespace {

// The file a CHECKPOINT, --resume or Checkpoint.init_from names, opened for reading; a file that
// is something else (not HDF5, or a packed-token dataset) is named as such. Readers never write:
// no file lock, as the dataset reader opens files (HDF5 refuses a second open of one file with
// other locking flags, e.g. a training file given as Checkpoint.init_from).
Status OpenReadOnly(const std::string& file, Hdf5Handle* handle) {
  SilenceHdf5Errors();
  constexpr const char* kExpected =
      "Pass a trainer checkpoint: a step folder, its checkpoint.h5, or a checkpoint folder "
      "(Checkpoint.dir, e.g. out/tiny-cpu/checkpoints)";
  if (!PathExists(file))
    return CheckpointError(
        StrFormat("checkpoint file does not exist (%s). %s", file.c_str(), kExpected));
  if (!IsRegularFile(file) || H5Fis_hdf5(file.c_str()) <= 0)
    return CheckpointError(
        StrFormat("not a checkpoint (%s): not an HDF5 file, where a checkpoint.h5 was expected. %s",
                  file.c_str(), kExpected));
  std::string why;
  if (!Hdf5OpenReadOnly(file, handle, &why))
    return CheckpointError(StrFormat("cannot open checkpoint (%s): %s. %s", file.c_str(),
                                     why.c_str(), kDamagedAdvice));
  const htri_t has_step = H5Aexists(handle->get(), "step");
  if (has_step > 0) return Status::Ok();
  if (has_step < 0)  // the root's object header fails HDF5's checksum (format 1.8 files)
    return CheckpointError(StrFormat("checkpoint manifest cannot be read (%s): %s. %s",
                                     file.c_str(), Hdf5ErrorText().c_str(), kDamagedAdvice));
  if (H5Lexists(handle->get(), "tokens", H5P_DEFAULT) > 0)
    return CheckpointError(StrFormat(
        "not a checkpoint (%s): it is a packed-token dataset (trainer pack's /tokens), where a "
        "checkpoint was expected. %s; give the dataset as Data.train_path, Data.val_path or "
        "trainer eval's --data",
        file.c_str(), kExpected));
  return CheckpointError(
      StrFormat("not a checkpoint of this trainer (%s): an HDF5 file without the manifest's step "
                "attribute. %s",
                file.c_str(), kExpected));
}

// Renames a step folder that failed verification to <folder>.damaged (or .damaged-2, ...), so
// that neither retention nor a later resume counts it as a checkpoint; warns either way.
void SetAside(const std::string& folder, const std::string& keep_last_note) {
  if (!IsDirectory(folder)) return;  // `latest` named a folder that is gone
  std::string aside;
  Status renamed = RenameStepFolderAside(folder, ".damaged", &aside);
  if (renamed.ok())
    LogWarning(
        StrFormat("set aside %s as %s: it does not verify, so it is not counted as a "
                  "checkpoint%s. Look at it, then remove it",
                  folder.c_str(), aside.c_str(), keep_last_note.c_str()));
  else
    LogWarning(
        StrFormat("cannot set aside %s, which does not verify: %s. Remove it by hand, or "
                  "Checkpoint.keep_last may count it as one of the checkpoints it keeps",
                  folder.c_str(), renamed.message().c_str()));
}

// The newest checkpoint of `directory` that verifies: the one `latest` names, then the step
// folders older than it, newest first (those newer than `latest` belong to a line of training
// that a resume from an earlier step abandoned); without `latest`, every step folder, newest
// first. Empty when it holds none. With `own` (the run's locked Checkpoint.dir), the ones that
// failed are set aside and `latest` names the chosen one.
Status ResolveNewest(const std::string& directory, const std::string& key, bool own,
                     Progress* progress, std::string* chosen) {
  std::vector<std::string> candidates, failed;
  std::string names_no_step;
  const std::string latest = LatestCheckpointName(directory, &names_no_step);
  if (!names_no_step.empty()) WarnLatestNamesNoStep(directory, names_no_step);
  const int64_t latest_step = latest.empty() ? INT64_MAX : CheckpointFolderStep(latest);
  if (!latest.empty()) candidates.push_back(directory + "/" + latest);
  for (const std::string& c : CommittedCheckpoints(directory))
    if (CheckpointFolderStep(c) < latest_step || latest.empty()) candidates.push_back(c);
  for (const std::string& c : candidates) {
    Status v = VerifyCheckpoint(CheckpointFile(c), progress);
    if (v.ok()) {
      *chosen = c;
      break;
    }
    failed.push_back(c);
    LogWarning(StrFormat("checkpoint %s does not verify, falling back to the previous one: %s",
                         c.c_str(), v.message().c_str()));
  }
  if (chosen->empty() && !candidates.empty())
    return CheckpointError(
        StrFormat("no checkpoint verifies (%s, %s): every step folder fails its checks (warnings "
                  "above). Remove the damaged step folders or start without --resume",
                  directory.c_str(), key.c_str()));
  if (chosen->empty()) {
    LogInfo(StrFormat("no checkpoint in %s: starting from scratch", directory.c_str()));
    return Status::Ok();
  }
  if (!own || failed.empty()) return Status::Ok();
  for (const std::string& f : failed) SetAside(f, " (nor one that Checkpoint.keep_last keeps)");
  const std::string name = chosen->substr(chosen->rfind('/') + 1);
  Status pointed = WriteFileAtomically(directory + "/latest", name + "\n");
  if (!pointed.ok())
    LogWarning(StrFormat("cannot point %s/latest at %s: %s", directory.c_str(), name.c_str(),
                         pointed.message().c_str()));
  return Status::Ok();
}

// The error for a --resume path that names no checkpoint, with an example that exists.
Status NoCheckpointToResume(const std::string& directory, const std::string& resume) {
  const std::vector<std::string> steps = CommittedCheckpoints(directory);
  const std::string example =
      steps.empty() ? StrFormat("Checkpoint.dir (%s) holds none yet: start without --resume",
                                directory.c_str())
                    : StrFormat(
                          "e.g. --resume %s (the newest step folder of Checkpoint.dir), or "
                          "--resume %s (its newest that verifies), or --resume auto",
                          steps.front().c_str(), directory.c_str());
  return CheckpointError(StrFormat(
      "no checkpoint at %s (--resume or Checkpoint.resume): %s. Pass a step folder, its "
      "checkpoint.h5 or a checkpoint folder: %s",
      resume.c_str(),
      PathExists(resume) ? "it holds neither checkpoint.h5 nor step folders" : "it does not exist",
      example.c_str()));
}

// Choose the checkpoint folder to load on rank 0 (empty: none, start fresh). `resume` is "auto"
// (Checkpoint.dir's newest that verifies), a checkpoint folder (its newest that verifies), or a
// step folder or checkpoint file (that one, verified).
Status ResolveOnRoot(const std::string& directory, const std::string& resume, Progress* progress,
                     std::string* chosen) {
  chosen->clear();
  if (resume == "auto") return ResolveNewest(directory, "Checkpoint.dir", true, progress, chosen);
  if (IsDirectory(resume) && !PathExists(CheckpointFile(resume))) {
    if (CommittedCheckpoints(resume).empty() && LatestCheckpointName(resume).empty())
      return NoCheckpointToResume(directory, resume);
    TRAINER_RETURN_IF_ERROR(
        ResolveNewest(resume, "--resume", SameFolder(resume, directory), progress, chosen));
    return Status::Ok();
  }
  if (!PathExists(CheckpointFile(resume))) return NoCheckpointToResume(directory, resume);
  TRAINER_RETURN_IF_ERROR(VerifyCheckpoint(CheckpointFile(resume), progress));
  *chosen = resume;
  return Status::Ok();
}

// The tensor `path` of `file`, read whole into `values`, against its stored CRC-32; a tensor
// without one (format version 1) passes where `required` is false.
Status CheckTensorChecksum(hid_t file_id, const std::string& file, const std::string& path,
                           const float* values, size_t count, bool required) {
  const std::string shown = path.front() == '/' ? path : "/" + path;
  Hdf5Handle d;
  int64_t stored = -1;
  const bool has = d.Reset(H5Dopen2(file_id, path.c_str(), H5P_DEFAULT), H5Dclose) >= 0 &&
                   H5Aexists(d.get(), kChecksumAttribute) > 0;
  if (!has && !required) return Status::Ok();
  if (!has || !Hdf5ReadIntAttribute(d.get(), kChecksumAttribute, &stored).ok())
    return CheckpointError(StrFormat("checkpoint tensor has no %s attribute (%s, %s). %s",
                                     kChecksumAttribute, file.c_str(), shown.c_str(),
                                     kDamagedAdvice));
  const uint32_t computed = TensorChecksum(values, count);
  if (stored == static_cast<int64_t>(computed)) return Status::Ok();
  return CheckpointError(
      StrFormat("checkpoint tensor fails its CRC-32 checksum (%s, %s): stored %08llx, "
                "computed %08x. %s",
                file.c_str(), shown.c_str(), static_cast<unsigned long long>(stored), computed,
                kDamagedAdvice));
}

// The slices of one state (0: weights, then the moments) that `part` holds of `params` into
// `flat`, in buffer order. With `checksums`, a tensor read whole is checked against its CRC-32
// (a resume has had the whole file verified by rank 0 instead).
Status ReadState(hid_t file_id, const std::string& file, const std::vector<ParameterInfo>& params,
                 const ModelPartition& part, int state, bool checksums, Progress* progress,
                 std::vector<float>* flat) {
  flat->assign(TotalLocalElements(params), 0.f);
  // Format 2 on gives every tensor its CRC-32: one without is damaged, not an older file.
  int64_t version = 0;
  const bool crc_required =
      Hdf5ReadIntAttribute(file_id, "format_version", &version).ok() && version >= 2;
  for (const ParameterInfo& p : params) {
    ReportProgress(progress, "loading a checkpoint");
    InjectedCheckpointDelay("TRAINER_FAULT_CHECKPOINT_READ_SLOW");
    const std::string path = std::string(StateGroup(state)) + "/" + p.name;
    std::vector<int64_t> shape;
    Status s = DatasetShape(file_id, path, &shape);
    if (!s.ok() || shape != p.full_shape)
      return CheckpointError(
          StrFormat("checkpoint does not match the model in the config (%s): %s: "
                    "checkpoint %s, config %s. Set the config's Model keys to the checkpoint's "
                    "(h5dump -a /config %s shows its config)",
                    file.c_str(), path.c_str(), s.ok() ? ShapeText(shape).c_str() : "missing",
                    ShapeText(p.full_shape).c_str(), file.c_str()));
    const ShardSlot slot = ShardSlotOf(p, part);
    s = ReadShard(file_id, path, p, slot.rank, slot.size, flat->data() + p.offset);
    if (!s.ok())
      return CheckpointError(
          StrFormat("reading a checkpoint tensor failed (%s, %s, rank %d): %s. %s", file.c_str(),
                    path.c_str(), GetProcessIdentity().rank, s.message().c_str(), kDamagedAdvice));
    if (checksums && slot.size == 1)
      TRAINER_RETURN_IF_ERROR(CheckTensorChecksum(file_id, file, path, flat->data() + p.offset,
                                                  static_cast<size_t>(p.full_numel()),
                                                  crc_required));
  }
  return Status::Ok();
}

// Every rank: read this rank's slices of master weights and moments.
// The stored CRC-32 of every tensor whose path starts with `prefix`, folded with its name into
// one value in name order (attributes only: no tensor is read). *every: whether each had one
// (format 1 files have none).
Status FoldedTensorChecksums(hid_t f, const std::string& file, const std::string& prefix,
                             uint32_t* crc, bool* every) {
  std::vector<std::string> tensors;
  TRAINER_RETURN_IF_ERROR(ListTensors(f, file, &tensors));
  std::sort(tensors.begin(), tensors.end());
  *crc = 0;
  *every = true;
  for (const std::string& path : tensors) {
    if (path.rfind(prefix, 0) != 0) continue;
    Hdf5Handle dataset;
    int64_t value = 0;
    *every = *every && dataset.Reset(H5Dopen2(f, path.c_str(), H5P_DEFAULT), H5Dclose) >= 0 &&
             H5Aexists(dataset.get(), kChecksumAttribute) > 0 &&
             Hdf5ReadIntAttribute(dataset.get(), kChecksumAttribute, &value).ok();
    *crc = Crc32(path.data(), path.size(), *crc);
    *crc = Crc32(&value, sizeof(value), *crc);
  }
  return Status::Ok();
}

// What tells a checkpoint apart from others of its shape, from its attributes alone: its
// progress, and every tensor's CRC-32 (format 2; a format 1 file's size instead).
Status CheckpointIdentity(const std::string& file, std::string* text) {
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  int64_t step = 0, consumed = 0, tokens = 0;
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(f.get(), "step", &step));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(f.get(), "consumed_samples", &consumed));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(f.get(), "tokens_seen", &tokens));
  uint32_t crc = 0;
  bool every_crc = false;
  TRAINER_RETURN_IF_ERROR(FoldedTensorChecksums(f.get(), file, "", &crc, &every_crc));
  *text = StrFormat("step %lld, %lld samples, %lld tokens, ", static_cast<long long>(step),
                    static_cast<long long>(consumed), static_cast<long long>(tokens)) +
          (every_crc ? StrFormat("tensors CRC-32 %08x", crc)
                     : StrFormat("%lld bytes", static_cast<long long>(FileSize(file))));
  return Status::Ok();
}

Status LoadLocal(const std::string& folder, const TrainConfig& config, GptModel* model,
                 AdamW* optimizer, Progress* progress, CheckpointLoadResult* result) {
  const std::string file = CheckpointFile(folder);
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  TRAINER_RETURN_IF_ERROR(CheckWeightsFit(f.get(), file, config.model, model->parameters()));
  TRAINER_RETURN_IF_ERROR(CheckLoraBase(file, config));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(f.get(), "step", &result->step));
  TRAINER_RETURN_IF_ERROR(
      Hdf5ReadIntAttribute(f.get(), "consumed_samples", &result->consumed_samples));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(f.get(), "tokens_seen", &result->tokens_seen));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadStringAttribute(f.get(), "config", &result->config_text));
  for (int w = 0; w < kStateCount; ++w) {
    std::vector<float> flat;
    TRAINER_RETURN_IF_ERROR(ReadState(f.get(), file, model->parameters(), model->partition(), w,
                                      false, progress, &flat));
    if (w == 0)
      TRAINER_RETURN_IF_ERROR(optimizer->SetMaster(flat));
    else
      TRAINER_RETURN_IF_ERROR(optimizer->Upload(w, flat));
  }
  result->path = folder;
  return Status::Ok();
}

}  // namespace

std::string CheckpointFile(const std::string& folder_or_file) {
  return IsDirectory(folder_or_file) ? folder_or_file + "/checkpoint.h5" : folder_or_file;
}

Hdf5FileKind KindOfHdf5File(const std::string& file) {
  Hdf5Handle f;
  if (!IsRegularFile(file) || H5Fis_hdf5(file.c_str()) <= 0 || !Hdf5OpenReadOnly(file, &f))
    return Hdf5FileKind::kNeither;
  if (H5Aexists(f.get(), "step") > 0) return Hdf5FileKind::kCheckpoint;
  if (H5Lexists(f.get(), "tokens", H5P_DEFAULT) > 0) return Hdf5FileKind::kDataset;
  return Hdf5FileKind::kNeither;
}

bool IsStepFolderName(const std::string& name) {
  return name.size() > 5 && name.rfind("step-", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

std::string LatestCheckpointName(const std::string& directory, std::string* names_no_step) {
  auto latest = ReadSmallFile(directory + "/latest");
  std::string name = latest.ok() ? latest.value() : "";
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (name.empty()) return name;
  // A hand-edited `latest`: "step-6" is step-00000006; a name that is no step is not followed
  // (it would fail verification as if every checkpoint were damaged).
  if (IsStepFolderName(name)) return CheckpointFolderName(CheckpointFolderStep(name));
  if (names_no_step != nullptr) *names_no_step = name;
  return "";
}

void WarnLatestNamesNoStep(const std::string& directory, const std::string& text) {
  LogWarning(
      StrFormat("%s/latest names '%s', which is no step folder (step-N): ignored, so the "
                "newest step folder is taken. Write the step folder's name into it, or "
                "remove it",
                directory.c_str(), text.c_str()));
}

std::vector<std::string> CommittedCheckpoints(const std::string& directory) {
  std::vector<std::string> out;
  auto names = ListDirectory(directory);
  if (!names.ok()) return out;
  for (const std::string& n : names.value())  // step-<digits> only: not .tmp, not .damaged
    if (IsStepFolderName(n) && IsDirectory(directory + "/" + n)) out.push_back(directory + "/" + n);
  // Newest first, by step (the names' eight digits grow to nine past step 99,999,999).
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return CheckpointFolderStep(a) > CheckpointFolderStep(b);
  });
  return out;
}

namespace {

// The run's progress as a save writes it (not under the tensors' checksums): a step of at least
// 0, the one its step folder names; at least one sample a step and at most the largest global
// batch (int32); at least one token a sample.
Status CheckProgressAttributes(hid_t f, const std::string& file) {
  int64_t step = 0, samples = 0, tokens = 0;
  if (!Hdf5ReadIntAttribute(f, "step", &step).ok() ||
      !Hdf5ReadIntAttribute(f, "consumed_samples", &samples).ok() ||
      !Hdf5ReadIntAttribute(f, "tokens_seen", &tokens).ok())
    return CheckpointError(
        StrFormat("checkpoint lacks its progress (%s: step, consumed_samples or tokens_seen). %s",
                  file.c_str(), kDamagedAdvice));
  const std::string folder = ParentDirectory(file);
  const std::string name = folder.substr(folder.rfind('/') + 1);  // npos + 1: all of it
  const bool step_folder = IsStepFolderName(name);
  const char* wrong =
      step < 0                                                    ? "a negative step"
      : step_folder && CheckpointFolderStep(name) != step         ? "another step than its folder"
      : samples < step                                            ? "fewer samples than steps"
      : samples / std::max<int64_t>(1, step) > int64_t{INT32_MAX} ? "more samples a step than a "
                                                                    "global batch holds"
      : tokens < samples                                          ? "fewer tokens than samples"
                                                                  : nullptr;
  if (wrong == nullptr) return Status::Ok();
  return CheckpointError(StrFormat(
      "checkpoint progress is impossible (%s: step %lld, consumed_samples %lld, tokens_seen "
      "%lld: %s). %s",
      file.c_str(), static_cast<long long>(step), static_cast<long long>(samples),
      static_cast<long long>(tokens), wrong, kDamagedAdvice));
}

// The manifest's attributes of the open checkpoint `f` into `s` (not its tensors). One that is
// missing or fails HDF5's metadata checksum is damage, named.
Status ReadManifest(hid_t f, const std::string& file, CheckpointSummary* s) {
  int64_t version = 0, seed = 0;
  auto read = [&](const char* name, auto* value) {
    Status got;
    if constexpr (std::is_same_v<decltype(*value), std::string&>)
      got = Hdf5ReadStringAttribute(f, name, value);
    else
      got = Hdf5ReadIntAttribute(f, name, value);
    if (got.ok()) return got;
    return CheckpointError(StrFormat("checkpoint manifest attribute %s %s (%s). %s", name,
                                     H5Aexists(f, name) > 0 ? "cannot be read" : "is missing",
                                     file.c_str(), kDamagedAdvice));
  };
  TRAINER_RETURN_IF_ERROR(read("format_version", &version));
  TRAINER_RETURN_IF_ERROR(read("step", &s->step));
  TRAINER_RETURN_IF_ERROR(read("consumed_samples", &s->consumed_samples));
  TRAINER_RETURN_IF_ERROR(read("tokens_seen", &s->tokens_seen));
  TRAINER_RETURN_IF_ERROR(read("seed", &seed));
  TRAINER_RETURN_IF_ERROR(read("layout", &s->layout));
  TRAINER_RETURN_IF_ERROR(read("config", &s->config_text));
  if (H5Aexists(f, "eod_id") > 0 && H5Aexists(f, "tokenizer") > 0) {
    TRAINER_RETURN_IF_ERROR(read("eod_id", &s->eod_id));
    TRAINER_RETURN_IF_ERROR(read("tokenizer", &s->tokenizer));
  }
  if (H5Aexists(f, "lora_base") > 0) TRAINER_RETURN_IF_ERROR(read("lora_base", &s->lora_base));
  s->format_version = static_cast<int>(version);
  s->seed = static_cast<uint64_t>(seed);
  return Status::Ok();
}

}  // namespace

Status VerifyCheckpoint(const std::string& file, Progress* progress) {
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  int64_t version = 0;
  if (!Hdf5ReadIntAttribute(f.get(), "format_version", &version).ok() || version < 1 ||
      version > kCheckpointFormatVersion)
    return CheckpointError(
        StrFormat("not a checkpoint of this trainer (%s): no format_version attribute between 1 "
                  "and %d. Pass a checkpoint written by this trainer (or a newer trainer for a "
                  "newer format)",
                  file.c_str(), kCheckpointFormatVersion));
  const bool has_crc = version >= 2;
  std::vector<std::string> tensors;
  TRAINER_RETURN_IF_ERROR(ListTensors(f.get(), file, &tensors));
  int64_t expected_count = 0;
  if (has_crc && !Hdf5ReadIntAttribute(f.get(), "tensor_count", &expected_count).ok())
    return CheckpointError(
        StrFormat("checkpoint manifest lacks tensor_count (%s). %s", file.c_str(), kDamagedAdvice));
  if (has_crc && expected_count != static_cast<int64_t>(tensors.size()))
    return CheckpointError(StrFormat(
        "checkpoint tensors %s (%s): it holds %zu tensors, its manifest says %lld. %s",
        static_cast<int64_t>(tensors.size()) > expected_count ? "added" : "missing", file.c_str(),
        tensors.size(), static_cast<long long>(expected_count), kDamagedAdvice));
  if (tensors.empty())
    return CheckpointError(
        StrFormat("checkpoint holds no tensors (%s). %s", file.c_str(), kDamagedAdvice));
  TRAINER_RETURN_IF_ERROR(CheckProgressAttributes(f.get(), file));
  CheckpointSummary manifest;  // every attribute that loading reads
  TRAINER_RETURN_IF_ERROR(ReadManifest(f.get(), file, &manifest));
  std::vector<float> buffer;
  for (const std::string& path : tensors) {
    ReportProgress(progress, "verifying a checkpoint");
    InjectedCheckpointDelay("TRAINER_FAULT_CHECKPOINT_READ_SLOW");
    std::vector<int64_t> shape;
    TRAINER_RETURN_IF_ERROR(DatasetShape(f.get(), path, &shape));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    buffer.resize(static_cast<size_t>(n));
    Hdf5Handle d;
    if (d.Reset(H5Dopen2(f.get(), path.c_str(), H5P_DEFAULT), H5Dclose) < 0 ||
        H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
      return CheckpointError(
          StrFormat("checkpoint tensor fails its Fletcher32 chunk checksum or cannot be read "
                    "(%s, /%s): %s. %s",
                    file.c_str(), path.c_str(), Hdf5ErrorText().c_str(), kDamagedAdvice));
    if (has_crc)
      TRAINER_RETURN_IF_ERROR(
          CheckTensorChecksum(f.get(), file, path, buffer.data(), buffer.size(), true));
  }
  return Status::Ok();
}

Status ReadCheckpointSummary(const std::string& file, CheckpointSummary* s) {
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  TRAINER_RETURN_IF_ERROR(ReadManifest(f.get(), file, s));
  std::vector<std::string> tensors;
  TRAINER_RETURN_IF_ERROR(ListTensors(f.get(), file, &tensors));
  for (const std::string& path : tensors) {
    if (path.rfind("model/", 0) != 0) continue;
    CheckpointSummary::TensorInfo t;
    t.name = path.substr(6);
    TRAINER_RETURN_IF_ERROR(DatasetShape(f.get(), path, &t.shape));
    s->tensors.push_back(t);
  }
  return Status::Ok();
}

Status ReadCheckpointWeights(const std::string& folder_or_file, const ModelConfig& config,
                             const std::vector<ParameterInfo>& params, const ModelPartition& part,
                             std::vector<float>* flat, Progress* progress) {
  const std::string file = CheckpointFile(folder_or_file);
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  TRAINER_RETURN_IF_ERROR(CheckWeightsFit(f.get(), file, config, params));
  return ReadState(f.get(), file, params, part, 0, true, progress, flat);
}

Status CheckCheckpointWeightsFit(const std::string& folder_or_file, const ModelConfig& config) {
  const std::string file = CheckpointFile(folder_or_file);
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  return CheckWeightsFit(f.get(), file, config, FullParameterList(config));
}

Status LoadCheckpointWeights(const std::string& folder_or_file, const TrainConfig& config,
                             GptModel* model) {
  std::vector<float> flat;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointWeights(folder_or_file, config.model, model->parameters(),
                                                model->partition(), &flat));
  TRAINER_RETURN_IF_ERROR(model->SetParameters(flat));
  if (!config.model.lora()) return Status::Ok();
  TRAINER_RETURN_IF_ERROR(CheckLoraBase(folder_or_file, config));
  std::string what;
  return LoadLoraBaseWeights(config, model, &what);
}

Status CheckpointWeightsChecksum(const std::string& file, uint32_t* crc) {
  Hdf5Handle f;
  TRAINER_RETURN_IF_ERROR(OpenReadOnly(file, &f));
  bool every = false;
  TRAINER_RETURN_IF_ERROR(FoldedTensorChecksums(f.get(), file, "model/", crc, &every));
  if (!every)
    return CheckpointError(
        StrFormat("%s: a /model tensor has no %s attribute (a format version "
                  "1 file)",
                  file.c_str(), kChecksumAttribute));
  return Status::Ok();
}

std::string FindCheckpointFile(const std::string& path) {
  std::string file = CheckpointFile(path);
  if (!PathExists(file) && IsDirectory(path)) {
    const std::string newest = NewestCheckpointFolder(path);
    if (!newest.empty()) file = CheckpointFile(newest);
  }
  return PathExists(file) ? file : "";
}

std::string NewestCheckpointFolder(const std::string& directory) {
  const std::string latest = LatestCheckpointName(directory);
  if (!latest.empty() && PathExists(CheckpointFile(directory + "/" + latest)))
    return directory + "/" + latest;
  // As ResolveNewest: below a `latest` whose folder is gone, never above it.
  const int64_t below = latest.empty() ? INT64_MAX : CheckpointFolderStep(latest);
  for (const std::string& step : CommittedCheckpoints(directory))
    if (CheckpointFolderStep(step) < below) return step;
  return "";
}

int64_t CheckpointFolderStep(const std::string& folder) {
  return std::atoll(folder.c_str() + folder.rfind('-') + 1);
}

Status RenameStepFolderAside(const std::string& folder, const std::string& suffix,
                             std::string* aside) {
  *aside = folder + suffix;
  for (int n = 2; PathExists(*aside); ++n) *aside = folder + suffix + "-" + std::to_string(n);
  return RenameDurably(folder, *aside);
}

Status LoadCheckpointCollective(const std::string& directory, const std::string& resume,
                                const TrainConfig& config, GptModel* model, AdamW* optimizer,
                                const ParallelGroups& groups, CheckpointLoadResult* result,
                                Progress* progress) {
  // Rank 0 chooses (and verifies) the checkpoint; everyone learns the choice.
  std::string chosen;
  Status resolved =
      groups.world_rank == 0 ? ResolveOnRoot(directory, resume, progress, &chosen) : Status();
  AwaitRoot(progress, groups.world_rank, "rank 0's choice and verification of the checkpoint");
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(groups.world_host, resolved));
  ReportProgress(progress, "loading a checkpoint");
  TRAINER_RETURN_IF_ERROR(BroadcastText(groups.world_host, &chosen));
  *result = CheckpointLoadResult();
  if (chosen.empty()) return Status::Ok();  // nothing to resume: the caller initialises
  // Every rank's copy must be rank 0's (verified): a node-local copy of another run's step, or of
  // an earlier step under this name, would resume the replicas apart or desynchronise them.
  std::string mine;
  const Status here =
      PathExists(chosen)
          ? CheckpointIdentity(CheckpointFile(chosen), &mine)
          : CheckpointError(StrFormat(
                "rank 0 resumes from %s, which rank %d cannot see. Put Checkpoint.dir (or the "
                "--resume path) on a file system that every node mounts at the same path",
                chosen.c_str(), groups.world_rank));
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(groups.world_host, here));
  std::string root = mine;
  TRAINER_RETURN_IF_ERROR(BroadcastText(groups.world_host, &root));
  const Status same =
      root == mine
          ? Status::Ok()
          : CheckpointError(StrFormat(
                "rank %d's %s is not rank 0's (%s here, %s on rank 0): every rank must resume "
                "from the same checkpoint. Put Checkpoint.dir on a file system that every node "
                "mounts at the same path, or make each node's copy the same",
                groups.world_rank, chosen.c_str(), mine.c_str(), root.c_str()));
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(groups.world_host, same));
  return AgreeOnStatus(groups.world_host,
                       LoadLocal(chosen, config, model, optimizer, progress, result));
}

}  // namespace trainer
