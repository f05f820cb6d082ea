// OpContract: the checker behind Backend's public ops (backend.cpp, op_contracts.cpp). Each op
// checks its tensors' dtypes, element counts and shape agreement here, once for every backend,
// then calls the backend's Run* hook. Tensors are seen as matrices: rows = all leading
// dimensions, cols = the last one, so (B,T,C) and (B*T,C) are interchangeable.
#pragma once

#include <cstdint>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "common/tensor.h"
#include "model/backend.h"

namespace trainer {
namespace contract {

// Checks of one op call on one backend; the first failure is kept and named in one line:
// "<Op> (<backend> backend, rank R): <what disagrees>. This is a bug in the calling layer: ...".
class OpContract {
 public:
  OpContract(const Backend& backend, const char* op) : backend_(backend), op_(op) {}

  Status status() const { return status_; }

  // t is non-empty, of `dtype`, with `numel` elements (any numel when numel < 0).
  OpContract& Has(const char* name, const Tensor& t, DType dtype, int64_t numel) {
    if (!status_.ok() || Skip()) return *this;
    if (!HasType(name, t, dtype)) return *this;
    if (numel >= 0 && t.numel() != numel)
      Fail(StrFormat("%s %s has %lld elements, expected %lld", name, t.shape_string().c_str(),
                     static_cast<long long>(t.numel()), static_cast<long long>(numel)));
    return *this;
  }
  // t is non-empty, of `dtype`, with `per_row` values for each row of `ref` (named ref_name):
  // "mean (3) has 3 elements, expected 4 (1 per row of in (4, 6))" otherwise.
  OpContract& PerRow(const char* name, const Tensor& t, DType dtype, int64_t per_row,
                     const char* ref_name, const Tensor& ref) {
    return Sized(name, t, dtype, per_row * Rows(ref), StrFormat("%lld per row", (long long)per_row),
                 ref_name, ref);
  }
  // t is non-empty, of `dtype`, with one value per column of `ref`.
  OpContract& PerColumn(const char* name, const Tensor& t, DType dtype, const char* ref_name,
                        const Tensor& ref) {
    return Sized(name, t, dtype, Cols(ref), "1 per column", ref_name, ref);
  }
  // As the other checks, but an empty tensor (an output to skip, an absent input) passes.
  OpContract& Optional(const Tensor& t) {
    skip_next_ = t.empty();
    return *this;
  }
  // t is non-empty, of `dtype`, and has ref's shape: the same last dimension and element count.
  OpContract& Like(const char* name, const Tensor& t, DType dtype, const char* ref_name,
                   const Tensor& ref) {
    if (!status_.ok() || Skip()) return *this;
    if (!HasType(name, t, dtype)) return *this;
    Agree(name, t, ref_name, ref, "the last dimension", Cols(t), Cols(ref));
    return Agree(name, t, ref_name, ref, "the number of elements", t.numel(), ref.numel());
  }
  // "<a> (shape) and <b> (shape) disagree on <what> (a_value vs b_value)" unless equal.
  OpContract& Agree(const char* a, const Tensor& ta, const char* b, const Tensor& tb,
                    const char* what, int64_t a_value, int64_t b_value) {
    if (status_.ok() && a_value != b_value)
      Fail(StrFormat("%s %s and %s %s disagree on %s (%lld vs %lld)", a, ta.shape_string().c_str(),
                     b, tb.shape_string().c_str(), what, static_cast<long long>(a_value),
                     static_cast<long long>(b_value)));
    return *this;
  }
  // t has `ndim` dimensions.
  OpContract& Dims(const char* name, const Tensor& t, int ndim) {
    if (status_.ok() && t.ndim != ndim)
      Fail(StrFormat("%s %s has %d dimensions, expected %d", name, t.shape_string().c_str(),
                     static_cast<int>(t.ndim), ndim));
    return *this;
  }
  // t is non-empty and f32 or of the backend's compute dtype (elementwise spans).
  OpContract& Float(const char* name, const Tensor& t) {
    if (!status_.ok() || Skip()) return *this;
    const DType cd = backend_.compute_dtype();
    if (t.dtype != DType::kF32 && t.dtype != cd)
      Fail(StrFormat("%s %s is %s, expected f32 or %s", name, t.shape_string().c_str(),
                     DTypeName(t.dtype), DTypeName(cd)));
    else
      HasType(name, t, t.dtype);
    return *this;
  }
  // t has data and is f32 or bf16 (the dtypes Convert and Scale take on every backend); it may
  // hold no elements.
  OpContract& F32OrBf16(const char* name, const Tensor& t) {
    if (!status_.ok() || Skip()) return *this;
    if (t.empty())
      Fail(StrFormat("%s %s is empty", name, t.shape_string().c_str()));
    else if (t.dtype != DType::kF32 && t.dtype != DType::kBF16)
      Fail(StrFormat("%s %s is %s, expected f32 or bf16", name, t.shape_string().c_str(),
                     DTypeName(t.dtype)));
    return *this;
  }
  // t is non-empty, of `dtype`, with as many elements as `ref`.
  OpContract& SameCount(const char* name, const Tensor& t, DType dtype, const char* ref_name,
                        const Tensor& ref) {
    return Sized(name, t, dtype, ref.numel(), "the elements", ref_name, ref);
  }
  // `what` holds: else "<why>".
  OpContract& Require(bool what, const std::string& why) {
    if (status_.ok() && !what) Fail(why);
    return *this;
  }

