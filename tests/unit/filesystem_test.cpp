// FileLock (common/filesystem.h): exclusive within one process as well as between processes, kept
// while the lock file is read, released by the holder's end (a SIGKILL included), and IsHeld
// answering without taking it. SyncFileInRanges: one call after each range of the file's data.
#include "common/filesystem.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

namespace trainer {
namespace {

std::string ScratchFolder() {
  char pattern[] = "/tmp/filesystem_test.XXXXXX";
  const char* made = mkdtemp(pattern);
  EXPECT_NE(made, nullptr);
  return made ? made : "";
}

FileLock::Outcome Try(const std::string& path, std::unique_ptr<FileLock>* lock) {
  FileLock::Outcome outcome = FileLock::Outcome::kUnsupported;
  Status s = FileLock::TryAcquire(path, &outcome, lock);
  EXPECT_TRUE(s.ok()) << s.message();
  return outcome;
}

TEST(FileLock, ExclusiveUntilReleasedEvenWithinOneProcess) {
  const std::string path = ScratchFolder() + "/.lock";
  std::unique_ptr<FileLock> first, second;
  EXPECT_FALSE(FileLock::IsHeld(path));  // no file yet, and asking creates none
  EXPECT_FALSE(PathExists(path));
  ASSERT_EQ(Try(path, &first), FileLock::Outcome::kAcquired);
  EXPECT_TRUE(PathExists(path));
  EXPECT_TRUE(FileLock::IsHeld(path));
  EXPECT_EQ(Try(path, &second), FileLock::Outcome::kBusy);
  EXPECT_EQ(second, nullptr);
  // Its text is for whoever finds it busy; reading the file (another open of it) keeps the lock.
  ASSERT_TRUE(first->SetText("host=a pid=1\n").ok());
  ASSERT_TRUE(first->SetText("host=b pid=2\n").ok());  // replaced, not appended
  auto text = ReadSmallFile(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "host=b pid=2\n");
  EXPECT_EQ(Try(path, &second), FileLock::Outcome::kBusy);
  first.reset();
  EXPECT_FALSE(FileLock::IsHeld(path));
  EXPECT_EQ(Try(path, &second), FileLock::Outcome::kAcquired);
}

TEST(FileLock, AnotherProcessHoldsItUntilKilled) {
  const std::string path = ScratchFolder() + "/.lock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // takes the lock, says so, and waits to be killed
    std::unique_ptr<FileLock> held;
    FileLock::Outcome outcome;
    const bool ok =
        FileLock::TryAcquire(path, &outcome, &held).ok() && outcome == FileLock::Outcome::kAcquired;
    const char byte = ok ? '1' : '0';
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    for (;;) pause();
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, '1') << "the child could not take the lock";
  std::unique_ptr<FileLock> mine;
  EXPECT_TRUE(FileLock::IsHeld(path));
  EXPECT_EQ(Try(path, &mine), FileLock::Outcome::kBusy);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(FileLock::IsHeld(path));
  EXPECT_EQ(Try(path, &mine), FileLock::Outcome::kAcquired);
}

TEST(FileLock, AFolderThatDoesNotExistIsAnError) {
  std::unique_ptr<FileLock> lock;
  FileLock::Outcome outcome;
  Status s = FileLock::TryAcquire(ScratchFolder() + "/missing/.lock", &outcome, &lock);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing/.lock"), std::string::npos) << s.message();
  EXPECT_EQ(lock, nullptr);
}

TEST(SyncFileInRanges, CallsBackAfterEachRangeAndKeepsTheData) {
  const std::string path = ScratchFolder() + "/data.bin";
  const std::string data(3 * (1 << 20) + 12345, 'x');  // 3 whole ranges of 1 MiB and a part
  std::ofstream(path, std::ios::binary) << data;
  int calls = 0;
  Status s = SyncFileInRanges(path, 1 << 20, [&] { ++calls; });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(calls, 4);
  ASSERT_TRUE(SyncFileInRanges(path, 0, [&] { ++calls; }).ok());  // no ranges: the fsync alone
  EXPECT_EQ(calls, 4);
  auto read = ReadSmallFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read.value(), data);
  EXPECT_TRUE(
      SyncFileInRanges(ScratchFolder() + "/missing", 1 << 20, nullptr).message().find("missing") !=
      std::string::npos);
}

}  // namespace
}  // namespace trainer
