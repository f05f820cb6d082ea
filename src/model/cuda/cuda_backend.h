// CudaBackend: the Backend (src/model/backend.h) on one NVIDIA GPU. Compute tensors are bf16 (or
// f32 when created so); parameter gradients, master weights, Adam moments, statistics and losses
// are f32. Every op runs on one stream (stream(), shared with NcclCommunicator and the engine).
// Matrix products go through cuBLASLt (matmul.h), except the MLP's GEMMs with a GELU where
// cuDNN's fused graph (matmul_gelu_cudnn.h) or our sm90 kernels time faster for the shape
// (cuda_backend_gelu_gemm.cpp);
// attention through cuDNN's fused SDPA when built with the frontend (attention_cudnn.h) or our
// own kernels otherwise; the rest are custom kernels (kernels.h). Memory: Allocate() is
// cudaMalloc + cudaMemset at setup; ops that need temporary room share one scratch buffer that
// is reserved at creation and grows only on first use of a larger shape (the first step), so the
// step loop itself never allocates.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model/backend.h"
#include "model/cuda/route_trial.h"
#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda {
class CublasLtMatmul;
class CudnnAttention;
class CudnnGeluMatmul;
class GroupedGemm;
class UploadRing;
struct Gemm;
struct GroupedGemmKind;
struct GroupedGemmProblem;
struct GeluMatmulArgs;
}  // namespace cuda

// Who runs the GEMMs with a GELU (bf16, epilogues on): for each shape the fastest of cuBLASLt's
// epilogue, cuDNN's fused graph (forward only) and our sm90 kernels, timed on the shape's first
// call (forward) or over its calls in the run's first step (gradient) (kFastest); or one of them
// forced (tests, diagnosis; cuBLASLt where the forced one
// cannot run the shape or, for cuDNN, the direction).
enum class GeluMatmulRoute { kFastest, kCublasLt, kCudnn, kSm90 };

// Who runs the MoE experts' grouped GEMMs (cuda_backend_grouped.cpp): by the rule (cuBLAS's
// grouped GEMM where the mean group is small, else one cuBLASLt GEMM per group; pins of
// Engine.gpu_routes, op grouped_gemm, apply), or one forced for every shape (tests, diagnosis;
// also the environment's TRAINER_GROUPED_GEMM): cuBLAS's grouped GEMM, the per-group loop, or our
// sm90 kernels (the rule where they cannot run the shape). The first three in the route names'
// order.
enum class GroupedGemmRoute { kCublas, kPerExpert, kSm90, kRule };

// Which implementation each op took, counted since creation (for tests and logs).
struct CudaPathCounts {
  int gelu_epilogue = 0;       // GELU fused into the matmul (cuBLASLt GELU_AUX[_BIAS], DGELU)
  int gelu_cudnn = 0;          // forward matmul + bias + GELU as one cuDNN graph
  int gelu_sm90 = 0;           // forward matmul + bias + GELU by our sm90 kernel
  int dgelu_sm90 = 0;          // GELU-gradient matmul by our sm90 kernel
  int gelu_kernel = 0;         // matmul with bias epilogue, then our GELU kernel
  int din_sum_passes = 0;      // passes of the column sums over a GELU-gradient GEMM's din (the
                               // bias gradient's, or a route trial's timing of them)
  int attention_cudnn = 0;     // forward or backward calls through cuDNN
  int attention_cudnn_documents = 0;  // of those, under Data.packing: documents
  int attention_fallback = 0;  // forward or backward calls through our kernels
  int grouped_gemm = 0;          // grouped GEMM launches (cuBLAS, one per GEMM kind of a call)
  int grouped_gemm_fallback = 0;  // GEMM kinds of grouped calls run one GEMM per group instead
  int grouped_sm90 = 0;           // grouped GEMM launches of our sm90 kernels
  int grouped_sm90_squares = 0;   // of those, weight gradients that summed dW's squares
};

