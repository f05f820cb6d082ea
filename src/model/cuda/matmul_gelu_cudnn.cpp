// cuDNN frontend matmul + bias + GELU graphs (see matmul_gelu_cudnn.h): one per shape, built on
// first use with its plan chosen by the route policy (op cudnn_gelu_plan) or pinned, including the
// shapes cuDNN rejects (so a rejected shape costs one attempt).
#include "model/cuda/matmul_gelu_cudnn.h"

#if TRAINER_WITH_CUDNN

#include <cudnn_frontend.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cudnn_graph.h"
#include "model/cuda/op_checks.h"
#include "model/cuda/route_trial.h"

namespace trainer {
namespace cuda {

namespace fe = cudnn_frontend;

namespace {

enum TensorUid : int64_t { kIn = 1, kWeight, kBias, kPre, kOut };

// The heuristic's first plans built and timed per shape (each is a kernel compiled at run time,
// so building every plan would cost more start-up time for plans the heuristic ranks lower).
constexpr int64_t kPlansTimed = 6;

using GraphPtr = CudnnGraphPtr;

// pre (1,N,F) = in (1,N,C) x weight^T (1,C,F) [+ bias (1,1,F)], out = GELU_tanh(pre); the
// product and the bias add in f32, pre and out stored in bf16.
GraphPtr GeluGraph(int64_t N, int64_t C, int64_t F, bool bias) {
  GraphPtr g = NewBf16Graph();
  auto in = GraphInput(g, "in", kIn, {1, N, C}, {N * C, C, 1});
  auto weight_t = GraphInput(g, "weight_t", kWeight, {1, C, F}, {C * F, 1, C});  // weight (F,C)
  auto pre = g->matmul(in, weight_t,
                       fe::graph::Matmul_attributes().set_name("matmul").set_compute_data_type(
                           fe::DataType_t::FLOAT));
  pre->set_data_type(fe::DataType_t::FLOAT);
  if (bias) {
    auto b = GraphInput(g, "bias", kBias, {1, 1, F}, {F, F, 1});
    pre = g->pointwise(pre, b, PointwiseF32("bias", fe::PointwiseMode_t::ADD));
  }
  pre->set_output(true).set_uid(kPre).set_data_type(fe::DataType_t::BFLOAT16);
  auto out = g->pointwise(pre, PointwiseF32("gelu", fe::PointwiseMode_t::GELU_APPROX_TANH_FWD));
  out->set_output(true).set_uid(kOut).set_data_type(fe::DataType_t::BFLOAT16);
  return g;
}

// The shape as the route table names it.
std::string ShapeName(int64_t N, int64_t C, int64_t F, bool bias) {
  return StrFormat("N=%lld C=%lld F=%lld %s", (long long)N, (long long)C, (long long)F,
                   bias ? "bias" : "nobias");
}

std::unordered_map<int64_t, void*> Pack(const GeluMatmulArgs& a) {
  std::unordered_map<int64_t, void*> pack = {{kIn, const_cast<void*>(a.in)},
                                             {kWeight, const_cast<void*>(a.weight)},
                                             {kPre, a.pre},
                                             {kOut, a.out}};
  if (a.bias) pack[kBias] = const_cast<void*>(a.bias);
  return pack;
}

}  // namespace

struct CudnnGeluMatmul::Impl {
  struct Entry {
    GraphPtr graph;     // nullptr when cuDNN rejected the shape
    int64_t plan = -1;  // the fastest built plan
  };
  CudnnContext cudnn;
  // (N, C, F, bias) -> graph and plan.
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Entry> entries;

  const RouteTable* pins = nullptr;
  RouteTable* routes = nullptr;

