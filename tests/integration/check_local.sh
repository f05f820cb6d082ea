#!/usr/bin/env bash
# `trainer check` under mpiexec on this machine:
#   - 2 ranks (dp 2) and 4 ranks (tp 2 x pp 2, so that the embedding group exists too) pass, with
#     an exact all-reduce on every group of the layout, exact send/recv both ways between
#     neighbouring pipeline stages (also with pp 4), the checkpoint folder and the data file seen
#     by every rank, the probe files (and the folders made for them) removed, and the verdict
#     line; 4 ranks in EP groups of 2 (Distributed.ep_degree) add the ep and expert_dp groups and
#     an exact all-to-all on ep (some counts zero);
#   - one element of a pipeline transfer corrupted (TRAINER_FAULT_CHECK_P2P) exits 5 with the
#     receiving rank's line naming the sending stage;
#   - a rank that stops answering before the all-reduces (TRAINER_FAULT_CHECK_STALL) ends the
#     check after Engine.watchdog_s with a line naming the check (exit 1), not a hang;
#   - a layout that does not fit the world size exits 2 with the config's line;
#   - a checkpoint folder that cannot be created and a missing data file exit 5, naming each rank,
#     its host and the check;
#   - a model that does not fit the host's memory exits 5 with each rank's memory line;
#   - what train would refuse exits 5: data without one global batch, Engine.eval_freq without
#     validation data, a folder of another run's checkpoints without --resume;
#   - a process that its launcher meant to be one of 2 ranks but that sits alone in its MPI world
#     (what srun without a working PMI gives) exits 5 with the MPI world check's line.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
host=$(hostname)
CONFIG=(-c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=data.h5 -o Engine.output_dir=out)

# 1. Passing runs.
run_check pass2 0 2 "${CONFIG[@]}"
expect_line pass2 "^MPI world: 2 ranks, as the launcher started \(OMPI_COMM_WORLD_SIZE=2\)$"
# A CPU-only build says "CUDA: not built"; a CUDA build on a machine without a GPU names the
# library versions it was built with and "driver none".
VERSIONS="(CUDA: not built|CUDA driver none, runtime [0-9.]+, NCCL [0-9.]+, cuDNN [0-9.]+)"
expect_line pass2 "^  $host +ranks 0-1; no GPU visible; /dev/shm .*; $VERSIONS$"
expect_line pass2 "^versions: the same on every rank \($VERSIONS\)$"
expect_line pass2 "^checkpoint folder out/checkpoints: shared by every rank"
expect_line pass2 "^data file data.h5: opens on every rank \([0-9]+ tokens, vocab 257;"
expect_line pass2 "^all-reduce on world: 1 group of 2 ranks \(MPI, host memory, 4.0 MiB per call\): exact; bus bandwidth [0-9.]+ GB/s$"
expect_line pass2 "^all-reduce on dp: 1 group of 2 ranks .*: exact;"
expect_line pass2 "^memory: a rank of pipeline stage 0 needs ~[0-9.]+ MiB at Global.micro_batch_size=4 \(trainer plan\); host $host \(a share for each of its 2 ranks\) holds [0-9.]+ GiB, [0-9.]+ GiB free \((MemAvailable|cgroup .*)\)$"
expect_line pass2 "^works well on 2 ranks \(1 host, 0 GPUs\)$"
grep -q "error:" pass2.out && { cat pass2.out; fail "pass2: an error line in a passing check"; }
echo "ok: 2 ranks: $(grep '^all-reduce on world' pass2.out)"

run_check pass4 0 4 "${CONFIG[@]}" -o Distributed.tp_degree=2 -o Distributed.pp_degree=2
expect_line pass4 "^rank map \(4 ranks: dp 1 x tp 2 x pp 2"
for kind in world tp pp embedding; do
  groups=$([[ $kind == world ]] && echo "1 group of 4" || echo "2 groups of 2")
  expect_line pass4 "^all-reduce on $kind: $groups ranks \(MPI, host memory, 4.0 MiB per call\): exact; bus bandwidth [0-9.]+ GB/s"
