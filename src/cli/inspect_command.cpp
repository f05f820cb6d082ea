// `trainer inspect PATH`: summarise a dataset (.h5 with /tokens; several, named as Data.train_path
// names them, also as the set a run would train on) or a checkpoint (a step folder
// or its checkpoint.h5): shapes, training state, the layout it was written from, and whether
// every tensor passes its checksum and its saved config validates (as eval, sample and export
// read it). Exit 0 when both hold, 3/4 when either does not. A checkpoint
// folder (Checkpoint.dir) first lists its steps, `latest`, interrupted saves and whether a run
// holds it, then inspects the step `latest` names. A Hugging Face model (GPT-2 or the llama
// family: model.safetensors, model.safetensors.index.json, or their folder) lists its tensors and
// the Model keys that Checkpoint.init_from needs for it.
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "cli/checkpoint_model.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "data/data_sources.h"
#include "data/dataset.h"
#include "model/model_spec.h"

namespace trainer {
namespace {

// `directory`: the checkpoint directory `path` was taken from as its newest step, or "".
Status InspectCheckpoint(const std::string& path, const std::string& directory = "") {
  const std::string file = CheckpointFile(path);
  CheckpointSummary s;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointSummary(file, &s));
  std::cout << "checkpoint " << file << "\n"
            << "  format_version   " << s.format_version << "\n"
            << "  step             " << s.step << "\n"
            << "  consumed_samples " << s.consumed_samples << "\n"
            << "  tokens_seen      " << s.tokens_seen << "\n"
            << "  seed             " << s.seed << "\n"
            << "  written on       " << s.layout << "\n"
            << "  trained on       "
            << (s.eod_id < 0 ? std::string("(not recorded)")
                             : s.tokenizer + " tokens, end of document " + std::to_string(s.eod_id))
            << "\n";
  if (!s.lora_base.empty())  // the adapters only; the frozen base is named, not held
    std::cout << "  LoRA adapters of " << s.lora_base << "\n";
  std::cout << "  tensors (" << s.tensors.size() << " under /model, Adam moments under /optim):\n";
  int64_t total = 0;
  for (const auto& t : s.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += n;
    std::cout << "    " << t.name << " " << ShapeText(t.shape) << "\n";
  }
  std::cout << "  parameters       " << total << "\n";
  const StatusOr<TrainConfig> saved = LoadConfigText(s.config_text, file + " (/config)", {});
  if (saved.ok() && saved.value().model.moe())
    std::cout << "  experts          " << MoeShapeText(MakeModelSpec(saved.value().model)) << "\n";
  // The config it was saved with, checked as eval, sample and export check it (one process), and
  // the tensors against its model, as they check them before reading.
  const StatusOr<TrainConfig> one = saved.ok() ? OneProcessConfig(file, {}, 0) : saved.status();
  const Status config = one.status();
  const Status fits = one.ok() ? CheckCheckpointWeightsFit(file, one.value().model) : Status::Ok();
  Status v = VerifyCheckpoint(file);
  // Pruned by the run writing the directory meanwhile: not a damaged checkpoint.
  if (!directory.empty() && (!config.ok() || !fits.ok() || !v.ok()) && !PathExists(file))
    return RemovedWhileRead(file, directory, "inspect");
  std::cout << "  config           "
            << (config.ok() ? "valid"
                            : (saved.ok() ? "NOT VALID: " : "UNREADABLE: ") + config.message())
            << "\n";
  if (!fits.ok()) std::cout << "  tensors fit      NO: " << fits.message() << "\n";
  std::cout << "  verifies         "
            << (v.ok() ? "yes (CRC-32 of every tensor, Fletcher32 of every chunk)" : "NO")
            << std::endl;
  if (!v.ok()) return v;
  if (!fits.ok()) return fits;
  if (config.ok()) return Status::Ok();
  std::string why = config.message();
  if (!why.empty() && why.back() == '.') why.pop_back();
  return CheckpointError(
      saved.ok() ? StrFormat("%s was saved with a config that does not validate: %s. eval, sample "
                             "and export refuse it as it is: give them -o Section.key=value "
                             "overrides that mend it",
                             file.c_str(), why.c_str())
                 : StrFormat("%s holds a config this trainer cannot read: %s. %s", file.c_str(),
                             why.c_str(),
                             "It was written by another trainer, or damaged: read it with h5dump "
                             "-a /config"));
}

// A checkpoint folder (Checkpoint.dir): what it holds, then the checkpoint `latest` names.
Status InspectCheckpointFolder(const std::string& dir) {
  auto names = ListDirectory(dir);
  if (!names.ok()) return CheckpointError(names.status().message());
  std::string committed, incomplete;
  for (const std::string& n : names.value())
    if (n.rfind("step-", 0) == 0 && n.find(".tmp") != std::string::npos)
      incomplete += (incomplete.empty() ? "" : ", ") + n;
  const std::vector<std::string> steps = CommittedCheckpoints(dir);  // newest first
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    committed += (committed.empty() ? "" : ", ") + it->substr(it->rfind('/') + 1);
  std::string names_no_step;
  const std::string step = LatestCheckpointName(dir, &names_no_step);
  if (!names_no_step.empty()) WarnLatestNamesNoStep(dir, names_no_step);
  const std::string holder = CheckpointDirectoryHolder(dir);
  std::cout << "checkpoint folder " << dir << "\n"
            << "  latest           " << (step.empty() ? "(none)" : step) << "\n"
            << "  committed        " << (committed.empty() ? "(none)" : committed) << "\n";
  if (!incomplete.empty())
    std::cout << "  incomplete       " << incomplete
              << " (an interrupted save; the next run here removes it)\n";
  std::cout << "  in use           " << (holder.empty() ? "no" : "yes: " + holder) << "\n";
  // Without `latest` (or where it names no checkpoint): the newest committed step, as resume.
  const std::string newest = NewestCheckpointFolder(dir);
  if (newest.empty())
    return CheckpointError(StrFormat(
        "no committed checkpoint in %s (no `latest`, no step folder).%s", dir.c_str(),
        HuggingFaceFolderHint(dir).empty() ? " Train with Engine.save_steps > 0 to write one"
                                           : HuggingFaceFolderHint(dir).c_str()));
  const Status inspected = InspectCheckpoint(newest, dir);
  if (!inspected.ok() && !PathExists(CheckpointFile(newest)))
    return RemovedWhileRead(CheckpointFile(newest), dir, "inspect");
  return inspected;
}

// A Hugging Face model (trainer export's, or transformers'; GPT-2 or the llama family, whole or
// sharded): its tensors from the headers, and the Model keys that Checkpoint.init_from needs.
Status InspectHuggingFace(const std::string& file) {
  std::vector<SafetensorsEntry> entries;
  TRAINER_RETURN_IF_ERROR(ReadHuggingFaceEntries(file, &entries));
  const std::string arch = HuggingFaceArchitecture(HuggingFaceFolder(file));
  std::cout << "Hugging Face weights " << file << "\n"
            << "  architecture     " << (arch.empty() ? "(no config.json)" : arch) << "\n"
            << "  tensors (" << entries.size() << "):\n";
  int64_t total = 0;
  for (const SafetensorsEntry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    total += n;
    std::cout << "    " << e.name << " " << e.dtype << " " << ShapeText(e.shape) << "\n";
  }
  std::cout << "  values           " << total << "\n";
  std::string overrides, note;
  TRAINER_RETURN_IF_ERROR(ImpliedModelOverrides(file, &overrides, &note));
  std::cout << "  init_from needs  " << overrides << "\n";
  ModelConfig model;  // a MoE model's shape, as for a checkpoint
  if (IsLlamaArchitecture(arch) &&
      ReadLlamaConfigJson(HuggingFaceFolder(file) + "/config.json", &model).ok() && model.moe())
    std::cout << "  experts          " << MoeShapeText(MakeModelSpec(model)) << "\n";
  if (!note.empty()) std::cout << "  note             " << note << "\n";
  std::cout.flush();
  return Status::Ok();
}

Status InspectDataset(const std::string& path, std::unique_ptr<TokenDataset>* dataset = nullptr) {
  auto opened = TokenDataset::Open(path, 0);
  if (!opened.ok()) return opened.status();
  const TokenDataset& d = *opened.value();
  std::cout << "dataset " << path << "\n"
            << "  format_version " << d.format_version() << "\n"
            << "  tokenizer      " << d.tokenizer() << "\n"
            << "  vocab_size     " << d.vocab_size() << " (eod_id " << d.eod_id() << ")\n"
            << "  tokens         " << d.num_tokens() << " (uint" << 8 * d.token_bytes() << ")\n"
            << "  documents      " << d.num_documents() << "\n"
            << "  samples        T=128: " << d.NumSamples(128) << ", T=1024: " << d.NumSamples(1024)
            << "\n"
            << "  verifies       "
            << (d.fully_scanned() ? "yes (every token < vocab_size)"
                                  : "first and last chunks checked (file over 1 GiB)")
            << std::endl;
  if (dataset != nullptr) *dataset = std::move(opened.value());
  return Status::Ok();
}

// Several datasets as Data.train_path names them (commas, glob patterns): each one, then the set
// they make for a run, and whether they were packed alike.
Status InspectDatasetSet(const std::string& value) {
  TRAINER_ASSIGN_OR_RETURN(const std::vector<std::string> paths,
                           ExpandDataPaths(value, "trainer inspect"));
  int64_t tokens = 0, documents = 0, samples128 = 0, samples1024 = 0;
  std::unique_ptr<TokenDataset> first, d;
  std::string unlike;
  for (const std::string& path : paths) {
    TRAINER_RETURN_IF_ERROR(InspectDataset(path, &d));
    tokens += d->num_tokens();
    documents += d->num_documents();
    samples128 += d->NumSamples(128);
    samples1024 += d->NumSamples(1024);
    if (!first) {
      first = std::move(d);
    } else if (unlike.empty() &&
               (d->tokenizer() != first->tokenizer() || d->vocab_size() != first->vocab_size() ||
                d->eod_id() != first->eod_id())) {
      unlike = d->path();
    }
  }
  std::cout << "data set (" << paths.size() << " files, as Data.train_path takes them)\n"
            << "  tokens         " << tokens << "\n"
            << "  documents      " << documents << "\n"
            << "  samples        T=128: " << samples128 << ", T=1024: " << samples1024
            << " (none across files)\n"
            << "  packed alike   " << (unlike.empty() ? "yes" : "NO") << std::endl;
  if (unlike.empty()) return Status::Ok();
  return DataError(
      StrFormat("files packed differently (trainer inspect): %s and %s differ in "
                "tokenizer, vocab_size or eod_id; a run cannot train on both",
                first->path().c_str(), unlike.c_str()));
}

}  // namespace

int RunInspectCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer inspect options");
  std::string path;
  options.add_options()(
      "path", po::value(&path)->default_value(""),
      "dataset (.h5; several as Data.train_path names them: commas, globs), "
      "checkpoint (step folder or checkpoint.h5), checkpoint folder "
      "(Checkpoint.dir), or Hugging Face model (model.safetensors, its index, or their folder)");
  po::positional_options_description positional;
  positional.add("path", 1);
  po::variables_map vm;
  bool help = false;
  Status s = ParseCommandLine("inspect", args, options, &vm, &help, &positional);
  if (s.ok() && help) {
    PrintCommandHelp("inspect", "PATH", options);
    return 0;
  }
  if (s.ok() && path.empty())
    s = UsageError("trainer inspect needs a PATH (a dataset .h5, or a checkpoint step folder)");
  if (s.ok() && !PathExists(path) && path.find_first_of(",*?[") != std::string::npos) {
    s = InspectDatasetSet(path);  // several datasets, as Data.train_path names them
    if (!s.ok()) LogError(s.message());
    return s.exit_code();
  }
  if (s.ok() && !PathExists(path)) s = UsageError("trainer inspect: " + path + " does not exist");
  const std::string weights = s.ok() ? HuggingFaceWeightsFile(path) : "";
  if (s.ok() && !weights.empty()) {
    s = InspectHuggingFace(weights);
  } else if (s.ok()) {
    const bool folder = IsDirectory(path) && !PathExists(path + "/checkpoint.h5");
    // By content; a file that shows neither (damaged, or not HDF5) by its name.
    const Hdf5FileKind kind = KindOfHdf5File(path);
    const bool checkpoint =
        IsDirectory(path) || kind == Hdf5FileKind::kCheckpoint ||
        (kind == Hdf5FileKind::kNeither && path.find("checkpoint") != std::string::npos);
    s = folder       ? InspectCheckpointFolder(path)
        : checkpoint ? InspectCheckpoint(path)
                     : InspectDataset(path);
  }
  if (!s.ok()) LogError(s.message());
  return s.exit_code();
}

}  // namespace trainer
