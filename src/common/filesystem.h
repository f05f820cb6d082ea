// Small POSIX file-system helpers with Status errors: folders, durable writes (fsync of a file
// and of its folder), atomic replacement by rename, listing, removal, and an exclusive file lock.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

// mkdir -p.
Status MakeDirectories(const std::string& path);
bool PathExists(const std::string& path);
// Whether a run can write in `path`: makes it (mkdir -p), creates a file in it and removes it.
// False with the system's reason in *why ("Not a directory", "Read-only file system") when not.
bool FolderWritable(const std::string& path, std::string* why);
bool IsDirectory(const std::string& path);
// A regular file (after symbolic links): not a folder, FIFO or device, which a reader would
// fail on or wait at.
bool IsRegularFile(const std::string& path);
// fsync a file or a folder by path.
Status SyncPath(const std::string& path);
// fsync a file whose data may take long to reach the disk (a synchronous checkpoint's): its data
// first in ranges of `range_bytes` (sync_file_range), `after_range` called after each, so that a
// watcher hears of the flush as it goes; then the fsync, with little left to write. range_bytes
// <= 0: the fsync alone, as SyncPath.
Status SyncFileInRanges(const std::string& path, int64_t range_bytes,
                        const std::function<void()>& after_range);
// Write `contents` to `path` atomically: path.tmp, fsync, rename, fsync the folder.
Status WriteFileAtomically(const std::string& path, const std::string& contents);
StatusOr<std::string> ReadSmallFile(const std::string& path);
// rename + fsync of the parent folder.
Status RenameDurably(const std::string& from, const std::string& to);
// Names (not paths) of the entries of a folder, sorted.
StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);
// rm -r.
Status RemoveTree(const std::string& path);
std::string ParentDirectory(const std::string& path);
// Whether two paths name the same folder (both exist and resolve alike through realpath).
bool SameFolder(const std::string& a, const std::string& b);
// Bytes of a regular file (0 when missing).
long long FileSize(const std::string& path);
// A temporary file of this process beside `path`: "<path>.<host>-<pid>.tmp". Two processes
// writing one output each write their own, and neither removes the other's.
std::string ProcessTemporaryPath(const std::string& path);
// Removes the ProcessTemporaryPath files beside `path` that processes of this host left and that
// are gone (killed mid-write); other hosts' are left alone.
void RemoveDeadProcessTemporaries(const std::string& path);
// Appends `bytes` to the open `file` whole (with write(2), past stdio's buffer: every record of
// the file goes this way); where that fails (a full disk), the file is cut back to where the
// record began, so that no torn record is left, and errno holds the write's reason. False then.
bool AppendWholeRecord(std::FILE* file, const std::string& bytes);

// An exclusive advisory lock on a whole file: an open-file-description lock (fcntl
// F_OFD_SETLK; Linux's F_SETLK where that is missing), so a second open of the file conflicts
// even within one process. Held until the FileLock is destroyed or the process ends, so a crash
// releases it. Local file systems and NFS keep such locks; Lustre does when mounted with flock.
class FileLock {
 public:
  enum class Outcome {
    kAcquired,     // *lock holds it
    kBusy,         // another open file holds it
    kUnsupported,  // the file system keeps no locks (ENOLCK, ENOSYS, EOPNOTSUPP)
  };
  // Opens `path` (created if missing) and tries the lock once, without waiting. An error Status
  // when the file cannot be opened for writing.
  static Status TryAcquire(const std::string& path, Outcome* outcome,
                           std::unique_ptr<FileLock>* lock);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Replaces the file's text (who holds the lock, for whoever finds it busy).
  Status SetText(const std::string& text);
  // Whether another open file holds the lock on `path`, asked without taking it (fcntl
  // F_OFD_GETLK); false when the file does not exist or the file system keeps no locks.
  static bool IsHeld(const std::string& path);
  // Whether the locked file still lies at its path (not removed, nor replaced by another file,
  // with or without its folder): where it does not, another run may hold a new lock there.
  bool StillInPlace() const;

 private:
  FileLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace trainer
