// CrossRankFailures and HostsText (check_hosts.h).
#include "cli/check_hosts.h"

#include <cstring>
#include <map>
#include <set>

#include "common/log.h"

namespace trainer {

std::vector<CheckFailure> CrossRankFailures(const std::vector<RankFacts>& facts,
                                            const std::vector<std::string>& hosts,
                                            bool host_staged) {
  std::vector<CheckFailure> out;
  const int n = static_cast<int>(facts.size());
  int first_gpu_rank = -1;
  for (int r = 0; r < n && first_gpu_rank < 0; ++r)
    if (facts[r].device >= 0) first_gpu_rank = r;
  // UUIDs are unique across machines: two "hosts" (containers, namespaces) may share a GPU.
  std::map<std::string, int> gpu_owner;  // uuid -> first rank that uses it
  std::map<std::string, int> ranks_on_host;
  for (int r = 0; r < n; ++r) ++ranks_on_host[hosts[r]];
  std::set<std::string> shm_reported;
  for (int r = 0; r < n; ++r) {
    const RankFacts& f = facts[r];
    if (f.device < 0 && !f.device_failed && first_gpu_rank >= 0)
      out.push_back({r, "GPU binding",
                     StrFormat("runs on the CPU (%d GPUs visible, CUDA_VISIBLE_DEVICES=%s) "
                               "while rank %d on %s uses cuda:%d. Give every host GPUs, or set "
                               "Global.device=cpu",
                               f.visible_gpus, f.cuda_visible_devices, first_gpu_rank,
                               hosts[first_gpu_rank].c_str(), facts[first_gpu_rank].device)});
    if (f.device >= 0 && !host_staged) {
      auto [owner, fresh] = gpu_owner.emplace(f.gpu_uuid, r);
      if (!fresh)
        out.push_back({r, "GPU binding",
                       StrFormat("cuda:%d (%s, PCI %s) is the GPU that rank %d on %s uses too: "
                                 "two ranks on one GPU. Start one rank per GPU (as many ranks "
                                 "per host as GPUs) and give each rank all of the host's GPUs "
                                 "or exactly its own (CUDA_VISIBLE_DEVICES=%s here)",
                                 f.device, f.gpu_uuid, f.gpu_pci, owner->second,
                                 hosts[owner->second].c_str(), f.cuda_visible_devices)});
    }
    if (std::strcmp(f.versions, facts[0].versions) != 0)
      out.push_back({r, "versions",
                     StrFormat("%s, but rank 0 on %s has %s. Install the same CUDA driver, "
                               "toolkit, NCCL and cuDNN on every host (or run one container "
                               "image everywhere)",
                               f.versions, hosts[0].c_str(), facts[0].versions)});
    const bool nccl_in_host = f.device >= 0 && !host_staged && ranks_on_host[hosts[r]] > 1;
    if (nccl_in_host && f.shm_total < kMinShmBytesForNccl &&
        shm_reported.insert(hosts[r]).second)
      out.push_back(
          {r, "/dev/shm",
           StrFormat("%s for %d GPU ranks on this host, below %s: NCCL keeps the "
                     "buffers between GPUs of one host there and fails when it is "
                     "full. Give containers more (docker run --shm-size=8g; "
                     "Kubernetes: an emptyDir with medium Memory at /dev/shm, as in "
                     "k8s/mpijob.yaml)",
                     f.shm_total < 0 ? "missing" : FormatBytes(f.shm_total).c_str(),
                     ranks_on_host[hosts[r]], FormatBytes(kMinShmBytesForNccl).c_str())});
  }
  return out;
}

// One line per host: its ranks, GPUs, /dev/shm and versions (those of its first rank).
std::string HostsText(const std::vector<RankFacts>& facts, const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
  for (int r = 0; r < static_cast<int>(facts.size()); ++r) {
    if (ranks[hosts[r]].empty()) order.push_back(hosts[r]);
    ranks[hosts[r]].push_back(r);
  }
  std::string text = StrFormat("%s:", Plural(order.size(), "host").c_str());
  for (const std::string& host : order) {
    const std::vector<int>& on_host = ranks[host];
    const RankFacts& first = facts[on_host[0]];
    std::set<std::string> gpus;
    for (int r : on_host)
      if (facts[r].device >= 0) gpus.insert(facts[r].gpu_uuid);
    const std::string shm = first.shm_total < 0 ? "missing"
                                                : FormatBytes(first.shm_total) + " (" +
                                                      FormatBytes(first.shm_free) + " free)";
    const std::string gpu_text =
        first.visible_gpus == 0
            ? std::string("no GPU visible")
            : StrFormat("%s visible (CUDA_VISIBLE_DEVICES=%s), %zu bound (%s)",
                        Plural(first.visible_gpus, "GPU").c_str(), first.cuda_visible_devices,
                        gpus.size(), first.gpu_name);
    text += StrFormat("\n  %-16s %s %s; %s; /dev/shm %s; %s", host.c_str(),
                      on_host.size() == 1 ? "rank" : "ranks", FormatRanks(on_host).c_str(),
                      gpu_text.c_str(), shm.c_str(), first.versions);
  }
  return text;
}

}  // namespace trainer
