// `trainer check [--config FILE] [-o ...] [--resume auto|PATH]`: run under the same launcher as
// training, it checks and reports per host: the MPI world (against the ranks the launcher started)
// and the rank map; the GPUs each rank sees and its binding (two ranks on one GPU is an error);
// CUDA driver/runtime, NCCL and cuDNN versions equal on all ranks; /dev/shm; that each rank's
// memory (trainer plan's need for its stage) fits its GPU or its share of its host; that the
// checkpoint folder is shared (probe files, and the folders they needed removed again) and holds
// no other run's checkpoints unless --resume; that the data files open on every rank, hold one
// global batch, and validation data where Engine.eval_freq asks for it; then an all-reduce on
// every group of the configured layout (and send/recv between neighbouring pipeline stages, an
// all-to-all on the EP group), checked for the exact result, with its bandwidth. It ends with
// "works well on N ranks (H hosts, G GPUs)", or names each failing rank, host and check with the
// fix and exits 5.
//
// Every rank runs each check on itself; the failures of a check are gathered to every rank (so
// that all agree on the exit code) and rank 0 prints them, one line each.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "checkpoint/checkpoint.h"
#include "cli/check_gpu.h"
#include "cli/check_hosts.h"
#include "cli/check_probes.h"
#include "cli/check_report.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "common/agree.h"
#include "common/filesystem.h"
#include "common/launcher.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "data/data_sources.h"
#include "mpi_bootstrap/watchdog.h"

namespace trainer {
namespace {

constexpr size_t kHostAllReduceFloats = size_t{1} << 20;    // 4 MiB per call (MPI, host memory)
constexpr size_t kDeviceAllReduceFloats = size_t{1} << 24;  // 64 MiB per call (NCCL)
constexpr int kTimedAllReduces = 5;
constexpr double kProbeWaitSeconds = 3.0;  // how long a probe file may take to show up
constexpr size_t kMaxLinesPerCheck = 32;   // failure lines printed per check; the rest counted

class EnvironmentCheck {
 public:
  EnvironmentCheck(RunContext* ctx, const TrainConfig& config, bool folder_given, bool data_given,
                   bool model_given)
      : ctx_(ctx),
        config_(config),
        staged_(config.distributed.host_staged()),
        folder_given_(folder_given),
        data_given_(data_given),
        model_given_(model_given),
        world_(ctx->runtime->world()),
        rank_(ctx->runtime->rank()),
        hosts_(ctx->runtime->hosts()) {}

  // Runs every check. Non-ok only when a step could not run at all (a broken collective); failed
  // checks are counted, reported, and turned into exit code 5 by Verdict().
  // A collective that never returns (a peer gone, a network that hangs) ends the check after
  // Engine.watchdog_s with a line naming the check, as it ends training.
  Status Run() {
    Watchdog watchdog(config_.engine.watchdog_s);
    using Check = Status (EnvironmentCheck::*)();
    const std::pair<const char*, Check> checks[] = {
        {"trainer check's MPI world check", &EnvironmentCheck::CheckWorld},
        {"trainer check's device check", &EnvironmentCheck::CheckDevices},
        {"trainer check's communicator set-up", &EnvironmentCheck::BuildGroups},
        {"trainer check's memory check", &EnvironmentCheck::CheckMemory},
        {"trainer check's checkpoint folder check", &EnvironmentCheck::CheckFolder},
        {"trainer check's data check", &EnvironmentCheck::CheckData},
        {"trainer check's all-reduces", &EnvironmentCheck::CheckAllReduces},
        {"trainer check's point-to-point transfers", &EnvironmentCheck::CheckPointToPoint},
        {"trainer check's all-to-alls", &EnvironmentCheck::CheckAllToAll}};
    for (const auto& [phase, check] : checks) {
      watchdog.Beat(phase);
      TRAINER_RETURN_IF_ERROR((this->*check)());
    }
    return Status::Ok();
  }

  Status Verdict() const {
    if (failures_.empty()) {
      const std::set<std::string> distinct_hosts(hosts_.begin(), hosts_.end());
      LogInfo(StrFormat("works well on %s (%s, %s)", Plural(world_->size(), "rank").c_str(),
                        Plural(distinct_hosts.size(), "host").c_str(),
                        Plural(gpus_used_, "GPU").c_str()));
      return Status::Ok();
    }
    if (rank_ == 0) LogError(FailureSummary(failures_, hosts_));
    // Every rank holds the same failures: all return 5, none needs to print.
    return Status(ExitCode::kEnvironment, "");
  }

