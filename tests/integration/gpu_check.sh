#!/usr/bin/env bash
# `trainer check` on 2 GPUs (4 when there are): the pipeline's send/recv and MoE's all-to-all go
# over NCCL with device memory, as in training:
#   - pp 2 (and pp 4 on 4 GPUs): exact send/recv both ways between neighbouring stages, 64 MiB per
#     transfer, with the NCCL line;
#   - ep 2 (llama with 4 experts): the all-to-all with some counts zero is exact over NCCL;
#   - one element that stage 0 sends corrupted (TRAINER_FAULT_CHECK_P2P=0): exit 5 with stage 1's
#     one line naming the sender, and nothing else failing.
# Skips (77) with fewer than 2 GPUs.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
require_gpus 2
make_small_dataset data.h5
host=$(hostname)
CONFIG=(-c "$SRC/configs/tiny-cpu.yaml" -o Global.device=cuda -o Data.train_path=data.h5
        -o Engine.output_dir=out)

NCCL_P2P="\(NCCL, device memory, 64.0 MiB per transfer\): exact both ways between neighbouring stages; bandwidth [0-9.]+ GB/s \(slowest link\) to [0-9.]+ GB/s one way$"

run_check pp2 0 2 "${CONFIG[@]}" -o Distributed.pp_degree=2
expect_line pp2 "^GPU binding: every rank on a GPU of its own \(2 GPUs\)$"
expect_line pp2 "^point-to-point on pp: 1 group of 2 ranks $NCCL_P2P"
expect_line pp2 "^works well on 2 ranks \(1 host, 2 GPUs\)$"
echo "ok: pp 2: $(grep '^point-to-point' pp2.out)"

run_check ep2 0 2 "${CONFIG[@]}" -o Model.arch=llama -o Model.num_experts=4 -o Distributed.ep_degree=2
expect_line ep2 "^all-to-all on ep: 1 group of 2 ranks, uneven counts \(zeros included\): exact$"
echo "ok: ep 2: $(grep '^all-to-all' ep2.out)"

# Element 2^23 of what stage 0 sends: (2^23 + 0) mod 2^22 = 0, sent as 0.5.
TRAINER_FAULT_CHECK_P2P=0 run_check p2p_fault 5 2 "${CONFIG[@]}" -o Distributed.pp_degree=2
expect_line p2p_fault "^error: point-to-point \(rank 1 on $host\): pp group of ranks 0-1 \(NCCL, device memory\): element 8388608 of 16777216 from stage 0 \(rank 0 on $host\) is 0.5 where 0 was sent\. Rerun with NCCL_DEBUG=INFO"
expect_line p2p_fault "^error: trainer check \(2 ranks, 1 host\): 1 failure \(point-to-point\) on 1 of 2 ranks \(1; $host\)"
echo "ok: a corrupted NCCL transfer -> exit 5"

if [[ $GPUS -ge 4 ]]; then
  run_check pp4 0 4 "${CONFIG[@]}" -o Distributed.pp_degree=4
  expect_line pp4 "^point-to-point on pp: 1 group of 4 ranks $NCCL_P2P"
  echo "ok: pp 4: $(grep '^point-to-point' pp4.out)"
fi
echo "PASS"