  // Plans the shape's graph and builds its first plans; the entry keeps the one the route policy
  // picks on the call's operands (op kRouteOp; the outputs are written by those runs too), or the
  // one Engine.gpu_routes pins.
  Status Build(const GeluMatmulArgs& a, Entry* entry) {
    GraphPtr g = GeluGraph(a.N, a.C, a.F, a.bias != nullptr);
    fe::error_t e = g->validate();
    if (e.is_good()) e = g->build_operation_graph(cudnn.handle);
    if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    if (e.is_good()) e = g->check_support(cudnn.handle);
    if (e.is_bad()) return Status::Ok();  // unsupported: the caller keeps cuBLASLt
    std::unordered_map<int64_t, void*> pack = Pack(a);
    const int64_t count = std::min<int64_t>(g->get_execution_plan_count(), kPlansTimed);
    std::vector<int64_t> built;
    std::vector<std::string> names;
    for (int64_t i = 0; i < count; ++i) {
      int64_t bytes = 0;
      if (g->build_plan_at_index(i).is_bad() ||
          g->get_workspace_size_plan_at_index(i, bytes).is_bad())
        continue;
      TRAINER_RETURN_IF_ERROR(cudnn.GrowWorkspace(bytes));
      built.push_back(i);
      names.push_back(StrFormat("plan%lld", (long long)i));
    }
    if (built.empty()) return Status::Ok();
    const std::string shape = ShapeName(a.N, a.C, a.F, a.bias != nullptr);
    RouteTrial trial(static_cast<int>(built.size()));
    int pinned = -1;
    if (pins != nullptr)
      TRAINER_RETURN_IF_ERROR(pins->PinnedChoice(CudnnGeluMatmul::kRouteOp, shape, names,
                                                 std::vector<bool>(built.size(), true), &pinned));
    if (pinned >= 0) {
      trial.Pin(pinned);
    } else {
      TRAINER_RETURN_IF_ERROR(trial.RunToEnd(cudnn.stream, [&](int c) {
        return g->execute_plan_at_index(cudnn.handle, pack, cudnn.workspace, built[c]).is_good();
      }));
    }
    if (routes != nullptr) routes->Record(trial.Entry(CudnnGeluMatmul::kRouteOp, shape, names));
    if (trial.choice() < 0) return Status::Ok();  // every plan failed: cuBLASLt's route
    entry->plan = built[trial.choice()];
    entry->graph = g;
    return Status::Ok();
  }
};

CudnnGeluMatmul::CudnnGeluMatmul() : impl_(std::make_unique<Impl>()) {}
CudnnGeluMatmul::~CudnnGeluMatmul() = default;
bool CudnnGeluMatmul::Compiled() {
  return true;
}

Status CudnnGeluMatmul::Create(cudaStream_t stream, std::unique_ptr<CudnnGeluMatmul>* out) {
  std::unique_ptr<CudnnGeluMatmul> matmul(new CudnnGeluMatmul());
  TRAINER_RETURN_IF_ERROR(matmul->impl_->cudnn.Open(stream));
  *out = std::move(matmul);
  return Status::Ok();
}

void CudnnGeluMatmul::set_routes(const RouteTable* pins, RouteTable* chosen) {
  impl_->pins = pins;
  impl_->routes = chosen;
}

void CudnnGeluMatmul::Forget(const std::string& shape) {
  for (auto it = impl_->entries.begin(); it != impl_->entries.end(); ++it) {
    const auto& [N, C, F, bias] = it->first;
    if (ShapeName(N, C, F, bias) == shape) {
      impl_->entries.erase(it);
      return;
    }
  }
}

Status CudnnGeluMatmul::Run(const GeluMatmulArgs& a, bool* supported) {
  *supported = false;
  const auto key = std::make_tuple(a.N, a.C, a.F, a.bias != nullptr);
  auto it = impl_->entries.find(key);
  if (it == impl_->entries.end()) {
    Impl::Entry entry;
    TRAINER_RETURN_IF_ERROR(impl_->Build(a, &entry));
    it = impl_->entries.emplace(key, entry).first;
  }
  const Impl::Entry& entry = it->second;
  if (!entry.graph) return Status::Ok();
  std::unordered_map<int64_t, void*> pack = Pack(a);
  TRAINER_RETURN_IF_ERROR(impl_->cudnn.Execute("GELU matmul", entry.graph, pack, entry.plan));
  *supported = true;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer

#else  // !TRAINER_WITH_CUDNN: no fused GELU graphs; Create fails, so the backend keeps cuBLASLt.

#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

struct CudnnGeluMatmul::Impl {};
CudnnGeluMatmul::CudnnGeluMatmul() = default;
CudnnGeluMatmul::~CudnnGeluMatmul() = default;
bool CudnnGeluMatmul::Compiled() {
  return false;
}
Status CudnnGeluMatmul::Create(cudaStream_t, std::unique_ptr<CudnnGeluMatmul>*) {
  return EnvironmentError("cuDNN GELU matmul (" + Where() +
                          "): this binary was built without the cuDNN frontend");
}
void CudnnGeluMatmul::set_routes(const RouteTable*, RouteTable*) {}
void CudnnGeluMatmul::Forget(const std::string&) {}
Status CudnnGeluMatmul::Run(const GeluMatmulArgs&, bool* supported) {
  *supported = false;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer

#endif  // TRAINER_WITH_CUDNN
