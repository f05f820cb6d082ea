// The contracts of Backend's Llama-family ops (backend.h), checked once for every backend: each
// public op checks its tensors' shapes and dtypes here (op_contract.h), then calls the backend's
// Run* hook. The older ops' contracts are in op_contracts.cpp.
#include "model/backend.h"

#include "model/op_contract.h"

namespace trainer {

using contract::CheckDocStarts;
using contract::HeadSize;
using contract::HeadsText;
using contract::OpContract;

Status Backend::RmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  const DType cd = compute_dtype();
  const int64_t N = Rows(in), C = Cols(in);
  OpContract c(*this, "RmsNormForward");
  c.Has("in", in, cd, -1)
      .Has("out", out, cd, N * C)
      .Has("rstd", rstd, DType::kF32, N)
      .Has("weight", weight, cd, C)
      .Require(eps > 0.f, "eps must be positive");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunRmsNormForward(out, rstd, in, weight, eps);
}

Status Backend::RmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                                Tensor rstd) {
  const DType cd = compute_dtype();
  const int64_t N = Rows(in), C = Cols(in);
  OpContract c(*this, "RmsNormBackward");
  c.Has("in", in, cd, -1)
      .Has("din", din, cd, N * C)
      .Has("dout", dout, cd, N * C)
      .Has("weight", weight, cd, C)
      .Has("dweight", dweight, DType::kF32, C)
      .Has("rstd", rstd, DType::kF32, N);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunRmsNormBackward(din, dweight, dout, in, weight, rstd);
}

Status Backend::AddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a, Tensor b,
                                  Tensor weight, float eps) {
  const DType cd = compute_dtype();
  const int64_t N = Rows(a), C = Cols(a);
  OpContract c(*this, "AddRmsNormForward");
  c.Has("a", a, cd, -1)
      .Has("b", b, cd, N * C)
      .Has("residual", residual, cd, N * C)
      .Has("out", out, cd, N * C)
      .Has("rstd", rstd, DType::kF32, N)
      .Has("weight", weight, cd, C)
      .Require(eps > 0.f, "eps must be positive");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAddRmsNormForward(residual, out, rstd, a, b, weight, eps);
}

Status Backend::RunAddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a, Tensor b,
                                     Tensor weight, float eps) {
  TRAINER_RETURN_IF_ERROR(Add(residual, a, b));
  return RunRmsNormForward(out, rstd, residual, weight, eps);
}

Status Backend::QkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight, Tensor k_weight,
                              int num_heads, int num_kv_heads, float eps) {
  const DType cd = compute_dtype();
  const int64_t HD = HeadSize(in, num_heads, num_kv_heads), N = Rows(in);
  OpContract c(*this, "QkNormForward");
  c.Has("in", in, cd, -1)
      .Require(HD > 0, HeadsText(in, num_heads, num_kv_heads))
      .Has("out", out, cd, in.numel())
      .Require(out.data != in.data, "out must not alias in")
      .Has("rstd", rstd, DType::kF32, N * (num_heads + num_kv_heads))
      .Has("q_weight", q_weight, cd, HD)
      .Has("k_weight", k_weight, cd, HD)
      .Require(eps > 0.f, "eps must be positive");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunQkNormForward(out, rstd, in, q_weight, k_weight, num_heads, num_kv_heads, eps);
}

Status Backend::QkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout,
                               Tensor in, Tensor q_weight, Tensor k_weight, Tensor rstd,
                               int num_heads, int num_kv_heads) {
  const DType cd = compute_dtype();
  const int64_t HD = HeadSize(in, num_heads, num_kv_heads), N = Rows(in);
  OpContract c(*this, "QkNormBackward");
  c.Has("in", in, cd, -1)
      .Require(HD > 0, HeadsText(in, num_heads, num_kv_heads))
      .Has("din", din, cd, in.numel())
      .Has("dout", dout, cd, in.numel())
      .Has("rstd", rstd, DType::kF32, N * (num_heads + num_kv_heads))
      .Has("q_weight", q_weight, cd, HD)
      .Has("k_weight", k_weight, cd, HD)
      .Has("dq_weight", dq_weight, DType::kF32, HD)
      .Has("dk_weight", dk_weight, DType::kF32, HD);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunQkNormBackward(din, dq_weight, dk_weight, dout, in, q_weight, k_weight, rstd, num_heads,
                           num_kv_heads);
}

