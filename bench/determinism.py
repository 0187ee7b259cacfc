"""Is our training step reproducible run to run, with oneDNN on (TensorFlow's default on x86) and off (what
``--deterministic`` sets), and what does turning it off cost?

    python bench/determinism.py                  # ~3 min on 2 cores; prints the table
    python bench/determinism.py --update         # and writes it into bench/reports/performance.md

Each process (``--processes`` per setting, the settings alternating) builds a 2-layer XLNet (d_model 64, 16
sequences of 128 tokens, memory 64, 21 targets, dropout off), traces its gradient once and calls it ``--calls``
times on the same inputs and weights; a call "differs" when any gradient is not bit-identical to the first call's.
The first process of each setting also times the bench-small training step (``bench_pretrain.OursTrain``, float32,
the median of ``--steps`` after 3 warm-up steps). The environment variable must be set before TensorFlow loads, so
every measurement is its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTINGS = ("1", "0")  # TF_ENABLE_ONEDNN_OPTS: TensorFlow's default on x86, then --deterministic's


def child(calls: int, steps: int) -> dict:
    """The measurement of one process (its TF_ENABLE_ONEDNN_OPTS set by the parent)."""
    sys.path[:0] = [ROOT, HERE]
    import numpy as np
    import tensorflow as tf
    import keras

    from workload import BENCH_SMALL, BenchConfig, make_batch
    from xlnet_tf.models.xlnet import XLNetPretrainer

    cfg = BenchConfig("determinism", n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=256, n_token=8000,
                      seq_len=128, reuse_len=64, mem_len=64, num_predict=21, batch=16, dropout=0.0)
    keras.utils.set_random_seed(0)
    model = XLNetPretrainer(cfg.xlnet_config())
    batch = make_batch(cfg, 1)
    inputs = {k: tf.constant(batch[k]) for k in ("input_ids", "segment_ids", "perm_mask", "target_mapping")}
    for k in ("perm_mask", "target_mapping"):
        inputs[k] = tf.cast(inputs[k], tf.float32)
    inputs["mems"] = [tf.random.stateless_normal([cfg.batch, cfg.mem_len, cfg.d_model], [i, 1]) * 0.1
                      for i in range(cfg.n_layer)]
    target = tf.constant(batch["target"])

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["lm_logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(target, logits))
        return tape.gradient(loss, model.trainable_variables)

    def values():
        return [tf.convert_to_tensor(g).numpy() for g in gradients()]

    first = values()
    differed, variables = 0, set()
    for _ in range(calls - 1):
        changed = [v.path for v, a, b in zip(model.trainable_variables, first, values()) if not np.array_equal(a, b)]
        differed += bool(changed)
        variables.update(changed)
    result = {"calls": calls, "differed": differed, "variables": sorted(variables)}
    if steps:
        import bench_pretrain

        step = bench_pretrain.OursTrain(BENCH_SMALL, dtype="float32")
        times = bench_pretrain.interleaved([step], reps=1, steps_per_rep=steps, warmup=3, log=lambda _: None)
        result["step_s"] = statistics.median(times[step.name])
    return result


def measure(processes: int, calls: int, steps: int) -> dict:
    runs = {setting: [] for setting in SETTINGS}
    for index in range(processes):
        for setting in SETTINGS:  # alternating, so that the machine's load falls on both alike
            env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=setting, TF_CPP_MIN_LOG_LEVEL="3")
            command = [sys.executable, os.path.abspath(__file__), "--child", "--calls", str(calls),
                       "--steps", str(steps if index == 0 else 0)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
            if done.returncode != 0:
                sys.exit(f"determinism.py: a measuring process failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            runs[setting].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"TF_ENABLE_ONEDNN_OPTS={setting} process {index + 1}: {runs[setting][-1]}", flush=True)
    return runs


def table(runs: dict, cpu: str) -> str:
    lines = [f"{cpu}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')} (`python bench/determinism.py`):",
             "",
             "| TF_ENABLE_ONEDNN_OPTS | processes in which a gradient changed | calls that differed from the first "
             "| bench-small step, float32 (median) |",
             "|---|---:|---:|---:|"]
    for setting, name in (("1", "1 (TensorFlow's default)"), ("0", "0 (`--deterministic`)")):
        results = runs[setting]
        changed = sum(r["differed"] > 0 for r in results)
        differed = sum(r["differed"] for r in results)
        calls = sum(r["calls"] - 1 for r in results)
        step = next(r["step_s"] for r in results if "step_s" in r)
        lines.append(f"| {name} | {changed} of {len(results)} | {differed} of {calls} | {step:.3f} s |")
    slower = next(r["step_s"] for r in runs["0"] if "step_s" in r) / next(
        r["step_s"] for r in runs["1"] if "step_s" in r)
    lines += ["", f"Without oneDNN the step takes {slower:.2f}x as long."]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=3, help="processes per setting")
    parser.add_argument("--calls", type=int, default=40, help="calls of the gradient per process")
    parser.add_argument("--steps", type=int, default=12, help="timed bench-small steps (first process of each)")
    parser.add_argument("--update", action="store_true", help="write the table into bench/reports/performance.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.calls, args.steps)), flush=True)
        os._exit(0)  # no interpreter teardown (TensorFlow's can block; see xlnet_tf.cli.flags)
    from reporting import cpu_name, replace_block

    block = table(measure(args.processes, args.calls, args.steps), cpu_name())
    print("\n" + block)
    if args.update:
        replace_block(os.path.join(HERE, "reports", "performance.md"), "determinism.py", block)


if __name__ == "__main__":
    main()
