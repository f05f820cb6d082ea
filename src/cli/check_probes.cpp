// One-rank parts of `trainer check` (check_probes.h).
#include "cli/check_probes.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {

ShmFacts QueryShm(const std::string& path) {
  ShmFacts facts;
  struct statvfs fs;
  if (statvfs(path.c_str(), &fs) != 0) return facts;
  facts.total_bytes = static_cast<double>(fs.f_blocks) * fs.f_frsize;
  facts.free_bytes = static_cast<double>(fs.f_bavail) * fs.f_frsize;
  return facts;
}

std::string ProbePath(const std::string& folder, uint64_t nonce, int rank) {
  return StrFormat("%s/.trainer-check-%016llx-%d", folder.c_str(),
                   static_cast<unsigned long long>(nonce), rank);
}

namespace {
std::string ProbeContents(uint64_t nonce, int rank, const std::string& host) {
  return StrFormat("trainer check %016llx rank %d host %s\n",
                   static_cast<unsigned long long>(nonce), rank, host.c_str());
}
}  // namespace

Status WriteProbe(const std::string& folder, uint64_t nonce, int rank, const std::string& host) {
  TRAINER_RETURN_IF_ERROR(MakeDirectories(folder));
  return WriteFileAtomically(ProbePath(folder, nonce, rank), ProbeContents(nonce, rank, host));
}

