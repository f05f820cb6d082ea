// The run folders' locks (checkpoint.h: LockCheckpointDirectory, LockOutputDirectory):
// <folder>/.lock, held by world rank 0 for the whole run, its text naming the holder for whoever
// finds it busy.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {
namespace {

constexpr double kRetrySeconds = 2.0;

std::string SlurmJobId() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id == nullptr ? "" : id;
}

// "host=node1 pid=1234 slurm_job=77 since=2026-11-30T15:10:00Z"
std::string HolderText() {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string job = SlurmJobId();
  return StrFormat("host=%s pid=%d slurm_job=%s since=%s\n", GetProcessIdentity().host.c_str(),
                   static_cast<int>(getpid()), job.empty() ? "-" : job.c_str(), when);
}

// The value of `key=` in a holder text ("" when absent).
std::string HolderField(const std::string& text, const std::string& key) {
  const std::string tag = key + "=";
  size_t at = text.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  return text.substr(at, text.find_first_of(" \n", at) - at);
}

// "host node1, pid 1234, Slurm job 77, since ..."; "holder unknown" for a text this code did not
// write (or an empty file: the holder had not written it yet).
std::string DescribeHolder(const std::string& text) {
  const std::string host = HolderField(text, "host"), pid = HolderField(text, "pid");
  if (host.empty() || pid.empty()) return "holder unknown";
  std::string out = "host " + host + ", pid " + pid;
  const std::string job = HolderField(text, "slurm_job");
  if (!job.empty() && job != "-") out += ", Slurm job " + job;
  const std::string since = HolderField(text, "since");
  if (!since.empty()) out += ", since " + since;
  return out;
}

// A run's folder to lock: the checkpoint folder, or the output folder (metrics, TensorBoard).
struct LockedFolder {
  const char* what;   // "checkpoint folder"
  const char* key;    // "Checkpoint.dir"
  const char* harm;   // what two runs in it would do to each other
  const char* other;  // the keys that give a run a folder of its own
};

Status LockFolder(const std::string& directory, const LockedFolder& folder, double wait_s,
                  std::unique_ptr<FileLock>* lock, Progress* progress) {
  lock->reset();
  const std::string path = directory + "/.lock";
  auto unguarded = [&](const std::string& why) {
    LogWarning(
        StrFormat("cannot lock %s (%s): nothing stops a second run from writing to "
                  "%s at the same time; make sure only one run uses it",
                  path.c_str(), why.c_str(), folder.key));
    return Status::Ok();
  };
  std::string why;
  if (!FolderWritable(directory, &why)) {
    const ProcessIdentity& id = GetProcessIdentity();
    return CheckpointError(
        StrFormat("%s not writable (%s, %s, rank %d on %s): %s. Make it writable or set %s to a "
                  "writable folder; nothing was trained",
                  folder.what, directory.c_str(), folder.key, id.rank, id.host.c_str(), why.c_str(),
                  folder.key));
  }
  const auto start = std::chrono::steady_clock::now();
  bool announced = false;
  for (;;) {
    FileLock::Outcome outcome;
    Status tried = FileLock::TryAcquire(path, &outcome, lock);
    if (!tried.ok()) return unguarded(tried.message());
    if (outcome == FileLock::Outcome::kUnsupported)
      return unguarded("the file system keeps no locks");
    if (outcome == FileLock::Outcome::kAcquired) {
      Status written = (*lock)->SetText(HolderText());
      if (!written.ok()) LogWarning(written.message() + " (the lock is held all the same)");
      return Status::Ok();
    }
    auto holder = ReadSmallFile(path);
    const std::string text = holder.ok() ? holder.value() : "";
    const std::string job = SlurmJobId();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // An earlier run of this same Slurm job (requeued after a node failure): its lock outlives it
    // until the file server notices, so wait for that rather than fail the requeued job.
    if (!job.empty() && HolderField(text, "slurm_job") == job && waited < wait_s) {
      if (!announced)
        LogInfo(
            StrFormat("waiting up to %.0f s for the lock on %s left by an earlier run of "
                      "Slurm job %s (%s)",
                      wait_s, path.c_str(), job.c_str(), DescribeHolder(text).c_str()));
      announced = true;
      ReportProgress(progress, "the wait for the checkpoint folder's lock");
      std::this_thread::sleep_for(std::chrono::duration<double>(kRetrySeconds));
      continue;
    }
    return CheckpointError(StrFormat(
        "%s in use (%s, %s): another run holds its lock (%s), and two runs writing one folder "
        "would %s. Wait for that run to end, or give this one its own %s",
        folder.what, path.c_str(), folder.key, DescribeHolder(text).c_str(), folder.harm,
        folder.other));
  }
}

}  // namespace

Status LockCheckpointDirectory(const std::string& directory, double wait_s,
                               std::unique_ptr<FileLock>* lock, Progress* progress) {
  return LockFolder(directory,
                    {"checkpoint folder", "Checkpoint.dir", "remove each other's checkpoints",
                     "Checkpoint.dir or Engine.output_dir"},
                    wait_s, lock, progress);
}

Status LockOutputDirectory(const std::string& directory, double wait_s,
                           std::unique_ptr<FileLock>* lock, Progress* progress) {
  return LockFolder(directory,
                    {"output folder", "Engine.output_dir",
                     "interleave their metrics.jsonl and TensorBoard events", "Engine.output_dir"},
                    wait_s, lock, progress);
}

std::string CheckpointDirectoryHolder(const std::string& directory) {
  const std::string path = directory + "/.lock";
  if (!FileLock::IsHeld(path)) return "";
  auto text = ReadSmallFile(path);
  return DescribeHolder(text.ok() ? text.value() : "");
}

}  // namespace trainer
