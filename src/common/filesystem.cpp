// File-system helpers (filesystem.h).
#include "common/filesystem.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace trainer {
namespace {
Status IoError(const std::string& what, const std::string& path) {
  return RuntimeError(
      StrFormat("%s %s failed: %s", what.c_str(), path.c_str(), std::strerror(errno)));
}
}  // namespace

Status MakeDirectories(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if ((i == path.size() || path[i] == '/') && !partial.empty()) {
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
        return RuntimeError(
            StrFormat("cannot create folder %s: %s. Check the path and its "
                      "permissions",
                      partial.c_str(), std::strerror(errno)));
    }
    if (i < path.size()) partial += path[i];
  }
  return Status::Ok();
}

bool FolderWritable(const std::string& path, std::string* why) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if ((i == path.size() || path[i] == '/') && !partial.empty() &&
        mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      *why = StrFormat("cannot create folder %s: %s", partial.c_str(), std::strerror(errno));
      return false;
    }
    if (i < path.size()) partial += path[i];
  }
  std::string probe = path + "/.trainer-write-probe-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) {
    *why = StrFormat("cannot create a file in %s: %s", path.c_str(), std::strerror(errno));
    return false;
  }
  close(fd);
  unlink(probe.c_str());
  return true;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status SyncPath(const std::string& path) {
  return SyncFileInRanges(path, 0, nullptr);
}

Status SyncFileInRanges(const std::string& path, int64_t range_bytes,
                        const std::function<void()>& after_range) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return IoError("open for fsync of", path);
  struct stat st;
  const off_t size = fstat(fd, &st) == 0 ? st.st_size : 0;
  for (off_t offset = 0; range_bytes > 0 && offset < size; offset += range_bytes) {
    if (sync_file_range(
            fd, offset, range_bytes,
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      break;  // not on this file system: the fsync writes it all
    if (after_range) after_range();
  }
  int rc = fsync(fd);  // the metadata, and all the ranges did not write
  int saved = errno;
  close(fd);
  errno = saved;
  if (rc != 0) return IoError("fsync of", path);
  return Status::Ok();
}

std::string ParentDirectory(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool SameFolder(const std::string& a, const std::string& b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a.c_str(), ra) != nullptr && realpath(b.c_str(), rb) != nullptr &&
         std::string(ra) == rb;
}

Status RenameDurably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) return IoError("rename to " + to + " of", from);
  return SyncPath(ParentDirectory(to));
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return IoError("create", tmp);
  bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size() &&
            std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    errno = saved;
    std::remove(tmp.c_str());
    return IoError("write", tmp);
  }
  return RenameDurably(tmp, path);
}

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return IoError("list", path);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

Status RemoveTree(const std::string& path) {
  if (IsDirectory(path)) {
    auto entries = ListDirectory(path);
    if (!entries.ok()) return entries.status();
    for (const std::string& name : entries.value())
      TRAINER_RETURN_IF_ERROR(RemoveTree(path + "/" + name));
    if (rmdir(path.c_str()) != 0) return IoError("remove folder", path);
    return Status::Ok();
  }
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) return IoError("remove", path);
  return Status::Ok();
}

long long FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : 0;
}

bool AppendWholeRecord(std::FILE* file, const std::string& bytes) {
  // Past stdio's buffer (every record goes this way, so it stays empty): a failed write leaves
  // nothing behind to be flushed later.
  const int fd = fileno(file);
  const off_t start = lseek(fd, 0, SEEK_END);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : ENOSPC;
      // Best effort: the write's reason is the one to report.
      const bool cut = start >= 0 && ftruncate(fd, start) == 0;
      (void)cut;
      errno = saved;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

Status FileLock::TryAcquire(const std::string& path, Outcome* outcome,
                            std::unique_ptr<FileLock>* lock) {
  lock->reset();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open for locking of", path);
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  int rc = fcntl(fd, F_OFD_SETLK, &whole);
  if (rc != 0 && errno == EINVAL) rc = fcntl(fd, F_SETLK, &whole);  // kernels before 3.15
  if (rc == 0) {
    *outcome = Outcome::kAcquired;
    lock->reset(new FileLock(fd, path));
    return Status::Ok();
  }
  const int saved = errno;
  close(fd);
  if (saved == EAGAIN || saved == EACCES) {
    *outcome = Outcome::kBusy;
    return Status::Ok();
  }
  if (saved == ENOLCK || saved == ENOSYS || saved == EOPNOTSUPP) {
    *outcome = Outcome::kUnsupported;
    return Status::Ok();
  }
  errno = saved;
  return IoError("locking", path);
}

bool FileLock::IsHeld(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  int rc = fcntl(fd, F_OFD_GETLK, &whole);
  if (rc != 0 && errno == EINVAL) rc = fcntl(fd, F_GETLK, &whole);  // kernels before 3.15
  close(fd);
  return rc == 0 && whole.l_type != F_UNLCK;
}

bool FileLock::StillInPlace() const {
  struct stat held, at_path;
  return fstat(fd_, &held) == 0 && stat(path_.c_str(), &at_path) == 0 &&
         held.st_dev == at_path.st_dev && held.st_ino == at_path.st_ino;
}

FileLock::~FileLock() {
  close(fd_);
}

Status FileLock::SetText(const std::string& text) {
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return IoError("write", path_);
  return Status::Ok();
}

namespace {
std::string HostName() {
  char host[256] = {0};
  return gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string("localhost");
}
}  // namespace

std::string ProcessTemporaryPath(const std::string& path) {
  return path + "." + HostName() + "-" + std::to_string(getpid()) + ".tmp";
}

void RemoveDeadProcessTemporaries(const std::string& path) {
  const std::string folder = ParentDirectory(path);
  const std::string prefix = path.substr(path.find_last_of('/') + 1) + "." + HostName() + "-";
  auto names = ListDirectory(folder);
  if (!names.ok()) return;
  for (const std::string& name : names.value()) {
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + 4 ||
        name.compare(name.size() - 4, 4, ".tmp") != 0)
      continue;
    const std::string pid = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(static_cast<pid_t>(std::stoll(pid)), 0) != 0 && errno == ESRCH)
      std::remove((folder + "/" + name).c_str());
  }
}

}  // namespace trainer