class CudaBackend final : public Backend {
 public:
  // Binds `device`, creates the stream and the library handles. compute: kBF16 (training) or kF32.
  static Status Create(int device, DType compute, std::unique_ptr<CudaBackend>* out);
  ~CudaBackend() override;

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  // True when built with the cuDNN frontend (fused attention available for bf16).
  static bool CudnnAttentionCompiled();
  // Testing and diagnosis knobs: force our attention kernels; disable the GELU and bias-gradient
  // epilogues (the bias epilogue is always used).
  void set_force_attention_fallback(bool on) { force_attention_fallback_ = on; }
  void set_matmul_epilogues(bool on) { matmul_epilogues_ = on; }
  void set_gelu_matmul_route(GeluMatmulRoute route) { gelu_route_ = route; }
  // Overrides TRAINER_GROUPED_GEMM.
  void set_grouped_gemm_route(GroupedGemmRoute route) {
    grouped_forced_ = route;
    grouped_env_read_ = true;
  }
  const CudaPathCounts& path_counts() const { return counts_; }

  // Routes (model/route_table.h): ops gelu_gemm_forward, gelu_gemm_gradient (bf16),
  // cublaslt_gemm (cuBLASLt's algorithm for each GEMM shape) and grouped_gemm (pinned only).
  const RouteTable* routes() const override { return &routes_; }
  bool routes_settled() const override;
  Status PinRoutes(const RouteTable& pins) override;
  // The grouped GEMMs' op in the route table, and whether `name` is one of its candidates.
  static const char* kGroupedRouteOp;
  static bool GroupedRouteNamed(const std::string& name);
  Status AdoptRoutes(const RouteTable& table) override;

  std::string name() const override;
  DType compute_dtype() const override { return compute_; }
  bool device_memory() const override { return true; }