 private:
  // Gathers every rank's failures to every rank; rank 0 prints them. Returns how many there were.
  StatusOr<size_t> Report(const std::vector<CheckFailure>& mine) {
    std::vector<CheckFailure> gathered;
    TRAINER_RETURN_IF_ERROR(GatherFailures(world_, mine, &gathered));
    std::map<std::string, size_t> printed;
    for (const CheckFailure& f : gathered) {
      if (printed[f.check]++ < kMaxLinesPerCheck && rank_ == 0)
        LogError(StrFormat("%s (rank %d on %s): %s", f.check.c_str(), f.rank,
                           hosts_[f.rank].c_str(), f.message.c_str()));
      failures_.push_back(f);
    }
    for (const auto& [check, count] : printed)
      if (count > kMaxLinesPerCheck && rank_ == 0)
        LogError(StrFormat("%s: %zu more ranks failed this check (not shown)", check.c_str(),
                           count - kMaxLinesPerCheck));
    return gathered.size();
  }

  size_t FailuresOf(const std::string& check) const {
    size_t n = 0;
    for (const CheckFailure& f : failures_) n += f.check == check;
    return n;
  }

  // The MPI world holds every rank the launcher started (a launcher without a working PMI starts
  // N worlds of one rank each).
  Status CheckWorld() {
    std::string variable;
    const int launched = LauncherWorldSize(&variable);
    const int n = world_->size();
    std::vector<CheckFailure> mine;
    if (launched > 0 && launched != n)
      mine.push_back({rank_, "MPI world",
                      StrFormat("the launcher started %d ranks (%s) but this rank's MPI world "
                                "holds %d: the ranks did not join one world. Start the trainer "
                                "with srun --mpi=pmix or with the mpirun of the MPI it was built "
                                "with (docs/launching.md)",
                                launched, variable.c_str(), n)});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    if (failed == 0)
      LogInfo(StrFormat(
          "MPI world: %s%s", Plural(n, "rank").c_str(),
          variable.empty() ? "" : (", as the launcher started (" + variable + ")").c_str()));
    return Status::Ok();
  }

  // Binds each rank's device, gathers what every rank found, and checks across ranks: GPU
  // binding, versions, /dev/shm. When any rank has no usable GPU, every rank continues on the
  // CPU path so that the remaining checks still run.
  Status CheckDevices() {
    RankFacts me;
    std::vector<CheckFailure> mine;
    Status setup = ctx_->SetupDevice(config_);
    if (setup.ok()) {
      StatusOr<GpuFacts> gpu = QueryGpu(ctx_->device);
      if (gpu.ok()) {
        me.visible_gpus = gpu->visible;
        CopyText(me.gpu_uuid, sizeof(me.gpu_uuid), gpu->uuid);
        CopyText(me.gpu_pci, sizeof(me.gpu_pci), gpu->pci_bus_id);
        CopyText(me.gpu_name, sizeof(me.gpu_name), gpu->name);
      } else {
        setup = gpu.status();
      }
    }
    if (!setup.ok()) {
      me.device_failed = 1;
      mine.push_back({rank_, "GPU binding", setup.message()});
    }
    me.device = setup.ok() ? ctx_->device : -1;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    CopyText(me.cuda_visible_devices, sizeof(me.cuda_visible_devices), visible ? visible : "unset");
    CopyText(me.versions, sizeof(me.versions), GpuLibraryVersions());
    const ShmFacts shm = QueryShm("/dev/shm");
    me.shm_total = shm.total_bytes;
    me.shm_free = shm.free_bytes;
    TRAINER_RETURN_IF_ERROR(AllGatherValues(world_, me, &facts_));

    // Every rank derives the same cross-rank failures; rank 0 alone reports them.
    std::vector<CheckFailure> derived = CrossRankFailures(facts_, hosts_, staged_);
    bool all_on_gpu = true, any_gpu = false;
    for (const RankFacts& f : facts_) {
      all_on_gpu = all_on_gpu && f.device >= 0 && !f.device_failed;
      any_gpu = any_gpu || f.device >= 0 || f.device_failed;
    }
    for (const CheckFailure& f : derived) all_on_gpu = all_on_gpu && f.check != "GPU binding";
    if (rank_ == 0) mine.insert(mine.end(), derived.begin(), derived.end());
    if (!all_on_gpu && (ctx_->backend == nullptr || ctx_->backend->device_memory())) {
      ctx_->backend = MakeCpuBackend();
      ctx_->device = -1;
    }
    if (!all_on_gpu && any_gpu)
      LogInfo("the checks below run on the CPU path (MPI): not every rank has a GPU of its own");
    std::set<std::string> gpus;  // distinct GPUs (with host-staged collectives ranks share them)
    for (const RankFacts& f : facts_) gpus.insert(f.gpu_uuid);
    gpus_used_ = all_on_gpu ? static_cast<int>(gpus.size()) : 0;

    LogInfo(HostsText(facts_, hosts_));
    TRAINER_RETURN_IF_ERROR(Report(mine).status());
    if (FailuresOf("GPU binding") == 0)
      LogInfo(gpus_used_ == 0 ? std::string("GPU binding: no GPU used (CPU path)")
              : gpus_used_ < world_->size()
                  ? StrFormat("GPU binding: %s on %s (Distributed.gpu_collectives=mpi)",
                              Plural(world_->size(), "rank").c_str(),
                              Plural(gpus_used_, "GPU").c_str())
                  : StrFormat("GPU binding: every rank on a GPU of its own (%s)",
                              Plural(gpus_used_, "GPU").c_str()));
    if (FailuresOf("versions") == 0)
      LogInfo(StrFormat("versions: the same on every rank (%s)", facts_[0].versions));
    if (FailuresOf("/dev/shm") == 0)
      LogInfo(gpus_used_ == 0 ? std::string("/dev/shm: not needed by the CPU path (sizes above)")
              : staged_       ? std::string("/dev/shm: not needed without NCCL (sizes above)")
                              : StrFormat("/dev/shm: at least %s on every host with several GPU "
                                          "ranks",
                                          FormatBytes(kMinShmBytesForNccl).c_str()));
    return Status::Ok();
  }

