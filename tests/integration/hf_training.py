"""Helper of hf_training.sh: whole training steps of the trainer against torch on transformers.

  hf_training.py make DIR      the five tiny random models below, saved to DIR/hf-CASE
  hf_training.py check TEXT T SETTINGS_JSON HF_DIR:RUN_DIR:EXPORT_DIR...
      torch trains transformers' model of each HF_DIR (float32 on the CPU) for the steps of
      SETTINGS_JSON on the samples the trainer packs from TEXT: each step's batch is the whole
      file, its (num_tokens - 1) / T windows of T + 1 tokens (the bytes, then the
      end-of-document 256; docs/data-format.md), and its loss the mean cross-entropy over all
      their targets. The optimizer is the trainer's as docs/config.md states it: AdamW with
      decoupled weight decay on the tensors of two or more dimensions (matrices, embeddings,
      experts, routers) and none on biases and norm weights, eps added to the square root of the
      bias-corrected second moment (torch's form), after clip_grad_norm_ over every parameter (a
      tied embedding once). The trainer's run RUN_DIR must log torch's loss and pre-clip gradient
      norm at every step (metrics.jsonl), and its export EXPORT_DIR must hold every one of the
      model's tensors with torch's values after the last step.

Cases (hidden 64, 4 heads, vocabulary 257, 32 positions; every weight random, as hf_llama.py's):
  llama      hf_llama.py's LlamaForCausalLM: GQA, llama3 rope_scaling, untied, 20 KB shards
  qwen2      hf_llama.py's Qwen2ForCausalLM: q/k/v biases, GQA, tied embeddings
  gpt2       GPT2LMHeadModel, 2 layers: learned positions, LayerNorm, biases everywhere, tied
  qwen2_moe  hf_moe.py's Qwen2MoeForCausalLM: layer 0 dense, 8 experts top-2, a shared expert
             with its sigmoid gate, q/k/v biases. Its loss has no router term (transformers adds
             one only with output_router_logits, which is off), so the trainer's MoE loss
             coefficients are 0 (hf_training.sh).
  olmoe      hf_moe.py's OlmoeForCausalLM: 8 experts top-2 in both layers, the q/k norms over all
             heads together (no loss term either)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import load_weights, make as make_llama, randomize  # noqa: E402
from hf_moe import make as make_moe  # noqa: E402

# The loss and the gradient norm of each step: 1e-5 relative (they agree to ~1e-6).
STEP_TOLERANCE = 1e-5
# The weights after the last step: the largest difference of one element of a tensor, over the
# largest change the steps made to that tensor (~3e-2: lr * steps, as Adam moves an element by
# about lr a step); 1e-3 of it is ~3e-5, 1e-4 or less of each tensor's largest element. With eps
# 1e-4 (hf_training.sh) Adam turns a gradient element's fp32 rounding dg into an update error of
# up to lr * dg / (|g| + eps), and the later steps carry it on: torch's own float32 run differs
# from its float64 run by up to 1.5e-4 of the change (OLMoE), the trainer's from torch's by up to
# 2.1e-4 (Qwen2-MoE's embedding). A wrong detail moves whole tensors by more: weight decay on a
# norm weight (~1) or a bias moves it by 0.1 * lr * |w| a step, 1e-2 or more of the change.
WEIGHT_TOLERANCE = 1e-3


def make(out):
    """The five models, saved by transformers as the trainer's Checkpoint.init_from reads them."""
    make_llama("llama", f"{out}/hf-llama")
    make_llama("qwen2", f"{out}/hf-qwen2")
    make_moe("qwen2_moe", f"{out}/hf-qwen2_moe")
    make_moe("olmoe", f"{out}/hf-olmoe")
    make_gpt2(f"{out}/hf-gpt2")


def make_gpt2(out):
    """The gpt2 case (also hf_lora.py's), saved to OUT."""
    import transformers as tf
    cfg = tf.GPT2Config(vocab_size=257, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=256,
                        eos_token_id=256)
    model = tf.GPT2LMHeadModel(cfg)
    # LayerNorm weights (ln_1, ln_2, ln_f) around 1, as randomize draws the "norm" ones.
    randomize(((n.replace("ln_", "norm_"), p) for n, p in model.named_parameters()), 4)
    model.save_pretrained(out, safe_serialization=True)


