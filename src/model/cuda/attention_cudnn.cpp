// cuDNN frontend SDPA (see attention_cudnn.h): graphs built on first use per shape (and per
// documents' bucket) and cached, including the shapes cuDNN rejects (so a rejected shape costs
// one attempt and one warning).
#include "model/cuda/attention_cudnn.h"

#if TRAINER_WITH_CUDNN

#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/cuda/cuda_check.h"
#include "model/cuda/cudnn_graph.h"
#include "model/cuda/kernels.h"
#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

namespace fe = cudnn_frontend;

namespace {

enum TensorUid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeed, kOffset,
  // Data.packing: documents: the sequence lengths (q and kv) and the ragged offsets.
  kSeqLenQ, kSeqLenKv, kQOffsets, kKOffsets, kVOffsets, kOOffsets, kStatsOffsets
};

struct Shape {
  int64_t B, T, NH, NKV, HS;
  float dropout;  // attention dropout probability; 0: none
  // q, out and their gradients are seen as (B, NH, T, HS); k, v and theirs as (B, NKV, T, HS).
  std::vector<int64_t> dims() const { return {B, NH, T, HS}; }
  std::vector<int64_t> kv_dims() const { return {B, NKV, T, HS}; }
  // Views of q, k or v inside qkv (B,T,NH+2*NKV,HS) (the k and v pointers are offset by NH*HS,
  // (NH+NKV)*HS).
  int64_t row() const { return (NH + 2 * NKV) * HS; }
  std::vector<int64_t> qkv_strides() const { return {T * row(), HS, row(), 1}; }
  // out and dout (B,T,NH,HS).
  std::vector<int64_t> out_strides() const { return {T * NH * HS, HS, NH * HS, 1}; }
  std::vector<int64_t> stats_dims() const { return {B, NH, T, 1}; }
  std::vector<int64_t> stats_strides() const { return {NH * T, T, 1, 1}; }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(HS)); }
};

using GraphPtr = CudnnGraphPtr;

// Data.packing: documents: the variable-length batch of N sequences of at most L rows (the
// bucket) over the packed B*T rows. q, out and their gradients are (N, NH, L, HS), k, v and theirs
// (N, NKV, L, HS), the statistics (N, NH, L, 1) in ragged (B*T, NH) rows; each sequence starts
// at its ragged offset (elements), so the batch stride is only nominal.
// The backward's f32 workspace (cuDNN frontend's composite SDPA backward) holds dq's sums and
// the softmax sums as ragged as their outputs (max_total_seq_len_q: B*T rows of the row stride,
// (NH+2*NKV)*HS in our interleaved qkv, as Transformer Engine sizes it). Under grouped-query
// heads it also holds dk and dv per query head: ragged (max_total_seq_len_kv), B*T rows of that
// stride times NH/NKV each, or padded, (N, NH, L, HS) each; the smaller is chosen (a micro-batch
// of a few long documents pads little, the ragged rows' stride is wide).
struct DocShape {
  Shape s;
  int64_t N, L;
  bool wide;  // int64 offsets (the largest, B*T*row, does not fit int32)
  bool ragged_kv_workspace;
  DocShape(const Shape& shape, const DocumentShape& documents) : s(shape) {
    const DocumentShape bucket = DocumentBucket(documents, static_cast<int>(s.T));
    N = bucket.count;
    L = bucket.longest;
    const int64_t rows = s.B * s.T, padded = N * s.NH * L;
    wide = rows * s.row() > INT32_MAX;
    ragged_kv_workspace = rows * s.row() * (s.NH / s.NKV) <= padded * s.HS;
  }
  std::vector<int64_t> dims() const { return {N, s.NH, L, s.HS}; }
  std::vector<int64_t> kv_dims() const { return {N, s.NKV, L, s.HS}; }
  std::vector<int64_t> qkv_strides() const { return {L * s.row(), s.HS, s.row(), 1}; }
  std::vector<int64_t> out_strides() const { return {L * s.NH * s.HS, s.HS, s.NH * s.HS, 1}; }
  std::vector<int64_t> stats_dims() const { return {N, s.NH, L, 1}; }
  std::vector<int64_t> stats_strides() const { return {L * s.NH, 1, s.NH, 1}; }
};