  // Every rank's need (trainer plan's figure for its pipeline stage) against its GPU's memory or
  // its share of its host's.
  Status CheckMemory() {
    if (!model_given_) {
      LogInfo("memory: not checked (pass --config, or -o Model.*=...)");
      return Status::Ok();
    }
    std::string summary;
    std::vector<CheckFailure> mine;
    const Status fits = ctx_->MemoryFits(config_, &summary);
    if (!fits.ok()) mine.push_back({rank_, "memory", fits.message()});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    if (failed == 0)
      LogInfo(summary.empty() ? "memory: not checked (the free memory could not be read)"
                              : "memory: " + summary);
    return Status::Ok();
  }

  Status BuildGroups() {
    Status s = ctx_->BuildGroups(config_);
    if (s.ok() && ctx_->backend->device_memory() && world_->size() > 1) {
      // The world on the device too: the groups of the layout may not span every link between
      // hosts.
      s = ctx_->MakeDeviceCommunicator(world_, config_, &device_world_);
    }
    if (!s.ok()) s = EnvironmentError(s.message());
    TRAINER_RETURN_IF_ERROR(ctx_->Agree(s));
    ctx_->PrintRankMap();
    return Status::Ok();
  }

  // Every rank writes a probe file into the checkpoint folder; rank 0 must see every probe and
  // every rank must see rank 0's (rank 0 writes checkpoints that every rank reads back).
  Status CheckFolder() {
    if (!folder_given_) {
      LogInfo("checkpoint folder: not checked (pass --config, or -o Checkpoint.dir=...)");
      return Status::Ok();
    }
    const std::string folder = config_.checkpoint_dir();
    // The folders that the probes create (deepest first): removed again at the end, so that a
    // check leaves no trace.
    const std::vector<std::string> created =
        rank_ == 0 ? MissingFolders(folder) : std::vector<std::string>();
    int32_t nonce_words[2] = {0, 0};
    if (rank_ == 0) {
      std::random_device entropy;
      const uint64_t value =
          (uint64_t{entropy()} << 32) ^ entropy() ^ static_cast<uint64_t>(getpid()) ^
          static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
      std::memcpy(nonce_words, &value, sizeof(value));
    }
    TRAINER_RETURN_IF_ERROR(world_->Broadcast(nonce_words, 2, DType::kI32, 0));
    uint64_t nonce;
    std::memcpy(&nonce, nonce_words, sizeof(nonce));

    std::vector<CheckFailure> mine;
    const Status wrote = WriteProbe(folder, nonce, rank_, hosts_[rank_]);
    if (!wrote.ok())
      mine.push_back({rank_, "checkpoint folder",
                      StrFormat("no probe file written in %s: %s (every rank must be able to "
                                "write there; Checkpoint.dir picks the folder)",
                                folder.c_str(), wrote.message().c_str())});
    // The gather also orders every write before every look below.
    std::vector<int32_t> written;
    TRAINER_RETURN_IF_ERROR(AllGatherValues<int32_t>(world_, wrote.ok() ? 1 : 0, &written));
    const double deadline = SteadySeconds() + kProbeWaitSeconds;
    std::vector<int32_t> rank0_sees(world_->size(), 1);
    if (rank_ == 0) {
      for (int r = 1; r < world_->size(); ++r)
        if (written[r]) rank0_sees[r] = SeesProbe(folder, nonce, r, hosts_[r], deadline);
    }
    const int32_t sees_rank0 =
        rank_ == 0 || !written[0] || SeesProbe(folder, nonce, 0, hosts_[0], deadline);
    std::vector<int32_t> sees;
    TRAINER_RETURN_IF_ERROR(AllGatherValues(world_, sees_rank0, &sees));
    if (wrote.ok()) std::remove(ProbePath(folder, nonce, rank_).c_str());
    for (int r = 1; r < world_->size() && rank_ == 0; ++r) {
      if (rank0_sees[r] && sees[r]) continue;
      const char* why = !rank0_sees[r] && !sees[r] ? "neither sees the probe file the other wrote"
                        : !rank0_sees[r] ? "rank 0 does not see the probe file this rank wrote"
                                         : "this rank does not see the probe file rank 0 wrote";
      mine.push_back({r, "checkpoint folder",
                      StrFormat("%s is not the folder that rank 0 on %s sees: %s. Put "
                                "Checkpoint.dir (or Engine.output_dir) on a file system that every "
                                "host mounts at the same path (NFS, Lustre, ...)",
                                folder.c_str(), hosts_[0].c_str(), why)});
    }
    // What train refuses in the folder: another run's checkpoints (without --resume, or with a
    // step of another folder).
    const std::string& resume = config_.checkpoint.resume;
    const Status used = rank_ != 0       ? Status::Ok()
                        : resume.empty() ? CheckNoEarlierCheckpoints(folder)
                                         : CheckResumeFolder(resume, folder);
    if (!used.ok())
      mine.push_back({0, "checkpoint folder",
                      used.message() + " (trainer check takes --resume as train does)"});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    // Every probe is removed (the gather above orders them first).
    for (const std::string& path : created) rmdir(path.c_str());
    if (failed == 0)
      LogInfo(
          StrFormat("checkpoint folder %s: shared by every rank (rank 0 sees the probe file "
                    "of each rank, each rank sees rank 0's)",
                    folder.c_str()));
    return Status::Ok();
  }