done
expect_line pass4 "^all-reduce on dp: groups of one rank, nothing to exchange$"
P2P="\(MPI, host memory, 4.0 MiB per transfer\): exact both ways between neighbouring stages; bandwidth [0-9.]+ GB/s \(slowest link\) to [0-9.]+ GB/s one way$"
expect_line pass4 "^point-to-point on pp: 2 groups of 2 ranks $P2P"
expect_line pass4 "^works well on 4 ranks \(1 host, 0 GPUs\)$"
echo "ok: 4 ranks (tp 2 x pp 2):"
grep -E '^(all-reduce|point-to-point)' pass4.out | sed 's/^/    /'
# Four pipeline stages: the middle ones exchange with both neighbours (even links, then odd).
run_check pp4 0 4 "${CONFIG[@]}" -o Distributed.pp_degree=4
expect_line pp4 "^point-to-point on pp: 1 group of 4 ranks $P2P"
expect_line pp4 "^works well on 4 ranks \(1 host, 0 GPUs\)$"
echo "ok: 4 ranks (pp 4): $(grep '^point-to-point' pp4.out)"
# Stage 1 (rank 1) sends one wrong element to stage 2: rank 2's line names the sender, exit 5.
TRAINER_FAULT_CHECK_P2P=1 run_check p2p_fault 5 4 "${CONFIG[@]}" -o Distributed.pp_degree=4
expect_line p2p_fault "^error: point-to-point \(rank 2 on $host\): pp group of ranks 0-3 \(MPI, host memory\): element 524288 of 1048576 from stage 1 \(rank 1 on $host\) is 528387.5 where 528387 was sent\. Rerun with OMPI_MCA_btl=self,vader,tcp"
expect_line p2p_fault "^error: trainer check \(4 ranks, 1 host\): 1 failure \(point-to-point\) on 1 of 4 ranks \(2; $host\)"
[[ $(grep -c '^error: point-to-point' p2p_fault.out) -eq 1 ]] || { cat p2p_fault.out; fail "p2p_fault: not exactly one point-to-point line"; }
grep -q "^works well" p2p_fault.out && fail "p2p_fault: a verdict of success"
echo "ok: a corrupted pipeline transfer -> exit 5: $(grep -m1 '^error: point' p2p_fault.out | cut -c1-110)..."
# Rank 1 stops answering before the all-reduces (a host whose network hangs): the watchdog
# (Engine.watchdog_s=3) ends the check with the check's name instead of a hang.
start=$SECONDS
TRAINER_FAULT_CHECK_STALL=1 run_check stall 1 2 "${CONFIG[@]}" -o Engine.watchdog_s=3
expect_line stall "^error: no progress for [0-9.]+ s in trainer check's all-reduces \(rank [01] on $host, Engine.watchdog_s=3\)"
(( SECONDS - start < 60 )) || fail "stall: the watchdog took $((SECONDS - start)) s"
echo "ok: a rank stalled in the all-reduces -> exit 1 in $((SECONDS - start)) s: $(grep -m1 '^error: no progress' stall.out | cut -c1-90)..."
# Expert parallelism: 4 data-parallel ranks in EP groups of 2; the rank map shows each rank's EP
# and expert-DP index, and the EP group gets an all-to-all as well as an all-reduce.
run_check ep4 0 4 "${CONFIG[@]}" -o Model.arch=llama -o Model.num_experts=4 -o Distributed.ep_degree=2
expect_line ep4 "^rank map \(4 ranks: dp 4 x tp 1 x pp 1, order tp-sharding-ep-edp-pp, TP fastest\): experts over ep 2 x expert-dp 2;"
expect_line ep4 "^  rank +3 .* dp 3/4 \(ep 1/2, edp 1/2\) tp 0/1 pp 0/1$"
expect_line ep4 "^all-reduce on ep: 2 groups of 2 ranks .*: exact;"
expect_line ep4 "^all-reduce on expert_dp: 2 groups of 2 ranks .*: exact;"
expect_line ep4 "^all-to-all on ep: 2 groups of 2 ranks, uneven counts \(zeros included\): exact$"
echo "ok: 4 ranks (dp 4, ep 2): $(grep '^all-to-all' ep4.out)"
# The probes' folders (out/checkpoints) did not exist before: removed with the probes.
[[ ! -e out ]] || { find out; fail "the check left its probe folder out/checkpoints behind"; }
echo "ok: probe files and the folders made for them removed"

# 2. A layout that does not fit the world: the config's usage error, exit 2.
run_check bad_layout 2 2 "${CONFIG[@]}" -o Distributed.tp_degree=3
expect_line bad_layout "^error: Distributed.tp_degree=3 exceeds the world size 2 .*Launch at least 3 ranks"
echo "ok: tp 3 on 2 ranks -> exit 2: $(grep -m1 '^error' bad_layout.out | cut -c1-100)..."