// Where DocShape's device arrays lie in the caller's scratch (each 256-byte aligned): the
// sequence lengths (N int32), first rows (N+1 int32), offsets (3, N+1) for qkv, out and the
// statistics, and the statistics in ragged rows (B*T, NH) f32.
struct DocumentScratch {
  int32_t* seq_len = nullptr;
  int32_t* first_row = nullptr;
  char* offsets = nullptr;
  float* stats_rows = nullptr;
  size_t bytes = 0;
  // base null: only `bytes` is computed.
  DocumentScratch(const DocShape& d, void* base) {
    auto take = [&](size_t n) {
      char* at = base == nullptr ? nullptr : static_cast<char*>(base) + bytes;
      bytes += (n + 255) & ~static_cast<size_t>(255);
      return at;
    };
    seq_len = reinterpret_cast<int32_t*>(take(d.N * sizeof(int32_t)));
    first_row = reinterpret_cast<int32_t*>(take((d.N + 1) * sizeof(int32_t)));
    offsets = take(3 * (d.N + 1) * (d.wide ? sizeof(int64_t) : sizeof(int32_t)));
    stats_rows = reinterpret_cast<float*>(take(d.s.B * d.s.T * d.s.NH * sizeof(float)));
  }
  void* offsets_of(const DocShape& d, int which) const {  // 0 qkv, 1 out, 2 stats
    return offsets + which * (d.N + 1) * (d.wide ? sizeof(int64_t) : sizeof(int32_t));
  }
};

// The dropout's Philox seed and offset: (1,1,1,1) int64 tensors in device memory.
std::pair<std::shared_ptr<fe::graph::Tensor_attributes>, std::shared_ptr<fe::graph::Tensor_attributes>>
DropoutInputs(const GraphPtr& graph) {
  auto scalar = [&](const char* name, int64_t uid) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_data_type(fe::DataType_t::INT64));
  };
  return {scalar("seed", kSeed), scalar("offset", kOffset)};
}

GraphPtr ForwardGraph(const Shape& s) {
  GraphPtr graph = NewBf16Graph();
  auto q = GraphInput(graph, "q", kQ, s.dims(), s.qkv_strides());
  auto k = GraphInput(graph, "k", kK, s.kv_dims(), s.qkv_strides());
  auto v = GraphInput(graph, "v", kV, s.kv_dims(), s.qkv_strides());
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(s.scale());
  if (s.dropout > 0.f) {
    auto [seed, offset] = DropoutInputs(graph);
    options.set_dropout(s.dropout, seed, offset);
  }
  auto [o, stats] = graph->sdpa(q, k, v, options);
  o->set_output(true).set_dim(s.dims()).set_stride(s.out_strides()).set_uid(kO);
  stats->set_output(true)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(s.stats_dims())
      .set_stride(s.stats_strides())
      .set_uid(kStats);
  return graph;
}

GraphPtr BackwardGraph(const Shape& s) {
  GraphPtr graph = NewBf16Graph();
  auto q = GraphInput(graph, "q", kQ, s.dims(), s.qkv_strides());
  auto k = GraphInput(graph, "k", kK, s.kv_dims(), s.qkv_strides());
  auto v = GraphInput(graph, "v", kV, s.kv_dims(), s.qkv_strides());
  auto o = GraphInput(graph, "o", kO, s.dims(), s.out_strides());
  auto dout = GraphInput(graph, "dout", kDO, s.dims(), s.out_strides());
  auto stats = GraphInput(graph, "stats", kStats, s.stats_dims(), s.stats_strides());
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(s.scale());
  if (s.dropout > 0.f) {
    auto [seed, offset] = DropoutInputs(graph);
    options.set_dropout(s.dropout, seed, offset);
  }
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_dim(s.dims()).set_stride(s.qkv_strides()).set_uid(kDQ);
  dk->set_output(true).set_dim(s.kv_dims()).set_stride(s.qkv_strides()).set_uid(kDK);
  dv->set_output(true).set_dim(s.kv_dims()).set_stride(s.qkv_strides()).set_uid(kDV);
  return graph;
}