std::vector<std::string> MissingFolders(const std::string& path) {
  std::vector<std::string> missing;
  for (std::string at = path; !PathExists(at);) {
    missing.push_back(at);
    std::string up = ParentDirectory(at);
    if (up == at) break;  // "." or "/" gone
    at = std::move(up);
  }
  return missing;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool SeesProbe(const std::string& folder, uint64_t nonce, int rank, const std::string& host,
               double deadline_seconds) {
  const std::string path = ProbePath(folder, nonce, rank);
  const std::string expected = ProbeContents(nonce, rank, host);
  while (true) {
    if (PathExists(path)) {
      StatusOr<std::string> contents = ReadSmallFile(path);
      if (contents.ok() && contents.value() == expected) return true;
    }
    if (SteadySeconds() >= deadline_seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

namespace {

// Host-side staging of one all-reduce: the pattern this member contributes, and the check.
void FillPattern(std::vector<float>* host, float contribution) {
  for (size_t i = 0; i < host->size(); ++i)
    (*host)[i] = contribution * static_cast<float>(i % 5 + 1);
}

std::string FirstMismatch(const std::vector<float>& host, double group_sum) {
  for (size_t i = 0; i < host.size(); ++i) {
    const float exact = static_cast<float>(group_sum * static_cast<double>(i % 5 + 1));
    if (host[i] != exact)
      return StrFormat("element %zu of %zu is %.9g where the exact sum is %.9g", i, host.size(),
                       host[i], exact);
  }
  return "";
}

}  // namespace

Status TimeExactAllReduce(Communicator* group, Backend* backend, float contribution,
                          double group_sum, size_t count, int iterations, double* seconds_per_call,
                          std::string* mismatch) {
  mismatch->clear();
  std::vector<float> host(count);
  void* device = nullptr;
  const size_t bytes = count * sizeof(float);
  if (group->device_memory()) TRAINER_RETURN_IF_ERROR(backend->Allocate(bytes, &device));
  double total = 0;
  Status status;
  for (int call = 0; call <= iterations && status.ok(); ++call) {
    FillPattern(&host, contribution);
    void* data = host.data();
    if (device != nullptr) {
      status = backend->CopyToDevice(device, host.data(), bytes);
      if (status.ok()) status = backend->Synchronize();
      data = device;
    }
    if (status.ok()) status = group->Barrier();
    if (!status.ok()) break;
    const double start = SteadySeconds();
    status = group->AllReduce(data, count, DType::kF32, ReduceOp::kSum);
    // A group on a stream of its own (DP) finishes before the backend's stream goes on.
    if (status.ok() && device != nullptr) status = group->FinishBefore(BackendStream(backend));
    if (status.ok() && device != nullptr) status = backend->Synchronize();
    if (!status.ok()) break;
    if (call > 0) total += SteadySeconds() - start;  // call 0 warms up (connections, buffers)
    if (device != nullptr) status = backend->CopyToHost(host.data(), device, bytes);
    if (status.ok() && mismatch->empty()) *mismatch = FirstMismatch(host, group_sum);
  }
  if (device != nullptr) backend->Free(device);
  *seconds_per_call = iterations > 0 ? total / iterations : 0;
  return status;
}

Status ExactAllToAll(Communicator* group, Backend* backend, std::string* mismatch) {
  mismatch->clear();
  const int n = group->size(), me = group->rank();
  auto value = [](int s, int p, int64_t i) { return static_cast<float>(s * 4096 + p * 64 + i); };
  std::vector<int64_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<float> send;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = (me + p) % 3;  // 0 for some peers
    send_displs[p] = static_cast<int64_t>(send.size());
    for (int64_t i = 0; i < send_counts[p]; ++i) send.push_back(value(me, p, i));
  }
  TRAINER_RETURN_IF_ERROR(group->AllToAllCounts(send_counts.data(), recv_counts.data(), 1));
  int64_t total = 0;
  for (int s = 0; s < n; ++s) {
    recv_displs[s] = total;
    total += recv_counts[s];
  }
  std::vector<float> recv(std::max<int64_t>(total, 1));  // a member may receive nothing
  void *dsend = send.data(), *drecv = recv.data();
  if (send.empty()) send.push_back(0);  // a member may send nothing: keep a valid buffer
  const size_t send_bytes = send.size() * sizeof(float), recv_bytes = recv.size() * sizeof(float);
  if (group->device_memory()) {
    TRAINER_RETURN_IF_ERROR(backend->Allocate(send_bytes, &dsend));
    TRAINER_RETURN_IF_ERROR(backend->Allocate(recv_bytes, &drecv));
    TRAINER_RETURN_IF_ERROR(backend->CopyToDevice(dsend, send.data(), send_bytes));
  }
  Status status = group->AllToAllV(dsend, send_counts.data(), send_displs.data(), drecv,
                                   recv_counts.data(), recv_displs.data(), DType::kF32);
  if (group->device_memory()) {
    if (status.ok()) status = backend->CopyToHost(recv.data(), drecv, recv_bytes);
    backend->Free(dsend);
    backend->Free(drecv);
  }
  TRAINER_RETURN_IF_ERROR(status);
  for (int s = 0; s < n && mismatch->empty(); ++s) {
    if (recv_counts[s] != (s + me) % 3)
      *mismatch = StrFormat("member %d announced %lld elements where it sends %d", s,
                            static_cast<long long>(recv_counts[s]), (s + me) % 3);
    for (int64_t i = 0; i < recv_counts[s] && mismatch->empty(); ++i)
      if (recv[recv_displs[s] + i] != value(s, me, i))
        *mismatch = StrFormat("element %lld from member %d is %.9g where %.9g was sent",
                              static_cast<long long>(i), s, recv[recv_displs[s] + i],
                              value(s, me, i));
  }
  return Status::Ok();
}

namespace {

// Element i of what stage `sender` sends toward s + 1 (direction 0) or s - 1 (direction 1).
float SendRecvValue(int sender, int direction, size_t i) {
  return static_cast<float>((i + 4099 * static_cast<size_t>(sender) + 8191 * direction) %
                            (size_t{1} << 22));
}

}  // namespace

namespace {
bool InjectedFor(const char* variable, int rank) {
  const char* v = std::getenv(variable);
  return v != nullptr && *v != '\0' && std::atoi(v) == rank;
}
}  // namespace

bool InjectedSendRecvFault(int rank) {
  return InjectedFor("TRAINER_FAULT_CHECK_P2P", rank);
}

void InjectedStall(int rank) {
  if (!InjectedFor("TRAINER_FAULT_CHECK_STALL", rank)) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

Status TimeExactSendRecv(Communicator* group, Backend* backend, size_t count, int iterations,
                         bool corrupt, const std::vector<std::string>& stage_names, double gbps[2],
                         std::string* mismatch) {
  mismatch->clear();
  const int n = group->size(), me = group->rank();
  const int phases = n > 2 ? 2 : 1;  // links from even stages, then from odd ones
  struct Link {
    int peer, phase;
    std::vector<float> send;  // this member's pattern toward peer
    void* device_send = nullptr;
    double seconds = 0;
  };
  std::vector<Link> links;
  if (me + 1 < n) links.push_back({me + 1, me % 2, {}});
  if (me > 0) links.push_back({me - 1, (me - 1) % 2, {}});
  const size_t bytes = count * sizeof(float);
  const bool on_device = group->device_memory();
  std::vector<float> recv(count), unset(count, -1.0f);
  void* device_recv = nullptr;
  Status status;
  if (on_device) status = backend->Allocate(bytes, &device_recv);
  for (Link& link : links) {
    const int direction = link.peer > me ? 0 : 1;
    link.send.resize(count);
    for (size_t i = 0; i < count; ++i) link.send[i] = SendRecvValue(me, direction, i);
    if (corrupt && direction == 0) link.send[count / 2] += 0.5f;
    if (status.ok() && on_device) status = backend->Allocate(bytes, &link.device_send);
    if (status.ok() && on_device)
      status = backend->CopyToDevice(link.device_send, link.send.data(), bytes);
  }
  for (int call = 0; call <= iterations && status.ok(); ++call) {
    for (int phase = 0; phase < phases && status.ok(); ++phase) {
      status = group->Barrier();
      for (Link& link : links) {
        if (!status.ok() || link.phase != phase) continue;
        void* to = recv.data();
        if (on_device) {
          status = backend->CopyToDevice(device_recv, unset.data(), bytes);
          if (status.ok()) status = backend->Synchronize();
          to = device_recv;
        } else {
          recv = unset;
        }
        const void* from = on_device ? link.device_send : link.send.data();
        const double start = SteadySeconds();
        if (status.ok())
          status = group->SendRecv(from, count, link.peer, to, count, link.peer, DType::kF32);
        if (status.ok() && on_device) status = group->FinishBefore(BackendStream(backend));
        if (status.ok() && on_device) status = backend->Synchronize();
        if (status.ok() && call > 0) link.seconds += SteadySeconds() - start;  // call 0 warms up
        if (status.ok() && on_device) status = backend->CopyToHost(recv.data(), device_recv, bytes);
        const int direction = link.peer < me ? 0 : 1;  // the peer's direction toward this member
        for (size_t i = 0; i < count && status.ok() && mismatch->empty(); ++i)
          if (recv[i] != SendRecvValue(link.peer, direction, i))
            *mismatch = StrFormat("element %zu of %zu from %s is %.9g where %.9g was sent", i,
                                  count, stage_names[link.peer].c_str(), recv[i],
                                  SendRecvValue(link.peer, direction, i));
      }
    }
  }
  gbps[0] = 1e300;
  gbps[1] = 0;
  for (Link& link : links) {
    const double rate =
        link.seconds > 0 ? iterations * static_cast<double>(bytes) / link.seconds / 1e9 : 0;
    gbps[0] = std::min(gbps[0], rate);
    gbps[1] = std::max(gbps[1], rate);
    if (link.device_send != nullptr) backend->Free(link.device_send);
  }
  if (device_recv != nullptr) backend->Free(device_recv);
  return status;
}

}  // namespace trainer