namespace {
Status CheckRope(const Backend& backend, const char* op, const char* name, const Tensor& qkv,
                 const Tensor& cos_sin, int num_heads, int num_kv_heads,
                 const Tensor& doc_starts) {
  const int64_t HD = HeadSize(qkv, num_heads, num_kv_heads);
  OpContract c(backend, op);
  c.Has(name, qkv, backend.compute_dtype(), -1)
      .Require(HD > 0 && HD % 2 == 0,
               HeadsText(qkv, num_heads, num_kv_heads) + ", with an even head size")
      .Has("cos_sin", cos_sin, DType::kF32, -1)
      .Require(cos_sin.ndim == 3 && cos_sin.dim(0) == 2 && cos_sin.dim(2) == HD / 2 &&
                   cos_sin.dim(1) >= qkv.dim(1),
               StrFormat("cos_sin %s is not (2, P >= T = %lld, HD/2 = %lld)",
                         cos_sin.shape_string().c_str(),
                         static_cast<long long>(qkv.ndim == 3 ? qkv.dim(1) : 0),
                         static_cast<long long>(HD / 2)));
  CheckDocStarts(c, doc_starts, qkv);
  return c.status();
}
}  // namespace

Status Backend::RopeForward(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                            Tensor doc_starts) {
  TRAINER_RETURN_IF_ERROR(CheckRope(*this, "RopeForward", "qkv", qkv, cos_sin, num_heads,
                                    num_kv_heads, doc_starts));
  return RunRope(qkv, cos_sin, num_heads, num_kv_heads, false, doc_starts);
}

Status Backend::RopeBackward(Tensor dqkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                             Tensor doc_starts) {
  TRAINER_RETURN_IF_ERROR(CheckRope(*this, "RopeBackward", "dqkv", dqkv, cos_sin, num_heads,
                                    num_kv_heads, doc_starts));
  return RunRope(dqkv, cos_sin, num_heads, num_kv_heads, true, doc_starts);
}

Status Backend::SwiGluForward(Tensor out, Tensor gate_up) {
  const DType cd = compute_dtype();
  const int64_t N = Rows(gate_up), F = Cols(gate_up) / 2;
  OpContract c(*this, "SwiGluForward");
  c.Has("gate_up", gate_up, cd, -1)
      .Require(Cols(gate_up) % 2 == 0, "gate_up " + gate_up.shape_string() + " has an odd width")
      .Has("out", out, cd, N * F)
      .Require(Cols(out) == F, "out " + out.shape_string() + " is not (N, F) for gate_up (N, 2F)");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunSwiGluForward(out, gate_up);
}

Status Backend::SwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  const DType cd = compute_dtype();
  const int64_t N = Rows(gate_up), F = Cols(gate_up) / 2;
  OpContract c(*this, "SwiGluBackward");
  c.Has("gate_up", gate_up, cd, -1)
      .Require(Cols(gate_up) % 2 == 0, "gate_up " + gate_up.shape_string() + " has an odd width")
      .Has("dout", dout, cd, N * F)
      .Has("dgate_up", dgate_up, cd, N * 2 * F)
      .Require(dgate_up.data != dout.data && dgate_up.data != gate_up.data,
               "dgate_up must not alias dout or gate_up");
  c.Optional(act)
      .Like("act", act, cd, "dout", dout)
      .Require(act.empty() ||
                   (act.data != dout.data && act.data != gate_up.data && act.data != dgate_up.data),
               "act must not alias dout, gate_up or dgate_up");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunSwiGluBackward(dgate_up, dout, gate_up, act);
}

}  // namespace trainer
