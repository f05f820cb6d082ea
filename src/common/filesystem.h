// Small POSIX file-system helpers with Status errors: folders, durable writes (fsync of a file
// and of its folder), atomic replacement by rename, listing and removal.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

// mkdir -p.
Status MakeDirectories(const std::string& path);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// fsync a file or a folder by path.
Status SyncPath(const std::string& path);
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
// Bytes of a regular file (0 when missing).
long long FileSize(const std::string& path);

}  // namespace trainer