  // The data files open on every rank, and every rank's copy is rank 0's (tokens, fingerprint).
  Status CheckData() {
    if (!data_given_) {
      LogInfo("data file: not checked (pass --config, or -o Data.train_path=...)");
      return Status::Ok();
    }
    DatasetOpenOptions options;
    options.scan_tokens = false;  // opening and the metadata are the point; `trainer inspect` scans
    StatusOr<DataSources> sources = OpenDataSources(config_.data, config_.model.vocab_size,
                                                    config_.model.sequence_length(), options);
    double tokens = sources.ok() ? 0 : -1;
    if (sources.ok())
      for (const auto& file : sources->train_files)
        tokens += static_cast<double>(file->num_tokens());
    std::vector<double> all_tokens;
    TRAINER_RETURN_IF_ERROR(AllGatherValues(world_, tokens, &all_tokens));
    std::string fingerprint, root;  // the copies' contents, as training compares them
    const Status printed = sources.ok() ? DataFingerprint(*sources, &fingerprint) : Status::Ok();
    root = fingerprint;
    TRAINER_RETURN_IF_ERROR(BroadcastText(world_, &root));
    std::vector<CheckFailure> mine;
    if (!printed.ok()) mine.push_back({rank_, "data file", printed.message()});
    const std::string& path = config_.data.train_path;
    if (!sources.ok()) {
      std::string message = sources.status().message();
      if (all_tokens[0] >= 0 && hosts_[rank_] != hosts_[0])
        message += StrFormat(
            "; the file opens on rank 0 on %s: put it on a file system that every "
            "host mounts, or copy it to the same path on every host",
            hosts_[0].c_str());
      mine.push_back({rank_, "data file", message});
    } else if (all_tokens[0] >= 0 && tokens != all_tokens[0]) {
      mine.push_back({rank_, "data file",
                      StrFormat("%s holds %.0f tokens here but %.0f on rank 0 on %s: the copies "
                                "differ. Give every host the same file (a shared file system, or "
                                "one copy made from the same source)",
                                path.c_str(), tokens, all_tokens[0], hosts_[0].c_str())});
    } else if (!fingerprint.empty() && !root.empty() && fingerprint != root) {
      mine.push_back(
          {rank_, "data file",
           StrFormat("%s differs from rank 0's copy on %s (%s here, %s there). Give "
                     "every host the same files",
                     path.c_str(), hosts_[0].c_str(), fingerprint.c_str(), root.c_str())});
    }
    // What `trainer train` refuses in the data that opened (the same on every rank: rank 0's).
    const Status refused = rank_ == 0 && sources.ok() && mine.empty()
                               ? CheckTrainableData(sources.value(), config_)
                               : Status::Ok();
    if (!refused.ok()) mine.push_back({rank_, "data file", refused.message()});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    if (failed == 0) {
      const int seq_len = config_.model.sequence_length();
      std::string text = StrFormat(
          "%s: opens on every rank (%.0f tokens, vocab %lld; %lld training samples of %d tokens",
          (sources->train_files.size() == 1 ? "data file " + sources->train.Describe()
                                            : "data (" + sources->train.Describe() + ")")
              .c_str(),
          tokens, static_cast<long long>(sources->train_files[0]->vocab_size()),
          static_cast<long long>(sources->train.num_samples()), seq_len);
      if (sources->val.num_samples() > 0)
        text += StrFormat(", %lld validation samples from %s",
                          static_cast<long long>(sources->val.num_samples()),
                          sources->val.Describe().c_str());
      LogInfo(text + ")");
    }
    return Status::Ok();
  }

