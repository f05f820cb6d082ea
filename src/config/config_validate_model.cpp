// ValidateConfig's model checks (config_validate.cpp runs them): the family's keys, the q/k norm,
// mixture of experts, LoRA and document packing, none of which depends on the parallel layout.
#include <string>

#include "common/check.h"
#include "common/log.h"
#include "config/config_checker.h"
#include "config/config_diff.h"
#include "config/lora_targets.h"

namespace trainer {
namespace {

// The keys of one family that the other does not have, and the llama family's attention shape.
Status CheckModelFamily(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (m.rope_scaling == "none") {  // Llama 3's frequency scaling off: its settings do nothing
    for (const std::string& key : DifferingKeys(c, TrainConfig(), "Model.rope_")) {
      if (key == "Model.rope_theta" || key == "Model.rope_scaling") continue;
      return check.Fail(check.Show(key) + " is a setting of Model.rope_scaling=llama3, and " +
                            check.Show("Model.rope_scaling") + " (it would be ignored)",
                        {key, "Model.rope_scaling"},
                        "Set Model.rope_scaling=llama3 (Llama 3.1's long-context RoPE), or leave " +
                            key + " at its default");
    }
  }
  if (m.arch == "gpt2") {
    struct LlamaOnly {
      const char* key;
      bool set;
    };
    const LlamaOnly keys[] = {
        {"Model.num_kv_heads", m.num_kv_heads != 0 && m.num_kv_heads != m.num_heads},
        {"Model.head_dim", m.head_dim != 0 && m.head_dim * m.num_heads != m.hidden_size},
        {"Model.qkv_bias", m.qkv_bias},
        {"Model.qk_norm", m.qk_norm},
        {"Model.qk_norm_type", m.qk_norm_type != "head"},
        {"Model.tie_embeddings", !m.tie_embeddings},
        {"Model.rope_scaling", m.rope_scaling != "none"},
        {"Model.rope_theta", m.rope_theta != TrainConfig().model.rope_theta},
        {"Model.norm_eps", m.norm_eps != 1e-5},
    };
    for (const LlamaOnly& k : keys)
      if (k.set)
        return check.Fail(
            check.Show(k.key) + " is a key of the llama family, and Model.arch=gpt2",
            {k.key, "Model.arch"},
            std::string("Set Model.arch=llama, or leave ") + k.key + " at its default for GPT-2");
    return Status::Ok();
  }
  if (m.num_heads % m.kv_heads() != 0)
    return check.Fail(
        check.Show("Model.num_heads") + " is not divisible by " + check.Show("Model.num_kv_heads"),
        {"Model.num_heads", "Model.num_kv_heads"},
        StrFormat("Set Model.num_kv_heads to a divisor of %d (each key/value head "
                  "serves a whole group of query heads)",
                  m.num_heads));
  if (m.head_size() % 2 != 0 || m.head_size() <= 0)
    return check.Fail(StrFormat("the head size %d (Model.head_dim, or hidden_size/num_heads) is "
                                "odd: rotary position embedding rotates pairs of channels",
                                m.head_size()),
                      {"Model.head_dim", "Model.hidden_size", "Model.num_heads"},
                      "Set Model.head_dim to an even number");
  return Status::Ok();
}

// Model.qk_norm_type=full (OLMoE): one RMSNorm over all q heads and one over all k heads, which
// the q/k norm op computes as one head of num_heads x head_dim; it needs the whole of q on a rank.
Status CheckFullQkNorm(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (m.qk_norm_type != "full") return Status::Ok();
  if (!m.qk_norm)
    return check.Fail(check.Show("Model.qk_norm_type") + " without q/k norms (" +
                          check.Show("Model.qk_norm") + ")",
                      {"Model.qk_norm_type", "Model.qk_norm"},
                      "Set Model.qk_norm=true, or leave Model.qk_norm_type at head");
  if (m.kv_heads() != m.num_heads)
    return check.Fail(
        check.Show("Model.qk_norm_type") +
            " needs as many key/value heads as heads (OLMoE's attention): " +
            check.Show("Model.num_kv_heads") + ", " + check.Show("Model.num_heads"),
        {"Model.qk_norm_type", "Model.num_kv_heads"},
        StrFormat("Set Model.num_kv_heads=%d, or Model.qk_norm_type=head", m.num_heads));
  if (c.distributed.tp_degree > 1)
    return check.Fail(check.Show("Model.qk_norm_type") +
                          " normalises q and k over every head, and " +
                          check.Show("Distributed.tp_degree") + " splits the heads over ranks",
                      {"Model.qk_norm_type", "Distributed.tp_degree"},
                      "Set Distributed.tp_degree=1 (data, pipeline and sharding parallelism work)");
  return Status::Ok();
}

// A feature's settings (the keys named `prefix`...) away from their defaults while `off_key` turns
// the feature off: the first one, refused in one line (`what` it is, what `off_key` does, the fix
// `turn_on` or leaving it at its default `otherwise`); they would be ignored.
Status RefuseSettingsWithoutFeature(const TrainConfig& c, Checker& check, const std::string& prefix,
                                    const char* what, const char* off_key, const char* effect,
                                    const char* turn_on, const char* otherwise) {
  const std::vector<std::string> set = DifferingKeys(c, TrainConfig(), prefix);
  if (set.empty()) return Status::Ok();
  const std::string& key = set.front();
  return check.Fail(check.Show(key) + " is " + what + ", and " + check.Show(off_key) + " " + effect,
                    {key, off_key},
                    std::string(turn_on) + ", or leave " + key + " at its default " + otherwise);
}

// The mixture-of-experts keys (Model.num_experts > 0) against each other and the family.
Status CheckMoe(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (!m.moe())  // the experts' settings without experts: a MoE model was meant
    return RefuseSettingsWithoutFeature(
        c, check, "Model.moe_", "a mixture-of-experts setting", "Model.num_experts",
        "makes every MLP dense (it would be ignored)",
        "Set Model.num_experts (e.g. 8) for MoE layers", "for a dense model");
  if (m.arch != "llama")
    return check.Fail(
        check.Show("Model.num_experts") +
            " asks for experts, which are SwiGLU MLPs of the llama family, and " +
            check.Show("Model.arch"),
        {"Model.num_experts", "Model.arch"},
        "Set Model.arch=llama, or Model.num_experts=0 (the moe_* keys at their defaults) "
        "for GPT-2");
  if (m.moe_router_topk > m.num_experts)
    return check.Fail(
        check.Show("Model.moe_router_topk") + " exceeds " + check.Show("Model.num_experts"),
        {"Model.moe_router_topk", "Model.num_experts"},
        StrFormat("Set Model.moe_router_topk to at most %d", m.num_experts));
  bool any_moe_layer = false;
  for (int layer = 0; layer < m.num_layers && !any_moe_layer; ++layer)
    any_moe_layer = m.moe_layer(layer);
  if (!any_moe_layer) {
    int first = m.moe_first_k_dense;  // the first MoE layer these keys would give
    while (first % m.moe_layer_freq != 0) ++first;
    return check.Fail(
        check.Show("Model.moe_first_k_dense") + " and " + check.Show("Model.moe_layer_freq") +
            " leave no MoE layer among " + check.Show("Model.num_layers") +
            StrFormat(" (the first would be layer %d)", first),
        {"Model.moe_first_k_dense", "Model.moe_layer_freq", "Model.num_layers"},
        StrFormat(
            "Set Model.moe_first_k_dense and Model.moe_layer_freq so that a "
            "layer below %d is a MoE layer (e.g. moe_first_k_dense=0, "
            "moe_layer_freq=1), or Model.num_experts=0 (the moe_* keys at their defaults) for a "
            "dense model",
            m.num_layers));
  }
  return Status::Ok();
}

// Model.lora_*: the targets name linears of the family.
Status CheckLora(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (!m.lora())  // the adapters' settings without adapters: LoRA was meant
    return RefuseSettingsWithoutFeature(
        c, check, "Model.lora_", "a LoRA setting", "Model.lora_rank",
        "turns LoRA off (every weight would train)",
        "Set Model.lora_rank (e.g. 16) to fine-tune with LoRA", "for full training");
  std::vector<std::string> targets;
  std::string error;
  if (!ParseLoraTargets(m, &targets, &error))
    return check.Fail(check.Show("Model.lora_targets") + ": " + error, {"Model.lora_targets"},
                      m.arch == "llama" ? "Set Model.lora_targets to e.g. q,k,v,o,gate,up,down"
                                        : "Set Model.lora_targets to e.g. c_attn,c_proj,c_fc");
  if (m.moe())
    return check.Fail(check.Show("Model.lora_rank") + " with " + check.Show("Model.num_experts") +
                          ": LoRA on mixture-of-experts models is not supported yet",
                      {"Model.lora_rank", "Model.num_experts"},
                      "Set Model.lora_rank=0 to fine-tune every weight of a MoE model");
  if (c.distributed.zero_stage() >= 2)
    return check.Fail(
        check.Show("Model.lora_rank") + " with " +
            check.Show("Distributed.sharding.sharding_stage") +
            ": LoRA's frozen base is not sharded; LoRA runs with sharding stage 0 or 1",
        {"Model.lora_rank", "Distributed.sharding.sharding_stage"},
        "Set Distributed.sharding.sharding_stage=1 (the adapters' optimizer state is "
        "small anyway)");
  return Status::Ok();
}

}  // namespace

// Shapes that do not depend on the parallel layout.
Status CheckModel(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (m.seq_len > m.max_seq_len) {
    return check.Fail(check.Show("Model.seq_len") + " exceeds " + check.Show("Model.max_seq_len"),
                      {"Model.seq_len", "Model.max_seq_len"},
                      StrFormat("Set Model.seq_len to at most %d (0 means max_seq_len), or, for "
                                "a new model (not a checkpoint's), raise Model.max_seq_len",
                                m.max_seq_len));
  }
  // Before the family checks, which read the head size hidden_size / num_heads.
  if (m.head_dim == 0 && m.hidden_size % m.num_heads != 0) {
    // Suggestions that the next checks accept: RoPE (llama) rotates pairs, so there the head
    // size is even; the query heads stay a multiple of Model.num_kv_heads.
    const int pair = m.arch == "llama" ? 2 : 1, step = pair * m.num_heads;
    const int example = m.hidden_size / step * step;
    const int kv = m.num_kv_heads > 0 ? m.num_kv_heads : 1;
    int heads = m.num_heads;  // the nearest such head count below
    while (heads > 0 &&
           (m.hidden_size % heads != 0 || (m.hidden_size / heads) % pair != 0 || heads % kv != 0))
      --heads;
    return check.Fail(
        check.Show("Model.hidden_size") + " is not divisible by " + check.Show("Model.num_heads"),
        {"Model.hidden_size", "Model.num_heads"},
        StrFormat("Set Model.hidden_size to a multiple of %d, e.g. %d%s", step,
                  example > 0 ? example : step,
                  heads > 0 ? StrFormat(", or Model.num_heads to a divisor of %d, e.g. %d",
                                        m.hidden_size, heads)
                                  .c_str()
                            : ""));
  }
  TRAINER_RETURN_IF_ERROR(CheckModelFamily(c, check));
  TRAINER_RETURN_IF_ERROR(CheckFullQkNorm(c, check));
  TRAINER_RETURN_IF_ERROR(CheckMoe(c, check));
  TRAINER_RETURN_IF_ERROR(CheckLora(c, check));
  if (c.data.packed_documents() && c.model.arch != "llama")  // learned positions: no restart
    return check.Fail(check.Show("Data.packing") +
                          " restarts RoPE positions at each document, "
                          "and " +
                          check.Show("Model.arch") + " has learned positions",
                      {"Data.packing", "Model.arch"},
                      "Set Data.packing=concat for GPT-2, or use a llama-family model");
  return Status::Ok();
}

}  // namespace trainer
