// Status: the error value that library code returns upward, and the exit codes that job scripts
// rely on. Only main() turns a Status into an exit (and, when ranks disagree, into MPI_Abort).
#pragma once

#include <string>
#include <utility>

namespace trainer {

// Exit codes (docs/cli.md): job scripts requeue on kPreempted and only on it.
enum class ExitCode : int {
  kOk = 0,
  kRuntime = 1,      // runtime failure (collective, kernel, I/O outside checkpoints)
  kUsage = 2,        // usage or config error
  kData = 3,         // dataset error
  kCheckpoint = 4,   // checkpoint error
  kEnvironment = 5,  // environment check failed
  kDiverged = 6,     // non-finite loss or gradient norm: stopped before saving that state
  kPreempted = 75,   // EX_TEMPFAIL: stopped on a signal after saving
};

// A Status is ok, or carries an exit code and one message line of the form
// "<what> (<where>): <why>. <what to do>" (printed as "error: <message>").
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ExitCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == ExitCode::kOk; }
  ExitCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }
  const std::string& message() const { return message_; }

 private:
  ExitCode code_ = ExitCode::kOk;
  std::string message_;
};

inline Status UsageError(std::string m) {
  return Status(ExitCode::kUsage, std::move(m));
}
inline Status DataError(std::string m) {
  return Status(ExitCode::kData, std::move(m));
}
inline Status CheckpointError(std::string m) {
  return Status(ExitCode::kCheckpoint, std::move(m));
}
inline Status RuntimeError(std::string m) {
  return Status(ExitCode::kRuntime, std::move(m));
}
inline Status EnvironmentError(std::string m) {
  return Status(ExitCode::kEnvironment, std::move(m));
}

// A value or an error.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T& operator*() { return value_; }
  T* operator->() { return &value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace trainer

// Return early from the enclosing function when `expr` (a Status) is an error.
#define TRAINER_RETURN_IF_ERROR(expr)    \
  do {                                   \
    ::trainer::Status _status_ = (expr); \
    if (!_status_.ok()) return _status_; \
  } while (0)

// Assign the value of a StatusOr or return its error.
#define TRAINER_CONCAT_INNER(a, b) a##b
#define TRAINER_CONCAT(a, b) TRAINER_CONCAT_INNER(a, b)
#define TRAINER_ASSIGN_OR_RETURN(lhs, expr)               \
  auto TRAINER_CONCAT(_statusor_, __LINE__) = (expr);     \
  if (!TRAINER_CONCAT(_statusor_, __LINE__).ok())         \
    return TRAINER_CONCAT(_statusor_, __LINE__).status(); \
  lhs = std::move(TRAINER_CONCAT(_statusor_, __LINE__).value())