def samples(text, T):
    """The trainer's packed samples of TEXT: windows of T + 1 tokens starting every T tokens;
    the inputs are their first T, the targets their last T."""
    stream = list(open(text, "rb").read()) + [256]
    windows = torch.tensor([stream[i * T:i * T + T + 1] for i in range((len(stream) - 1) // T)])
    return windows[:, :-1], windows[:, 1:]


def train_torch(folder, inputs, targets, s):
    """s["steps"] steps of transformers' model under torch's AdamW and clip_grad_norm_: the
    losses, the pre-clip gradient norms, and each named weight before and after."""
    import transformers as tf
    dtype = "dtype" if int(tf.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model = tf.AutoModelForCausalLM.from_pretrained(folder, **{dtype: torch.float32})
    model.train()  # no dropout: every model's rates are 0
    params = dict(model.named_parameters())  # a tied embedding once
    initial = {k: p.detach().clone() for k, p in params.items()}
    opt = torch.optim.AdamW([{"params": [p for p in params.values() if p.dim() >= 2]},
                             {"params": [p for p in params.values() if p.dim() < 2],
                              "weight_decay": 0.0}],
                            lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"],
                            weight_decay=s["weight_decay"])
    losses, norms = [], []
    for _ in range(s["steps"]):
        opt.zero_grad()
        logits = model(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(params.values(), s["grad_clip"]).item())
        opt.step()
        losses.append(loss.item())
    return losses, norms, initial, {k: p.detach() for k, p in params.items()}


def weight_error(export, initial, trained):
    """The worst tensor of the export: (max |export - torch| / max |torch's change|, its name)."""
    got = load_weights(export)
    with open(os.path.join(export, "config.json")) as f:  # a tied head may be left out
        tied = {"lm_head.weight"} if json.load(f).get("tie_word_embeddings") else set()
    missing = sorted(set(trained) - set(got) - tied)
    extra = sorted(set(got) - set(trained) - tied)
    assert not missing and not extra, f"{export}: missing {missing[:4]}, extra {extra[:4]}"
    worst = (0.0, "")
    for name in set(trained) & set(got):
        assert got[name].shape == trained[name].shape, f"{export}: {name} {list(got[name].shape)}"
        change = (trained[name] - initial[name]).abs().max().item()
        error = (got[name].float() - trained[name]).abs().max().item()
        worst = max(worst, (error / max(change, 1e-30), name))
    return worst


def check(text, T, settings, runs):
    s = json.load(open(settings))
    inputs, targets = samples(text, T)
    failures, reference = [], {}
    for run in runs:
        folder, run_dir, export = run.split(":")
        if folder not in reference:
            reference[folder] = train_torch(folder, inputs, targets, s)
        losses, norms, initial, trained = reference[folder]
        records = [r for r in map(json.loads, open(f"{run_dir}/metrics.jsonl")) if "loss" in r]
        assert [r["step"] for r in records] == list(range(1, s["steps"] + 1)), records
        loss_error = max(abs(r["loss"] - l) / l for r, l in zip(records, losses))
        norm_error = max(abs(r["grad_norm"] - n) / n for r, n in zip(records, norms))
        error, name = weight_error(export, initial, trained)
        clipped = sum(n > s["grad_clip"] for n in norms)
        print(f"{run_dir}: torch's losses {' '.join(f'{l:.5f}' for l in losses)}, gradient "
              f"norms {' '.join(f'{n:.3f}' for n in norms)} ({clipped} clipped to "
              f"{s['grad_clip']}); the trainer's differ by {loss_error:.1e}, {norm_error:.1e} "
              f"(relative), its weights by {error:.1e} of the change ({name})")
        if clipped == 0:
            failures.append(f"{folder}: no step clipped; lower the test's grad_clip")
        if loss_error > STEP_TOLERANCE:
            failures.append(f"{run_dir}: the losses are not torch's")
        if norm_error > STEP_TOLERANCE:
            failures.append(f"{run_dir}: the gradient norms are not torch's")
        if not error <= WEIGHT_TOLERANCE:
            failures.append(f"{run_dir}: {name} after {s['steps']} steps is not torch's")
    for failure in failures:
        print("FAIL:", failure)
    return not failures


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(0 if check(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]) else 1)