  // An all-reduce on every group of the layout (and on the world), each result checked against
  // the exact sum of the members' contributions, with the bus bandwidth of the slowest and the
  // fastest group of each kind.
  Status CheckAllReduces() {
    InjectedStall(rank_);
    const Topology& t = ctx_->groups.topology;
    const Topology::Coord c = ctx_->groups.coord;
    std::vector<int> world_members(world_->size()), embedding;
    for (int r = 0; r < world_->size(); ++r) world_members[r] = r;
    const std::vector<int> tp = t.Members(rank_, kDimTp), pp = t.Members(rank_, kDimPp),
                           dp = t.Members(rank_, kDimSharding | kDimReplica),
                           sharding = t.Members(rank_, kDimSharding),
                           replica = t.Members(rank_, kDimReplica),
                           ep = t.Members(rank_, kDimEp), edp = t.Members(rank_, kDimExpertDp);
    if (t.pp > 1) embedding = {t.RankOf(c.tp, c.dp, 0), t.RankOf(c.tp, c.dp, t.pp - 1)};
    struct Kind {
      const char* name;
      Communicator* comm;  // null where this rank is not a member (embedding)
      int groups;
      const std::vector<int>& members;
    };
    std::vector<Kind> kinds = {{"world", world_, 1, world_members}};
    if (device_world_) kinds.push_back({"world", device_world_.get(), 1, world_members});
    kinds.push_back({"tp", ctx_->groups.tp, t.dp * t.pp, tp});
    kinds.push_back({"dp", ctx_->groups.dp, t.tp * t.pp, dp});
    kinds.push_back({"pp", ctx_->groups.pp, t.tp * t.dp, pp});
    if (t.pp > 1) kinds.push_back({"embedding", ctx_->groups.embedding, t.tp * t.dp, embedding});
    if (t.sharding > 1) {  // Distributed.sharding's groups
      kinds.push_back({"sharding", ctx_->groups.sharding, t.tp * t.pp * t.replicas(), sharding});
      if (t.replicas() > 1)
        kinds.push_back({"replica", ctx_->groups.replica, t.tp * t.pp * t.sharding, replica});
    }
    if (t.ep > 1) {  // Distributed.ep_degree's groups
      kinds.push_back({"ep", ctx_->groups.ep, t.world_size / t.ep, ep});
      if (t.expert_dp() > 1)
        kinds.push_back({"expert_dp", ctx_->groups.expert_dp, t.world_size / t.expert_dp(), edp});
    }
    const float contribution = static_cast<float>(rank_ % 13 + 1);
    for (const Kind& kind : kinds) {
      const int size = static_cast<int>(kind.members.size());
      const bool device = kind.comm != nullptr && kind.comm->device_memory();
      const char* transport = Transport(device, staged_);
      if (size == 1) {
        LogInfo(StrFormat("all-reduce on %s: groups of one rank, nothing to exchange", kind.name));
        continue;
      }
      const size_t count = device ? kDeviceAllReduceFloats : kHostAllReduceFloats;
      double bus_gbps = -1;
      std::vector<CheckFailure> mine;
      if (kind.comm != nullptr) {
        double group_sum = 0, seconds = 0;
        for (int m : kind.members) group_sum += m % 13 + 1;
        std::string mismatch;
        TRAINER_RETURN_IF_ERROR(TimeExactAllReduce(kind.comm, ctx_->backend.get(), contribution,
                                                   group_sum, count, kTimedAllReduces, &seconds,
                                                   &mismatch));
        if (!mismatch.empty())
          mine.push_back(
              {rank_, "all-reduce",
               WrongResult(kind.name, kind.members, device, mismatch, staged_)});
        // Bus bandwidth as NCCL's tests define it: 2 (n-1)/n * bytes / time.
        bus_gbps =
            seconds > 0 ? 2.0 * (size - 1) / size * count * sizeof(float) / seconds / 1e9 : 0;
      }
      std::string bandwidth;
      const double mine_gbps[2] = {bus_gbps < 0 ? 1e300 : bus_gbps, bus_gbps};
      TRAINER_RETURN_IF_ERROR(
          BandwidthRange(mine_gbps, kind.groups == 1 ? nullptr : "group", &bandwidth));
      TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
      if (failed > 0) continue;
      LogInfo(
          StrFormat("all-reduce on %s: %s of %d ranks (%s, %s per call): exact; bus "
                    "bandwidth %s",
                    kind.name, Plural(kind.groups, "group").c_str(), size, transport,
                    FormatBytes(count * sizeof(float)).c_str(), bandwidth.c_str()));
    }
    return Status::Ok();
  }

