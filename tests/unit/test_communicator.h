// TestCommunicator: a Communicator base for unit tests that stand in for a group with only the
// collectives under test. Every collective fails with "not used" unless the test overrides it;
// Barrier succeeds.
#pragma once

#include <string>

#include "common/communicator.h"

namespace trainer {

class TestCommunicator : public Communicator {
 public:
  TestCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  bool device_memory() const override { return false; }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Unused("AllReduce"); }
  Status AllGather(const void*, void*, size_t, DType) override { return Unused("AllGather"); }
  Status ReduceScatter(const void*, void*, size_t, DType) override {
    return Unused("ReduceScatter");
  }
  Status Broadcast(void*, size_t, DType, int) override { return Unused("Broadcast"); }
  Status Send(const void*, size_t, DType, int) override { return Unused("Send"); }
  Status Recv(void*, size_t, DType, int) override { return Unused("Recv"); }
  Status SendRecv(const void*, size_t, int, void*, size_t, int, DType) override {
    return Unused("SendRecv");
  }
  Status Barrier() override { return Status::Ok(); }
  Status AllToAllV(const void*, const int64_t*, const int64_t*, void*, const int64_t*,
                   const int64_t*, DType) override {
    return Unused("AllToAllV");
  }
  Status AllToAllCounts(const int64_t*, int64_t*, size_t) override {
    return Unused("AllToAllCounts");
  }

 private:
  static Status Unused(const char* collective) {
    return RuntimeError(std::string(collective) + " is not used by this test");
  }
  int rank_, size_;
  std::string name_ = "test";
};

}  // namespace trainer
