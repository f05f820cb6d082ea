"""Helper of hf_lora.sh: a trainer LoRA export as transformers and PEFT load it.

  hf_lora.py check BASE ADAPTER TEXT T EVAL_JSON
      ADAPTER (trainer export --lora adapter) holds PEFT's keys and config, with trained
      (non-zero) B matrices; PEFT 0.13.2's PeftModel.from_pretrained(transformers' model of BASE,
      ADAPTER) gives trainer eval's loss (EVAL_JSON) on the first two samples of T tokens of TEXT
      within 1e-5 relative, as hf_llama.py's check does for full models.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def check(base, adapter, text, T, eval_json):
    import peft
    import transformers as tf
    cfg = json.load(open(f"{adapter}/adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8, cfg
    assert sorted(cfg["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]), cfg
    weights = load_file(f"{adapter}/adapter_model.safetensors")
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert key in weights and tuple(weights[key].shape) == (4, 64), sorted(weights)[:4]
    assert len(weights) == 2 * 7 * 2, len(weights)
    assert all(w.abs().max() > 0 for k, w in weights.items() if "lora_B" in k), "B untrained"
    stream = list(open(text, "rb").read()) + [256]
    samples = [(stream[i * T:i * T + T], stream[i * T + 1:i * T + T + 1]) for i in range(2)]
    model = tf.AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(model, adapter)
    model.eval()
    ce = torch.nn.functional.cross_entropy
    with torch.no_grad():
        loss = sum(ce(model(input_ids=torch.tensor([x])).logits[0].double(),
                      torch.tensor(y)).item() for x, y in samples) / 2
    got = json.loads(open(eval_json).read().splitlines()[-1])["loss"]
    print(f"{adapter} on {base}: trainer eval {got:.7f}; PEFT {peft.__version__} {loss:.7f} "
          f"(relative {abs(got - loss) / loss:.1e})")
    assert abs(got - loss) / loss < 1e-5, "PEFT's loss is not the trainer's"


if __name__ == "__main__":
    check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