  Status Allocate(size_t bytes, void** out) override;
  Status ReserveArena(size_t bytes) override;
  void Free(void* ptr) override;
  Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  Status CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) override;
  Status Zero(Tensor t) override;
  Status Synchronize() override;
  // Host staging: cudaHostAlloc'd (page-locked) memory; copies on stream(); copy marks are
  // events on it.
  Status AllocateHost(size_t bytes, void** out) override;
  void FreeHost(void* ptr) override;
  Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes) override;
  Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) override;
  Status RecordCopies(int mark) override;
  Status WaitForCopies(int mark) override;

  Status Mark(int index) override;
  Status SecondsBetween(int from, int to, double* seconds) override;
  Status ProfilerRange(bool start) override;
  void SetRaggedGroups(bool on) override { ragged_groups_ = on; }

 protected:
  Status RunConvert(Tensor dst, Tensor src) override;
  Status RunEmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                             int vocab_start) override;
  Status RunEmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                              int vocab_start) override;
  Status RunLayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight,
                             Tensor bias) override;
  Status RunLayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                              Tensor dout, Tensor in, Tensor weight, Tensor mean,
                              Tensor rstd) override;
  Status RunAddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                Tensor b, Tensor weight, Tensor bias) override;
  Status RunMatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                     Tensor residual) override;
  Status RunMatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight, Tensor bias,
                          Activation act) override;
  Status RunMatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                           Tensor weight, GradientWrite dweight_write) override;
  Status RunMatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                      Tensor in, Tensor weight, Tensor gelu_pre_act,
                                      Tensor din_sums, GradientWrite dweight_write) override;
  Status RunGeluForward(Tensor out, Tensor in) override;
  Status RunGeluBackward(Tensor dx, Tensor dy, Tensor pre_act) override;
  Status RunColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) override;
  Status RunMatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in, Tensor weight,
                          Tensor bias, float alpha) override;
  Status RunMatmulBackwardColumns(ColumnBlock din, GradientWrite din_write, Tensor dweight,
                                  ColumnBlock dout, ColumnBlock in, Tensor weight,
                                  float alpha) override;
  // Attention (cuda_backend_attention.cpp): cuDNN's fused SDPA, under Data.packing: documents
  // over the documents as a variable-length batch, or our kernels (gpu.md).
  Status RunAttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                             int num_kv_heads, const DropoutKey& dropout, Tensor doc_starts,
                             const DocumentShape& documents) override;
  Status RunAttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                              int num_heads, int num_kv_heads, const DropoutKey& dropout,
                              Tensor doc_starts, const DocumentShape& documents) override;
  Status RunDropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) override;
  Status RunAdd(Tensor out, Tensor a, Tensor b) override;
  Status RunAddInPlace(Tensor out, Tensor a) override;
  Status RunCrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start,
                               int vocab_size) override;
  Status RunCrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                             int vocab_start, int vocab_size) override;
  Status RunCrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                 Tensor sums, Tensor targets, int vocab_start, int vocab_size,
                                 float dloss_scale) override;
  Status RunCrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                              Tensor sums, Tensor targets, int vocab_size,
                              float dloss_scale) override;
  Status RunAdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                  const AdamWParams& p) override;
  Status RunMasterHalves(Tensor master, Tensor param, Tensor remainder, bool join) override;
  Status RunSumInto(Tensor total, Tensor x, SumOf what, bool accumulate) override;
  Status RunScale(Tensor x, float s) override;
  Status RunRmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) override;
  Status RunRmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                            Tensor rstd) override;
  Status RunAddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) override;
  Status RunQkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight, Tensor k_weight,
                          int num_heads, int num_kv_heads, float eps) override;
  Status RunQkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout, Tensor in,
                           Tensor q_weight, Tensor k_weight, Tensor rstd, int num_heads,
                           int num_kv_heads) override;
  Status RunRope(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads, bool inverse,
                 Tensor doc_starts) override;
  Status RunSwiGluForward(Tensor out, Tensor gate_up) override;
  Status RunSwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) override;
  // Mixture of experts (cuda_backend_moe.cpp, moe.cu).
  Status RunMoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                             Tensor logits, Tensor bias, const MoeRouting& r) override;
  Status RunMoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits, Tensor probs,
                              Tensor experts, Tensor weights, Tensor aux_coef, float z_scale,
                              const MoeRouting& r) override;
  Status RunMoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs,
                            Tensor lse, const MoeLossCoefficients& c) override;
  Status RunMoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts,
                             int64_t capacity) override;
  Status RunMoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights) override;
  Status RunMoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                          bool accumulate) override;
  Status RunMoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots) override;
  // Grouped matrix products (cuda_backend_grouped.cpp, grouped_gemm.h).
  Status RunGroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                 const std::vector<ExpertRun>& groups) override;
  Status RunGroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                  Tensor weights, const std::vector<ExpertRun>& groups,
                                  GradientWrite dweights_write, Tensor dweights_squares) override;
  Status RunGroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                       const std::vector<ExpertRun>& groups) override;

 private:
  static constexpr size_t kInitialScratchBytes = 32u << 20;
  static constexpr size_t kStagingSlotBytes = 4u << 20;

  CudaBackend(int device, DType compute);  // out of line: members' types are incomplete here
  // MatmulBackward, with din multiplied by GELU'(gelu_pre_act) when that is given, and din's
  // column sums added to din_sums when that is given.
  Status MatmulBackwardImpl(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                            Tensor weight, Tensor gelu_pre_act, Tensor din_sums,
                            GradientWrite dweight_write);
  // The forward GEMM with a GELU through cuDNN or our sm90 kernel when that is the shape's route
  // (decided on first use by timing `gemm`, the cuBLASLt GELU_AUX[_BIAS] route, against them);
  // *done = false leaves it to cuBLASLt.
  Status FusedGeluMatmul(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args, bool* done);
  // The GELU-gradient GEMM by the shape's route (chosen in the run's first step from the times
  // of the shape's calls: `gemm`, the cuBLASLt DGELU route, with din's column sums where din_sums
  // is given, against our sm90 kernel); *done = false leaves it to the caller, *sums_done = false
  // the column sums.
  Status FusedGeluBackward(const cuda::Gemm& gemm, Tensor din, Tensor dout, Tensor weight,
                           Tensor pre_act, Tensor din_sums, bool* done, bool* sums_done);
  // The forward GELU GEMM's route for a new shape: pinned, or timed (route_trial.h).
  enum class GeluGemmChoice;
  Status ChooseGeluForward(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args,
                           bool cudnn_runs, const bool sm90_runs[2], GeluGemmChoice* choice);
  // Attention's route for the shape (kAttentionCudnn or kAttentionOurs), kept per shape and per
  // op (documents: attention_documents, else attention); AttentionCudnnRefused: cuDNN refused a
  // shape routed to it, forward or backward (our kernels from now on, or the pin's refusal; with
  // attention dropout after a cuDNN forward of the shape, an error: our kernels do not draw
  // cuDNN's mask, so a backward of ours would not match that forward).
  static constexpr int kAttentionCudnn = 0, kAttentionOurs = 1;
  Status AttentionRoute(bool documents, int B, int T, int NH, int NKV, int HS, int** route);
  Status AttentionCudnnRefused(bool documents, int B, int T, int NH, int NKV, int HS, bool dropout,
                               int* route);
  // One attention call: qkv's shape (B,T,(NH+2*NKV)*HS); route: the shape's route where cuDNN
  // takes the call, else null (our kernels; so are documents without their measure); scratch:
  // for cuDNN's call over documents.
  struct AttentionCall {
    int B = 0, T = 0, NH = 0, NKV = 0, HS = 0;
    const int32_t* starts = nullptr;  // doc_starts, or null
    int* route = nullptr;
    void* scratch = nullptr;
  };
  Status PrepareAttention(Tensor qkv, int num_heads, int num_kv_heads, Tensor doc_starts,
                          const DocumentShape& documents, AttentionCall* call);
  // AdoptRoutes: the shape's cached route dropped, so that its next call takes the pins.
  void ForgetRoute(const std::string& op, const std::string& shape);
  void ForgetAttentionRoute(const std::string& op, const std::string& shape);
  // Scratch of at least `bytes` for the current op (contents do not survive the op).
  Status Scratch(size_t bytes, void** out);
  Status AddColumnSums(float* out, const void* x, int64_t N, int64_t C, int64_t ld,
                       const float* row_weights);
  // One grouped GEMM launch of `problems` (none: nothing to do); *done = false where cuBLAS
  // refuses it (counted in path_counts()), for the caller's per-group route.
  // forced: whatever the groups' sizes (else only where they are small).
  Status LaunchGrouped(const cuda::GroupedGemmKind& kind,
                       const std::vector<cuda::GroupedGemmProblem>& problems, bool forced,
                       bool* done);
  // The route of a grouped GEMM (op grouped_gemm; shape from GroupedRouteShape): forced, pinned,
  // or the rule: kSm90 where our kernel runs this call (sm90_runs), else kRule.
  Status GroupedRoute(const std::string& shape, bool sm90_runs, GroupedGemmRoute* route);
  // Our sm90 kernels over the groups (p without its lists), and whether they run p.
  Status RunGroupedSm90(cuda::GroupedSm90Problem p, const std::vector<ExpertRun>& groups);
  // squares (one f64, optional, p not accumulating): += the sum of the squares of dW's tiles.
  Status RunGroupedSm90(cuda::GroupedSm90WeightGradient p, const std::vector<ExpertRun>& groups,
                        Tensor squares = Tensor());
  bool GroupedSm90Runs(const cuda::GroupedSm90Problem& p) const;
  bool GroupedSm90Runs(const cuda::GroupedSm90WeightGradient& p) const;
  // A copy of a call's lists on the device, in stream order (grouped_upload_).
  Status UploadGrouped(const void* data, size_t bytes, const void** device);
  // GroupedMatmulBackward's dweights by the route of its shape; *summed: whether the route also
  // added the squares to dweights_squares (our kernels do when overwriting).
  Status GroupedWeightGradient(Tensor dweights, Tensor dout, Tensor in, Tensor weights,
                               const std::vector<ExpertRun>& groups, GradientWrite dweights_write,
                               Tensor dweights_squares, bool* summed);
  // GroupedMatmulBackward's din by the route of its shape.
  Status GroupedInputGradient(Tensor din, Tensor dout, Tensor in, Tensor weights,
                              const std::vector<ExpertRun>& groups);

  int device_;
  DType compute_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  char* arena_ = nullptr;  // ReserveArena: Allocate bumps through it, Free leaves it alone
  size_t arena_size_ = 0, arena_used_ = 0;
  size_t scratch_bytes_ = 0;
  // Two pinned slots for small host-to-device copies (token batches), so that CopyToDevice
  // returns without waiting for the GPU; an event per slot says when it may be reused.
  char* staging_ = nullptr;
  cudaEvent_t staging_free_[2] = {nullptr, nullptr};
  cudaEvent_t marks_[kMaxMarks] = {};  // timing events, created on first use
  cudaEvent_t copy_marks_[kMaxCopyMarks] = {};  // RecordCopies' events, created on first use
  int staging_next_ = 0;
  std::unique_ptr<cuda::CublasLtMatmul> matmul_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  std::unique_ptr<cuda::CudnnGeluMatmul> cudnn_gelu_matmul_;
  std::unique_ptr<cuda::GroupedGemm> grouped_gemm_;
  std::vector<cuda::GroupedGemmProblem> grouped_problems_;  // a grouped call's, reused
  std::vector<cuda::GroupedBlock> grouped_blocks_;          // our kernels' blocks (runs) of a call
  std::vector<cuda::GroupedExpert> grouped_experts_;        // the weight gradient's experts
  std::unique_ptr<cuda::UploadRing> grouped_upload_;        // and their copies to the device
  GroupedGemmRoute grouped_forced_ = GroupedGemmRoute::kRule;
  bool grouped_env_read_ = false;  // grouped_forced_ taken from TRAINER_GROUPED_GEMM (or set)
  std::map<std::string, GroupedGemmRoute> grouped_routes_;  // shape -> route (kRule: unpinned)
  GeluMatmulRoute gelu_route_ = GeluMatmulRoute::kFastest;
  // (N, C, F, bias) -> who runs that forward GELU GEMM (pairs: our kernel in clusters of two).
  enum class GeluGemmChoice { kCublasLt, kCudnn, kSm90, kSm90Pairs };  // ForwardNames' order
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, GeluGemmChoice> gelu_choice_;
  // A GELU-gradient GEMM shape's route, chosen from the times of its own calls in the run's first
  // step (route_trial.h; runs timed back to back on the shape's first call ranked the routes
  // otherwise than the steps did).
  // The GELU-gradient GEMM's candidates: cuBLASLt's DGELU first where with_cublaslt, then our
  // sm90 kernel with 0, 1, 2 of a tile's boxes' slopes in its epilogue, alone and in CTA pairs.
  struct DgeluRoute {
    bool with_cublaslt = false;
    std::vector<std::string> names;  // the candidates' route names
    std::unique_ptr<cuda::RouteTrial> trial;
  };
  // (N, F, OC, din's column sums in the kernel) -> that GELU-gradient GEMM's route.
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, DgeluRoute> dgelu_routes_;
  bool force_attention_fallback_ = false;
  // (documents, B, T, NH, NKV, HS) -> attention's route
  std::map<std::tuple<bool, int, int, int, int, int>, int> attention_routes_;
  // The same keys where a cuDNN forward ran with attention dropout (AttentionCudnnRefused).
  std::set<std::tuple<bool, int, int, int, int, int>> attention_cudnn_dropout_;
  bool matmul_epilogues_ = true;
  bool ragged_groups_ = false;  // SetRaggedGroups: plain GEMMs untimed (cuda::Gemm::timed)
  CudaPathCounts counts_;
  RouteTable routes_;  // the routes chosen so far
  RouteTable pins_;    // Engine.gpu_routes' (empty: every shape timed)
};

}  // namespace trainer