  // MoE's dispatch exchange on the EP group: uneven counts, zeros included, each element checked.
  Status CheckAllToAll() {
    const Topology& t = ctx_->groups.topology;
    if (t.ep <= 1) return Status::Ok();
    std::string mismatch;
    TRAINER_RETURN_IF_ERROR(ExactAllToAll(ctx_->groups.ep, ctx_->backend.get(), &mismatch));
    std::vector<CheckFailure> mine;
    if (!mismatch.empty())
      mine.push_back({rank_, "all-to-all",
                      WrongResult("ep", t.Members(rank_, kDimEp), ctx_->groups.ep->device_memory(),
                                  mismatch, staged_)});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    if (failed == 0)
      LogInfo(StrFormat("all-to-all on ep: %s of %d ranks, uneven counts (zeros included): exact",
                        Plural(t.world_size / t.ep, "group").c_str(), t.ep));
    return Status::Ok();
  }

  // The pipeline's send/recv on the pp group: each stage to the next and back, checked exactly.
  Status CheckPointToPoint() {
    const Topology& t = ctx_->groups.topology;
    if (t.pp <= 1) return Status::Ok();
    const std::vector<int> members = t.Members(rank_, kDimPp);
    std::vector<std::string> stages;  // "stage 1 (rank 2 on node1)"
    for (int m : members)
      stages.push_back(StrFormat("stage %zu (rank %d on %s)", stages.size(), m, hosts_[m].c_str()));
    const bool device = ctx_->groups.pp->device_memory();
    const size_t count = device ? kDeviceAllReduceFloats : kHostAllReduceFloats;
    double gbps[2];
    std::string mismatch, bandwidth;
    TRAINER_RETURN_IF_ERROR(TimeExactSendRecv(ctx_->groups.pp, ctx_->backend.get(), count,
                                              kTimedAllReduces, InjectedSendRecvFault(rank_),
                                              stages, gbps, &mismatch));
    TRAINER_RETURN_IF_ERROR(BandwidthRange(gbps, "link", &bandwidth));
    std::vector<CheckFailure> mine;
    if (!mismatch.empty())
      mine.push_back(
          {rank_, "point-to-point", WrongResult("pp", members, device, mismatch, staged_)});
    TRAINER_ASSIGN_OR_RETURN(size_t failed, Report(mine));
    if (failed == 0)
      LogInfo(
          StrFormat("point-to-point on pp: %s of %d ranks (%s, %s per transfer): exact both "
                    "ways between neighbouring stages; bandwidth %s one way",
                    Plural(t.tp * t.dp, "group").c_str(), t.pp, Transport(device, staged_),
                    FormatBytes(count * sizeof(float)).c_str(), bandwidth.c_str()));
    return Status::Ok();
  }

