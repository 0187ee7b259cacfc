"""Where a training step's time goes: op-time by TensorFlow op type (and by op name), from the TF profiler.

    .venv/bin/python bench/profile_step.py                      # bench-small, float32
    .venv/bin/python bench/profile_step.py --dtype mixed_bfloat16 --top 40 --by name

Runs our real training step (``bench_pretrain.OursTrain``) for a few warm-up steps, then profiles ``--steps``
steps and prints the summed op time per step, largest first. Ops run concurrently on the inter-op threads, so
the sum exceeds the wall time and an op's time includes waiting for cores another op holds: the table points at
what to try next; whether a change helps is decided by timing the step (``bench_pretrain.py``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from workload import CONFIGS, THREADS, set_thread_env  # noqa: E402


def op_times(logdir: str, by: str) -> dict[str, float]:
    """Summed duration (seconds) of every TF op event in the profile under ``logdir``, keyed by op type or name."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = collections.defaultdict(float)
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            names = {k: m.name for k, m in plane.event_metadata.items()}
            for line in plane.lines:
                if not line.name.startswith("tf_Compute"):  # the executor threads (one per inter-op thread)
                    continue
                for event in line.events:
                    name = names.get(event.metadata_id, "?")
                    if ":" not in name:  # TF op events are "op_name:OpType"
                        continue
                    totals[name.rsplit(":", 1)[1] if by == "type" else name] += event.duration_ps * 1e-12
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="bench-small", choices=sorted(CONFIGS))
    parser.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--by", choices=("type", "name"), default="type")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    set_thread_env(args.threads)

    import tensorflow as tf
    from bench_pretrain import OursTrain, setup_tf

    setup_tf(args.threads)
    system = OursTrain(CONFIGS[args.config], args.dtype)
    for _ in range(args.warmup):
        system.step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        system.step()
    wall = (time.perf_counter() - t0) / args.steps
    logdir = tempfile.mkdtemp(prefix="xlnet_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(args.steps):
        system.step()
    tf.profiler.experimental.stop()
    totals = op_times(logdir, args.by)
    total = sum(totals.values()) / args.steps
    print(f"{args.config} {args.dtype}: wall {wall:.3f} s/step (unprofiled); op time {total:.3f} s/step summed "
          f"over threads; top {args.top} by {args.by}:")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
        per_step = seconds / args.steps
        print(f"  {1e3 * per_step:9.1f} ms  {100 * per_step / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