# 3. Failing checks on every rank: one line per rank and check, the summary, exit 5.
touch not_a_folder
run_check broken 5 2 "${CONFIG[@]}" -o Checkpoint.dir=not_a_folder/checkpoints -o Data.train_path=missing.h5
for rank in 0 1; do
  expect_line broken "^error: checkpoint folder \(rank $rank on $host\): no probe file written in not_a_folder/checkpoints: .*Not a directory"
  expect_line broken "^error: data file \(rank $rank on $host\): dataset file not found \(missing.h5\)"
done
expect_line broken "^error: trainer check \(2 ranks, 1 host\): 4 failures \(checkpoint folder, data file\) on 2 of 2 ranks \(0-1; $host\)"
expect_line broken "^all-reduce on world: .*exact" # the remaining checks still ran
grep -q "^works well" broken.out && fail "broken: a verdict of success"
echo "ok: unwritable folder and missing data -> exit 5, each rank named"

# What `trainer train` would refuse: too few samples for one global batch; Engine.eval_freq
# without validation data; a folder of another run's checkpoints without --resume (a committed
# checkpoint of a one-step run), which --resume auto accepts.
run_check small 5 2 "${CONFIG[@]}" -o Global.global_batch_size=800000
expect_line small "^error: data file \(rank 0 on $host\): dataset too small \(data.h5, Data.train_path\): [0-9]+ training samples of 128 tokens, fewer than one global batch of 800000"
run_check noval 5 2 "${CONFIG[@]}" -o Data.val_fraction=0
expect_line noval "^error: data file \(rank 0 on $host\): no validation data \(Data.val_path, Data.val_fraction, Engine.eval_freq\)"
run_check noval_off 0 2 "${CONFIG[@]}" -o Data.val_fraction=0 -o Engine.eval_freq=0
run_np 1 train "${CONFIG[@]}" -o Engine.output_dir=earlier -o Engine.max_steps=1 -o Engine.save_steps=1 \
  -o Engine.eval_freq=0 >earlier.out 2>&1 || { cat earlier.out; fail "the one-step run failed"; }
run_check earlier 5 2 "${CONFIG[@]}" -o Engine.output_dir=earlier
expect_line earlier "^error: checkpoint folder \(rank 0 on $host\): checkpoint folder already holds checkpoints \(earlier/checkpoints, Checkpoint.dir; newest step-0*1\).*\(trainer check takes --resume as train does\)$"
run_check earlier_resume 0 2 "${CONFIG[@]}" -o Engine.output_dir=earlier --resume auto
# A step of another folder resumed into this used one: refused as train refuses it.
cp -r earlier other
run_check foreign 5 2 "${CONFIG[@]}" -o Engine.output_dir=earlier --resume other/checkpoints/step-00000001
expect_line foreign "^error: checkpoint folder \(rank 0 on $host\): --resume other/checkpoints/step-00000001 is a checkpoint of another folder"
[[ ! -e out ]] || fail "a check left its probe folder out/checkpoints behind"
echo "ok: what train refuses (one global batch, validation data, another run's checkpoints) -> exit 5"

# 4. A model beyond the host's memory: every rank's line (its share of the host), exit 5.
run_check too_big 5 2 "${CONFIG[@]}" -o Model.hidden_size=8192 -o Model.num_layers=64 -o Model.num_heads=64
for rank in 0 1; do
  expect_line too_big "^error: memory \(rank $rank on $host\): a rank of pipeline stage 0 needs ~[0-9.]+ [GT]iB at Global.micro_batch_size=4 \(trainer plan prints the parts\), but host $host \(a share for each of its 2 ranks\) holds"
done
echo "ok: a model beyond the host's memory -> exit 5, each rank named"

# 5. Alone in an MPI world of 1 while the launcher (srun) started 2: what a missing PMI gives.
rc=0
SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 timeout 60 "$TRAINER" check >alone.out 2>&1 || rc=$?
[[ $rc -eq 5 ]] || { cat alone.out; fail "alone: exit code $rc, expected 5"; }
expect_line alone "^error: MPI world \(rank 0 on $host\): the launcher started 2 ranks \(SLURM_STEP_NUM_TASKS=2\) but this rank's MPI world holds 1"
echo "ok: a rank alone in its world -> exit 5"
echo "PASS"