// Data.packing: documents: the ragged offsets (N+1, 1, 1, 1) and the sequence lengths
// (N, 1, 1, 1) i32 of DocShape.
std::shared_ptr<fe::graph::Tensor_attributes> RaggedOffsets(const GraphPtr& graph, const char* name,
                                                            int64_t uid, const DocShape& d) {
  return graph->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({d.N + 1, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(d.wide ? fe::DataType_t::INT64 : fe::DataType_t::INT32));
}
std::shared_ptr<fe::graph::Tensor_attributes> SequenceLengths(const GraphPtr& graph,
                                                              const char* name, int64_t uid,
                                                              const DocShape& d) {
  return graph->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({d.N, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
}

// q, k, v of DocShape with their ragged offsets (the backward's dq, dk, dv share them).
struct DocInputs {
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, q_offsets, k_offsets, v_offsets;
  DocInputs(const GraphPtr& graph, const DocShape& d)
      : q_offsets(RaggedOffsets(graph, "q_offsets", kQOffsets, d)),
        k_offsets(RaggedOffsets(graph, "k_offsets", kKOffsets, d)),
        v_offsets(RaggedOffsets(graph, "v_offsets", kVOffsets, d)) {
    q = GraphInput(graph, "q", kQ, d.dims(), d.qkv_strides());
    k = GraphInput(graph, "k", kK, d.kv_dims(), d.qkv_strides());
    v = GraphInput(graph, "v", kV, d.kv_dims(), d.qkv_strides());
    q->set_ragged_offset(q_offsets);
    k->set_ragged_offset(k_offsets);
    v->set_ragged_offset(v_offsets);
  }
};

// The padding mask's attributes and causal mask, shared by both directions' options.
template <typename Options>
Options& DocumentMasks(Options& options, const GraphPtr& graph, const DocShape& d) {
  options.set_causal_mask(true)
      .set_attn_scale(d.s.scale())
      .set_padding_mask(true)
      .set_seq_len_q(SequenceLengths(graph, "seq_len_q", kSeqLenQ, d))
      .set_seq_len_kv(SequenceLengths(graph, "seq_len_kv", kSeqLenKv, d));
  if (d.s.dropout > 0.f) {
    auto [seed, offset] = DropoutInputs(graph);
    options.set_dropout(d.s.dropout, seed, offset);
  }
  return options;
}

GraphPtr DocumentForwardGraph(const DocShape& d) {
  GraphPtr graph = NewBf16Graph();
  const DocInputs in(graph, d);
  auto options = fe::graph::SDPA_attributes().set_name("document_attention").set_generate_stats(true);
  auto [o, stats] = graph->sdpa(in.q, in.k, in.v, DocumentMasks(options, graph, d));
  o->set_output(true)
      .set_dim(d.dims())
      .set_stride(d.out_strides())
      .set_uid(kO)
      .set_ragged_offset(RaggedOffsets(graph, "o_offsets", kOOffsets, d));
  stats->set_output(true)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(d.stats_dims())
      .set_stride(d.stats_strides())
      .set_uid(kStats)
      .set_ragged_offset(RaggedOffsets(graph, "stats_offsets", kStatsOffsets, d));
  return graph;
}

GraphPtr DocumentBackwardGraph(const DocShape& d) {
  GraphPtr graph = NewBf16Graph();
  const DocInputs in(graph, d);
  auto o_offsets = RaggedOffsets(graph, "o_offsets", kOOffsets, d);
  auto o = GraphInput(graph, "o", kO, d.dims(), d.out_strides());
  auto dout = GraphInput(graph, "dout", kDO, d.dims(), d.out_strides());
  o->set_ragged_offset(o_offsets);
  dout->set_ragged_offset(o_offsets);
  auto stats = GraphInput(graph, "stats", kStats, d.stats_dims(), d.stats_strides());
  stats->set_data_type(fe::DataType_t::FLOAT)
      .set_ragged_offset(RaggedOffsets(graph, "stats_offsets", kStatsOffsets, d));
  const int64_t rows = d.s.B * d.s.T;
  auto options = fe::graph::SDPA_backward_attributes().set_name("document_attention_backward");
  options.set_max_total_seq_len_q(rows);
  if (d.ragged_kv_workspace) options.set_max_total_seq_len_kv(rows);
  auto [dq, dk, dv] =
      graph->sdpa_backward(in.q, in.k, in.v, o, dout, stats, DocumentMasks(options, graph, d));
  dq->set_output(true).set_dim(d.dims()).set_stride(d.qkv_strides()).set_uid(kDQ);
  dk->set_output(true).set_dim(d.kv_dims()).set_stride(d.qkv_strides()).set_uid(kDK);
  dv->set_output(true).set_dim(d.kv_dims()).set_stride(d.qkv_strides()).set_uid(kDV);
  dq->set_ragged_offset(in.q_offsets);
  dk->set_ragged_offset(in.k_offsets);
  dv->set_ragged_offset(in.v_offsets);
  return graph;
}

// Validates, lowers and plans the graph; false with the frontend's message when unsupported.
bool BuildPlans(const GraphPtr& graph, cudnnHandle_t handle, std::string* why) {
  fe::error_t e = graph->validate();
  if (e.is_good()) e = graph->build_operation_graph(handle);
  if (e.is_good()) e = graph->create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = graph->check_support(handle);
  if (e.is_good()) e = graph->build_plans(handle);
  if (e.is_bad()) *why = e.get_message();
  return e.is_good();
}

}  // namespace

struct CudnnAttention::Impl {
  CudnnContext cudnn;
  // (B, T, NH, NKV, HS, dropout, backward) -> graph; nullptr when cuDNN rejected the shape.
  std::map<std::tuple<int, int, int, int, int, float, bool>, GraphPtr> graphs;
  // Data.packing: documents: the same and the bucket (N, L) -> graph.
  std::map<std::tuple<int, int, int, int, int, float, bool, int64_t, int64_t>, GraphPtr>
      document_graphs;
  int64_t* rng = nullptr;  // device: the dropout's seed and offset (2 int64)

  ~Impl() {
    if (rng) cudaFree(rng);
  }

  // The dropout's seed and offset for this call, written on the stream (no host wait): a function
  // of the key's seed, step, layer, micro-batch and this rank's first head, so the same call of a
  // resumed run draws the same mask. cuDNN's mask depends on the local head index, so it differs
  // between TP layouts (docs/gpu.md).
  Status SetDropoutSeed(const DropoutKey& key) {
    if (rng == nullptr) CUDA_CHECK(cudaMalloc(&rng, 2 * sizeof(int64_t)));
    const Philox4 w = DropoutWords(key.seed, key.step, kDropoutAttnProbs, key.layer,
                                   key.first_head, key.first_sample, 0, 0);
    const int64_t seed = static_cast<int64_t>((static_cast<uint64_t>(w.v[0]) << 32) | w.v[1]);
    CUDA_CHECK(LaunchFillInt64Pair(rng, seed, 0, cudnn.stream));
    return Status::Ok();
  }

  // The graph cached under `key`, built by `build` (and the workspace grown) on first use;
  // nullptr, with one warning naming what `describe` says, where cuDNN rejects it.
  template <typename Key, typename Build, typename Describe>
  Status Cached(std::map<Key, GraphPtr>& cache, const Key& key, Build build, Describe describe,
                GraphPtr* out) {
    auto it = cache.find(key);
    if (it == cache.end()) {
      GraphPtr graph = build();
      std::string why;
      if (BuildPlans(graph, cudnn.handle, &why)) {
        int64_t bytes = 0;
        fe::error_t e = graph->get_workspace_size(bytes);
        if (e.is_bad())
          return RuntimeError("cuDNN attention workspace query (" + Where() +
                              "): " + e.get_message());
        TRAINER_RETURN_IF_ERROR(cudnn.GrowWorkspace(bytes));
      } else {
        // (with dropout: the fallback draws the CPU's mask instead)
        LogWarning("cuDNN has no fused attention " + describe() + " (" + why +
                   "); using the slower fallback kernels for this shape");
        graph = nullptr;
      }
      it = cache.emplace(key, graph).first;
    }
    *out = it->second;
    return Status::Ok();
  }

  static std::string Describe(const Shape& s, bool backward) {
    return StrFormat("%s for B=%lld T=%lld NH=%lld NKV=%lld HS=%lld",
                     backward ? "backward" : "forward", (long long)s.B, (long long)s.T,
                     (long long)s.NH, (long long)s.NKV, (long long)s.HS);
  }

  // The cached graph for the shape.
  Status Graph(const Shape& s, bool backward, GraphPtr* out) {
    const auto key = std::make_tuple((int)s.B, (int)s.T, (int)s.NH, (int)s.NKV, (int)s.HS,
                                     s.dropout, backward);
    return Cached(
        graphs, key, [&] { return backward ? BackwardGraph(s) : ForwardGraph(s); },
        [&] { return Describe(s, backward); }, out);
  }

  // The cached graph for the shape and documents' bucket.
  Status DocumentGraph(const DocShape& d, bool backward, GraphPtr* out) {
    const Shape& s = d.s;
    const auto key = std::make_tuple((int)s.B, (int)s.T, (int)s.NH, (int)s.NKV, (int)s.HS,
                                     s.dropout, backward, d.N, d.L);
    return Cached(
        document_graphs, key,
        [&] { return backward ? DocumentBackwardGraph(d) : DocumentForwardGraph(d); },
        [&] {
          return Describe(s, backward) +
                 StrFormat(" over documents (up to %lld sequences of up to %lld tokens)",
                           (long long)d.N, (long long)d.L);
        },
        out);
  }

  // Data.packing: documents (CudnnAttention::ForwardDocuments, BackwardDocuments): the forward
  // where dqkv is null (out and stats written), else the backward (dout read, dqkv written).
  Status Documents(DType dtype, const Shape& s, const DocumentShape& documents, const void* qkv,
                   void* out, float* stats, void* dqkv, const void* dout,
                   const DropoutKey& dropout, const int32_t* doc_starts, void* scratch,
                   bool* supported) {
    *supported = false;
    if (dtype != DType::kBF16 || !documents.known()) return Status::Ok();
    const bool backward = dqkv != nullptr;
    const DocShape d(s, documents);
    GraphPtr graph;
    TRAINER_RETURN_IF_ERROR(DocumentGraph(d, backward, &graph));
    if (!graph) return Status::Ok();
    const DocumentScratch sc(d, scratch);
    CUDA_CHECK(LaunchDocumentSequences(sc.seq_len, sc.first_row, sc.offsets, d.wide, doc_starts,
                                       (int)s.B, (int)s.T, (int)d.N, s.row(), s.NH * s.HS, s.NH,
                                       cudnn.stream));
    void* qkv_offsets = sc.offsets_of(d, 0);
    std::unordered_map<int64_t, void*> pack = {
        {kO, out},
        {kSeqLenQ, sc.seq_len},
        {kSeqLenKv, sc.seq_len},
        {kQOffsets, qkv_offsets},  // k and v: the same rows from their own base pointers
        {kKOffsets, qkv_offsets},
        {kVOffsets, qkv_offsets},
        {kOOffsets, sc.offsets_of(d, 1)},
        {kStatsOffsets, sc.offsets_of(d, 2)},
        {kStats, sc.stats_rows}};
    if (backward) pack[kDO] = const_cast<void*>(dout);
    TRAINER_RETURN_IF_ERROR(
        QkvPack(dtype, qkv, dqkv, (int)s.NH, (int)s.NKV, (int)s.HS, dropout, &pack));
    if (backward)
      CUDA_CHECK(LaunchTransposeAttentionStats(sc.stats_rows, stats, (int)s.B, (int)s.T,
                                               (int)s.NH, /*to_rows=*/true, cudnn.stream));
    *supported = true;
    TRAINER_RETURN_IF_ERROR(cudnn.Execute("document attention", graph, pack));
    if (!backward)
      CUDA_CHECK(LaunchTransposeAttentionStats(sc.stats_rows, stats, (int)s.B, (int)s.T,
                                               (int)s.NH, /*to_rows=*/false, cudnn.stream));
    return Status::Ok();
  }

  // q, k, v inside qkv (and dq, dk, dv inside dqkv where given), and the dropout's seed.
  Status QkvPack(DType dtype, const void* qkv, void* dqkv, int NH, int NKV, int HS,
                 const DropoutKey& dropout, std::unordered_map<int64_t, void*>* pack) {
    const size_t head = static_cast<size_t>(HS) * DTypeSize(dtype);  // bytes of one head
    char* base = static_cast<char*>(const_cast<void*>(qkv));
    (*pack)[kQ] = base;
    (*pack)[kK] = base + NH * head;
    (*pack)[kV] = base + (NH + NKV) * head;
    if (dqkv != nullptr) {
      char* dbase = static_cast<char*>(dqkv);
      (*pack)[kDQ] = dbase;
      (*pack)[kDK] = dbase + NH * head;
      (*pack)[kDV] = dbase + (NH + NKV) * head;
    }
    if (dropout.p > 0.f) {
      TRAINER_RETURN_IF_ERROR(SetDropoutSeed(dropout));
      (*pack)[kSeed] = rng;
      (*pack)[kOffset] = rng + 1;
    }
    return Status::Ok();
  }
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::Compiled() {
  return true;
}

Status CudnnAttention::Create(cudaStream_t stream, std::unique_ptr<CudnnAttention>* out) {
  std::unique_ptr<CudnnAttention> attention(new CudnnAttention());
  TRAINER_RETURN_IF_ERROR(attention->impl_->cudnn.Open(stream));
  *out = std::move(attention);
  return Status::Ok();
}

Status CudnnAttention::Forward(DType dtype, void* out, float* stats, const void* qkv, int B, int T,
                               int NH, int NKV, int HS, const DropoutKey& dropout,
                               bool* supported) {
  *supported = false;
  if (dtype != DType::kBF16) return Status::Ok();
  const Shape s{B, T, NH, NKV, HS, dropout.p};
  GraphPtr graph;
  TRAINER_RETURN_IF_ERROR(impl_->Graph(s, /*backward=*/false, &graph));
  if (!graph) return Status::Ok();
  std::unordered_map<int64_t, void*> pack = {{kO, out}, {kStats, stats}};
  TRAINER_RETURN_IF_ERROR(impl_->QkvPack(dtype, qkv, nullptr, NH, NKV, HS, dropout, &pack));
  *supported = true;
  return impl_->cudnn.Execute("attention", graph, pack);
}

Status CudnnAttention::Backward(DType dtype, void* dqkv, const void* dout, const void* qkv,
                                const void* out, const float* stats, int B, int T, int NH, int NKV,
                                int HS, const DropoutKey& dropout, bool* supported) {
  *supported = false;
  if (dtype != DType::kBF16) return Status::Ok();
  const Shape s{B, T, NH, NKV, HS, dropout.p};
  GraphPtr graph;
  TRAINER_RETURN_IF_ERROR(impl_->Graph(s, /*backward=*/true, &graph));
  if (!graph) return Status::Ok();
  std::unordered_map<int64_t, void*> pack = {{kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(stats)}};
  TRAINER_RETURN_IF_ERROR(impl_->QkvPack(dtype, qkv, dqkv, NH, NKV, HS, dropout, &pack));
  *supported = true;
  return impl_->cudnn.Execute("attention", graph, pack);
}

size_t CudnnAttention::DocumentScratchBytes(int B, int T, int NH, int NKV, int HS,
                                            const DocumentShape& documents) {
  return DocumentScratch(DocShape(Shape{B, T, NH, NKV, HS, 0.f}, documents), nullptr).bytes;
}

Status CudnnAttention::ForwardDocuments(DType dtype, void* out, float* stats, const void* qkv,
                                        int B, int T, int NH, int NKV, int HS,
                                        const DropoutKey& dropout, const int32_t* doc_starts,
                                        const DocumentShape& documents, void* scratch,
                                        bool* supported) {
  return impl_->Documents(dtype, Shape{B, T, NH, NKV, HS, dropout.p}, documents, qkv, out, stats,
                          nullptr, nullptr, dropout, doc_starts, scratch, supported);
}

Status CudnnAttention::BackwardDocuments(DType dtype, void* dqkv, const void* dout,
                                         const void* qkv, const void* out, const float* stats,
                                         int B, int T, int NH, int NKV, int HS,
                                         const DropoutKey& dropout, const int32_t* doc_starts,
                                         const DocumentShape& documents, void* scratch,
                                         bool* supported) {
  return impl_->Documents(dtype, Shape{B, T, NH, NKV, HS, dropout.p}, documents, qkv,
                          const_cast<void*>(out), const_cast<float*>(stats), dqkv, dout,
                          dropout, doc_starts, scratch, supported);
}

}  // namespace cuda
}  // namespace trainer

#else  // !TRAINER_WITH_CUDNN: no fused attention; every call reports "unsupported".

#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention() = default;
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::Compiled() {
  return false;
}

Status CudnnAttention::Create(cudaStream_t, std::unique_ptr<CudnnAttention>*) {
  return EnvironmentError("cuDNN fused attention (" + Where() +
                          "): this binary was built without the cuDNN frontend. Run "
                          "scripts/fetch_cudnn_frontend.sh and rebuild");
}
Status CudnnAttention::Forward(DType, void*, float*, const void*, int, int, int, int, int,
                               const DropoutKey&, bool* supported) {
  *supported = false;
  return Status::Ok();
}
Status CudnnAttention::Backward(DType, void*, const void*, const void*, const void*, const float*,
                                int, int, int, int, int, const DropoutKey&, bool* supported) {
  *supported = false;
  return Status::Ok();
}
size_t CudnnAttention::DocumentScratchBytes(int, int, int, int, int, const DocumentShape&) {
  return 0;
}
Status CudnnAttention::ForwardDocuments(DType, void*, float*, const void*, int, int, int, int, int,
                                        const DropoutKey&, const int32_t*, const DocumentShape&,
                                        void*, bool* supported) {
  *supported = false;
  return Status::Ok();
}
Status CudnnAttention::BackwardDocuments(DType, void*, const void*, const void*, const void*,
                                         const float*, int, int, int, int, int, const DropoutKey&,
                                         const int32_t*, const DocumentShape&, void*,
                                         bool* supported) {
  *supported = false;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer

#endif  // TRAINER_WITH_CUDNN
