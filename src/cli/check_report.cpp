// Gathering and formatting for `trainer check` (check_report.h).
#include "cli/check_report.h"

#include <cstdlib>
#include <set>

#include "common/log.h"

namespace trainer {
namespace {

// Failures travel as "rank \x1f check \x1f message \x1e" records.
std::string Serialize(const std::vector<CheckFailure>& failures) {
  std::string text;
  for (const CheckFailure& f : failures)
    text += std::to_string(f.rank) + '\x1f' + f.check + '\x1f' + f.message + '\x1e';
  return text;
}

void Deserialize(const std::string& text, std::vector<CheckFailure>* out) {
  size_t begin = 0;
  for (size_t end; (end = text.find('\x1e', begin)) != std::string::npos; begin = end + 1) {
    const std::string record = text.substr(begin, end - begin);
    const size_t a = record.find('\x1f');
    const size_t b = a == std::string::npos ? a : record.find('\x1f', a + 1);
    if (b == std::string::npos) continue;
    out->push_back({std::atoi(record.substr(0, a).c_str()), record.substr(a + 1, b - a - 1),
                    record.substr(b + 1)});
  }
}

}  // namespace

Status AllGatherBytes(Communicator* world, const void* mine, size_t bytes, std::vector<char>* all) {
  // The host communicators reduce and move 32-bit words: pad each rank's block to whole words.
  const size_t words = (bytes + 3) / 4;
  std::vector<int32_t> send(words, 0), recv(words * world->size());
  std::memcpy(send.data(), mine, bytes);
  TRAINER_RETURN_IF_ERROR(world->AllGather(send.data(), recv.data(), words, DType::kI32));
  all->resize(bytes * world->size());
  for (int r = 0; r < world->size(); ++r)
    std::memcpy(all->data() + r * bytes, recv.data() + r * words, bytes);
  return Status::Ok();
}

Status GatherFailures(Communicator* world, const std::vector<CheckFailure>& mine,
                      std::vector<CheckFailure>* all) {
  all->clear();
  std::string text = Serialize(mine);
  int32_t longest = static_cast<int32_t>(text.size());
  TRAINER_RETURN_IF_ERROR(world->AllReduce(&longest, 1, DType::kI32, ReduceOp::kMax));
  if (longest == 0) return Status::Ok();
  text.resize(longest, '\0');
  std::vector<char> gathered;
  TRAINER_RETURN_IF_ERROR(AllGatherBytes(world, text.data(), longest, &gathered));
  for (int r = 0; r < world->size(); ++r) {
    const char* block = gathered.data() + static_cast<size_t>(r) * longest;
    Deserialize(std::string(block, strnlen(block, longest)), all);
  }
  return Status::Ok();
}

std::string FormatRanks(const std::vector<int>& ranks, size_t limit) {
  std::string text;
  size_t pieces = 0;
  for (size_t i = 0; i < ranks.size(); ++pieces) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (pieces == limit) return text + StrFormat(" and %zu more", ranks.size() - i);
    text += (text.empty() ? "" : ", ") +
            (j == i ? std::to_string(ranks[i])
                    : std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
    i = j + 1;
  }
  return text;
}

const char* Transport(bool device, bool staged) {
  if (!device) return "MPI, host memory";
  return staged ? "MPI, device memory staged through the host" : "NCCL, device memory";
}

std::string WrongResult(const char* group, const std::vector<int>& members, bool device,
                        const std::string& mismatch, bool staged) {
  return StrFormat(
      "%s group of ranks %s (%s): %s. Rerun with %s and check the transport settings "
      "in docs/launching.md",
      group, FormatRanks(members).c_str(), Transport(device, staged), mismatch.c_str(),
      device && !staged ? "NCCL_DEBUG=INFO" : "OMPI_MCA_btl=self,vader,tcp");
}

std::string FailureSummary(const std::vector<CheckFailure>& failures,
                           const std::vector<std::string>& hosts) {
  const std::set<std::string> distinct_hosts(hosts.begin(), hosts.end());
  std::set<int> ranks;
  std::set<std::string> failed_hosts, checks;
  for (const CheckFailure& f : failures) {
    ranks.insert(f.rank);
    failed_hosts.insert(hosts[f.rank]);
    checks.insert(f.check);
  }
  std::string check_list, host_list;
  for (const std::string& c : checks) check_list += (check_list.empty() ? "" : ", ") + c;
  for (const std::string& h : failed_hosts) host_list += (host_list.empty() ? "" : ", ") + h;
  const int n = static_cast<int>(hosts.size());
  return StrFormat(
      "trainer check (%s, %s): %s (%s) on %zu of %d ranks (%s; %s). Fix the lines above and run "
      "trainer check again",
      Plural(n, "rank").c_str(), Plural(distinct_hosts.size(), "host").c_str(),
      Plural(failures.size(), "failure").c_str(), check_list.c_str(), ranks.size(), n,
      FormatRanks({ranks.begin(), ranks.end()}).c_str(), host_list.c_str());
}

}  // namespace trainer
