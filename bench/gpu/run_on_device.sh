#!/usr/bin/env bash
# Issue 37's one GPU call: ours (our real training steps, exported by TensorFlow here, compiled and run by jax on the
# GPU: no TensorFlow there), then HF PyTorch XLNet in every mode, then the tables. Sized for <= 6 minutes on an
# H100/H200 so that a rerun fits in a 15-minute lease; each part has a deadline and writes its JSON as it goes.
#
# Here, first (once; ~20 min on 2 cores, the TF reference steps dominate; refused if the bundle there holds another
# tree's steps: then --drop '*' first):
#   .venv/bin/python bench/xla/export.py --out bench/gpu/bundle --preset gpu
# Then, from a session with a GPU (the device tool; bench/gpu/bundle is git-ignored, so it is carried):
#   run(command="bash bench/gpu/run_on_device.sh", carry=["bench/gpu/bundle"], timeout_s=420)
# Back here, with the files it returned:
#   .venv/bin/python bench/gpu_report.py --ours <files>/ours.json --peer <files>/gpu_peer.json --update
#
# The device tool brings back at most 8 files from $OUT: everything is written to a work folder and packed into
# $OUT at the end, however the run ends (bench/gpu/collect.py: ours.json, gpu_peer.json, gpu_table.md, run.log,
# traces.tar with the profiled steps' traces, hlo.tar with the optimised modules).
# PLATFORM=cpu runs the same on jax CPU (a check of this script with a small bundle; the peer then runs on CPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-bench/gpu/out}"
BUNDLE="${BUNDLE:-bench/gpu/bundle}"
PY="${PYTHON:-python3}"
PLATFORM="${PLATFORM:-gpu}"
WORK="$(mktemp -d)"
mkdir -p "$OUT"
trap '"$PY" bench/gpu/collect.py "$WORK" "$OUT"; rm -rf "$WORK"' EXIT
start=$(date +%s)
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true; } \
  > "$WORK/nvidia-smi.txt" 2>&1
"$PY" - > "$WORK/versions.txt" 2>&1 <<'PYEOF'
import importlib, platform
print("python", platform.python_version())
for m in ("jax", "jaxlib", "torch", "transformers", "numpy", "ml_dtypes"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "not importable:", e)
PYEOF
cat "$WORK/nvidia-smi.txt" "$WORK/versions.txt"

# Ours. The GPU is ours alone: no preallocation, so that the peer (next, another process) has the memory back.
# Order: the goal's row first (base-512 plm bf16 at batch 32), then the other base-512 and bench-small rows, the
# checked (smaller-batch) base-512 rows, fine-tuning and the forward. Profiled (3 more steps traced: where the
# device time goes, per instruction; a trace of base-512 at batch 32 is a few MiB): the goal's row, UniLMv2's, and
# the classifier's fine-tuning step.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 225 "$PY" bench/xla/runner.py --bundle "$BUNDLE" --platform "$PLATFORM" --json "$WORK/ours.json" \
  --workloads "${WORKLOADS:-base-512_plm_bf16_b32,base-512_*_b32,bench-small_*,base-512_*_b2,clf-*,squad-*,*}" \
  --profile "${PROFILE:-base-512_plm_bf16_b32,base-512_pmlm_bf16_b32,clf-128_bf16_b32}" --profile_steps 3 \
  --steps 20 --warmup 3 --deadline 190 --dump_hlo "$WORK/hlo" 2>&1 | grep -v "^WARNING: All log" | tee "$WORK/ours.log"

# The peer, every mode; base-512 first (the goal's comparison), torch.compile last within each config.
timeout 150 "$PY" bench/bench_gpu_peer.py --out "$WORK" --device "${PEER_DEVICE:-cuda}" \
  --configs "${PEER_CONFIGS:-base-512:32,bench-small:32}" --infer "${PEER_INFER:-infer-base:32}" \
  --modes bf16,tf32,fp32,compile-bf16 --steps 20 --warmup 5 --deadline 120 2>&1 | tee "$WORK/peer.log" | tail -25

"$PY" bench/gpu_report.py --ours "$WORK/ours.json" --peer "$WORK/gpu_peer.json" --md "$WORK/gpu_table.md" \
  > /dev/null && cat "$WORK/gpu_table.md"
echo "run_on_device.sh: $(( $(date +%s) - start )) s; results in $OUT" | tee -a "$WORK/ours.log"