 private:
  bool Skip() {
    const bool skip = skip_next_;
    skip_next_ = false;
    return skip;
  }
  // Non-empty and of `dtype`; false after a failure.
  bool HasType(const char* name, const Tensor& t, DType dtype) {
    if (t.empty() || t.numel() == 0)
      Fail(StrFormat("%s %s is empty", name, t.shape_string().c_str()));
    else if (t.dtype != dtype)
      Fail(StrFormat("%s %s is %s, expected %s", name, t.shape_string().c_str(), DTypeName(t.dtype),
                     DTypeName(dtype)));
    return status_.ok();
  }
  OpContract& Sized(const char* name, const Tensor& t, DType dtype, int64_t numel,
                    const std::string& what, const char* ref_name, const Tensor& ref) {
    if (!status_.ok() || Skip()) return *this;
    if (HasType(name, t, dtype) && t.numel() != numel)
      Fail(StrFormat("%s %s has %lld elements, expected %lld (%s of %s %s)", name,
                     t.shape_string().c_str(), static_cast<long long>(t.numel()),
                     static_cast<long long>(numel), what.c_str(), ref_name,
                     ref.shape_string().c_str()));
    return *this;
  }
  void Fail(const std::string& why) {
    status_ = RuntimeError(StrFormat(
        "%s (%s backend, rank %d): %s. This is a bug in the calling layer: pass tensors of the "
        "shapes that src/model/backend.h documents for %s",
        op_, backend_.name().c_str(), GetProcessIdentity().rank, why.c_str(), op_));
  }
  const Backend& backend_;
  const char* op_;
  bool skip_next_ = false;
  Status status_;
};

// qkv-like tensor (B,T,(NH+2*NKV)*HD): its head size, or 0 when it does not split so.
inline int64_t HeadSize(const Tensor& qkv, int num_heads, int num_kv_heads) {
  const int64_t slots = static_cast<int64_t>(num_heads) + 2 * static_cast<int64_t>(num_kv_heads);
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || qkv.ndim != 3 ||
      Cols(qkv) % slots != 0)
    return 0;
  return Cols(qkv) / slots;
}

inline std::string HeadsText(const Tensor& qkv, int num_heads, int num_kv_heads) {
  return StrFormat(
      "qkv %s does not split into %d query heads and 2 x %d key/value heads (B,T,"
      "(NH+2*NKV)*HD) with NH a multiple of NKV",
      qkv.shape_string().c_str(), num_heads, num_kv_heads);
}

// Data.packing's doc_starts (B,T) i32 against qkv (B,T,...): empty (no documents), or one per
// row of qkv.
inline void CheckDocStarts(OpContract& c, const Tensor& doc_starts, const Tensor& qkv) {
  c.Optional(doc_starts).PerRow("doc_starts", doc_starts, DType::kI32, 1, "qkv", qkv);
}

}  // namespace contract
}  // namespace trainer