  // The slowest and fastest over every rank of each rank's [min, max] in GB/s, as the lines print
  // it: "A GB/s (slowest <what>) to B GB/s", or only B where `what` is null (one group).
  Status BandwidthRange(const double mine[2], const char* what, std::string* text) {
    double range[2] = {-mine[0], mine[1]};  // the max of -bandwidth is the minimum
    TRAINER_RETURN_IF_ERROR(world_->AllReduce(range, 2, DType::kF64, ReduceOp::kMax));
    *text = what == nullptr
                ? StrFormat("%.2f GB/s", range[1])
                : StrFormat("%.2f GB/s (slowest %s) to %.2f GB/s", -range[0], what, range[1]);
    return Status::Ok();
  }

  RunContext* ctx_;
  const TrainConfig& config_;
  const bool staged_;  // Distributed.gpu_collectives=mpi: ranks may share a GPU, no NCCL
  const bool folder_given_, data_given_, model_given_;
  MpiCommunicator* world_;
  const int rank_;
  const std::vector<std::string>& hosts_;
  std::vector<RankFacts> facts_;
  std::unique_ptr<Communicator> device_world_;
  int gpus_used_ = 0;
  std::vector<CheckFailure> failures_;  // every rank's failures, the same on every rank
};

}  // namespace

int RunCheckCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer check options");
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
  options.add_options()("config,c", po::value(&config_path)->default_value(""),
                        "YAML config whose layout, data and checkpoint folder are checked")(
      "override,o", po::value(&overrides)->composing(), "Section.key=value, repeatable")(
      "resume", po::value(&resume)->default_value(""),
      "auto|PATH: the run resumes (as train --resume): checkpoints in the folder are expected");
  RunContext ctx;
  Status status = ctx.Init();
  if (!status.ok()) return ctx.Finish(status);
  po::variables_map vm;
  bool help = false;
  status = ctx.ParseAgreedCommandLine("check", args, options, &vm, &help);
  if (!status.ok()) return ctx.Finish(status);
  if (help) {
    if (ctx.runtime->rank() == 0)
      PrintCommandHelp("check", "[--config FILE] [-o Section.key=value ...] [--resume auto|PATH]",
                       options);
    return ctx.Finish(Status::Ok());
  }
  // Without a config, only what was named with -o is checked besides the world and the devices.
  const bool data_given = !config_path.empty() || OverridesKey(overrides, "Data.train_path");
  const bool folder_given = !config_path.empty() || OverridesKey(overrides, "Checkpoint.dir") ||
                            OverridesKey(overrides, "Engine.output_dir");
  const bool model_given = !config_path.empty() || OverridesKey(overrides, "Model.") ||
                           OverridesKey(overrides, "Global.micro_batch_size");
  TrainConfig config;
  if (status.ok()) {
    if (!data_given) overrides.push_back("Data.train_path=unused");
    auto loaded = LoadConfig(config_path, overrides);
    status = loaded.ok() ? ValidateConfig(&loaded.value(), ctx.runtime->size()) : loaded.status();
    if (status.ok()) config = loaded.value();
    if (!resume.empty()) config.checkpoint.resume = resume;
  }
  // A config that does not fit the world is a usage error (exit 2), as in `trainer train`.
  status = ctx.Agree(status);
  if (!status.ok()) return ctx.Finish(status);
  status = ctx.AgreeOnConfig(config);
  if (!status.ok()) return ctx.Finish(status);

  for (const std::string& notice : config.notices) LogInfo(notice);
  EnvironmentCheck check(&ctx, config, folder_given, data_given, model_given);
  status = check.Run();
  if (!status.ok() && status.code() != ExitCode::kEnvironment)
    status = EnvironmentError(status.message());
  if (status.ok()) status = check.Verdict();
  return ctx.Finish(status);
}

}  // namespace trainer
