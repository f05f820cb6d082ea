#!/usr/bin/env python3
"""PyTorch's fused causal attention backends timed at the trainer's shapes (the peer's side of
cuda_perf_test's DISABLED_AttentionShapes): flash, cuDNN, memory-efficient and the default choice,
forward and forward+backward, bf16, q/k/v strided views of one (B, T, 3, NH, HS) tensor as in a GPT
block. Needs PyTorch with CUDA (the environment that runs bench/torch_gpt.py); not part of the build.

  python3 bench/torch_sdpa_backends.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [("124M B=64", 64, 1024, 12, 64), ("350M B=32", 32, 1024, 16, 64),
          ("1.3B B=16", 16, 2048, 16, 128)]
BACKENDS = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def time_ms(fn, iterations=10):
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iterations):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iterations


def main():
    torch.manual_seed(0)
    for name, B, T, NH, HS in SHAPES:
        qkv = torch.randn(B, T, 3, NH, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS) views
        dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * B * NH * T * T * HS / 2  # causal: half the scores
        for label, backend in BACKENDS:
            def forward():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def both():
                qkv.grad = None
                forward().backward(dout)

            try:
                if backend is None:
                    fwd, fwd_bwd = time_ms(forward), time_ms(both)
                else:
                    with sdpa_kernel(backend):
                        fwd, fwd_bwd = time_ms(forward), time_ms(both)
            except RuntimeError as e:
                print(f"[sdpa] {name:10s} {label:9s} unavailable: {str(e).splitlines()[0][:80]}")
                continue
            bwd = fwd_bwd - fwd
            print(f"[sdpa] {name:10s} {label:9s} forward {fwd:7.3f} ms {flops / fwd / 1e9:6.1f} "
                  f"TFLOP/s  backward {bwd:7.3f} ms {2.5 * flops / bwd / 1e9:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
