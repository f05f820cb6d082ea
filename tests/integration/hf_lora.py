"""Helper of hf_lora.sh: a trainer LoRA export as transformers and PEFT load it.

  hf_lora.py make gpt2 DIR
      hf_training.py's tiny random GPT2LMHeadModel (2 layers, hidden 64), saved to DIR
  hf_lora.py check BASE ADAPTER MERGED TEXT T EVAL_JSON
      ADAPTER (trainer export --lora adapter) targets every linear of BASE's architecture with
      r 4 and lora_alpha 8, and sets fan_in_fan_out as PEFT wants it for BASE's layers (true on
      GPT-2's Conv1D, false on nn.Linear: PEFT 0.13.2 corrects a wrong value with a warning, and
      the test takes a correction as a failure). Its safetensors hold exactly the keys and shapes
      that PEFT itself saves for that config on BASE (get_peft_model_state_dict), with trained
      (non-zero) B matrices. On the first two samples of T tokens of TEXT, trainer eval's loss
      (EVAL_JSON) must be, within 1e-5 relative, as hf_llama.py's check has it for full models:
        PEFT 0.13.2's PeftModel.from_pretrained(transformers' model of BASE, ADAPTER),
        the same after PEFT's merge_and_unload (its fan_in_fan_out transpose), and
        transformers' model of MERGED (trainer export --lora merge).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Every linear of a block, as PEFT's target_modules names them.
TARGETS = {"LlamaForCausalLM": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                "down_proj"],
           "GPT2LMHeadModel": ["c_attn", "c_proj", "c_fc"]}


def load_model(folder):
    import transformers as tf
    model = tf.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    return model


def check_files(base, adapter):
    """The adapter's config and tensors against what PEFT makes of that config on BASE."""
    import peft
    cfg = json.load(open(f"{adapter}/adapter_config.json"))
    arch = json.load(open(f"{base}/config.json"))["architectures"][0]
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8, cfg
    assert sorted(cfg["target_modules"]) == sorted(TARGETS[arch]), cfg
    fields = {k: v for k, v in cfg.items() if k not in ("peft_type", "base_model_name_or_path")}
    reference = peft.get_peft_model(load_model(base), peft.LoraConfig(**fields))
    wanted = reference.peft_config["default"].fan_in_fan_out
    assert cfg["fan_in_fan_out"] == wanted, f"{arch}: PEFT wants fan_in_fan_out {wanted}"
    expected = {k: tuple(v.shape) for k, v in peft.get_peft_model_state_dict(reference).items()}
    weights = load_file(f"{adapter}/adapter_model.safetensors")
    got = {k: tuple(v.shape) for k, v in weights.items()}
    shapes = [(k, got[k], v) for k, v in expected.items() if got.get(k, v) != v]
    assert got == expected, (f"{adapter}: not PEFT's tensors: missing "
                             f"{sorted(set(expected) - set(got))[:4]}, extra "
                             f"{sorted(set(got) - set(expected))[:4]}, shapes {shapes[:4]}")
    assert all(w.abs().max() > 0 for k, w in weights.items() if "lora_B" in k), "B untrained"
    return arch


def check(base, adapter, merged, text, T, eval_json):
    import peft
    arch = check_files(base, adapter)
    stream = list(open(text, "rb").read()) + [256]
    samples = [(stream[i * T:i * T + T], stream[i * T + 1:i * T + T + 1]) for i in range(2)]
    ce = torch.nn.functional.cross_entropy

    def loss(model):
        with torch.no_grad():
            return sum(ce(model(input_ids=torch.tensor([x])).logits[0].double(),
                          torch.tensor(y)).item() for x, y in samples) / 2

    got = json.loads(open(eval_json).read().splitlines()[-1])["loss"]
    tuned = peft.PeftModel.from_pretrained(load_model(base), adapter)
    tuned.eval()
    losses = {f"PEFT {peft.__version__}": loss(tuned)}
    losses["PEFT merge_and_unload"] = loss(tuned.merge_and_unload())
    losses[f"transformers on {merged}"] = loss(load_model(merged))
    print(f"{adapter} on {base} ({arch}): trainer eval {got:.7f}; " + "; ".join(
        f"{k} {v:.7f} (relative {abs(got - v) / v:.1e})" for k, v in losses.items()))
    wrong = [k for k, v in losses.items() if not abs(got - v) / v < 1e-5]
    assert not wrong, f"not the trainer's loss: {', '.join(wrong)}"


if __name__ == "__main__":
    if sys.argv[1] == "make":
        assert sys.argv[2] == "gpt2", sys.argv[2]
        from hf_training import make_gpt2
        make_gpt2(sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7])
