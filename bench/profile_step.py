"""Where a training step's time goes: op-time by TensorFlow op type (and by op name), from the TF profiler.

    .venv/bin/python bench/profile_step.py                      # bench-small, float32
    .venv/bin/python bench/profile_step.py --dtype mixed_bfloat16 --top 40 --by name
    .venv/bin/python bench/profile_step.py --objective pmlm      # UniLMv2's step (MPNet: mpnet)
    .venv/bin/python bench/profile_step.py --matmuls            # every matmul of the step, timed alone

Runs our real training step (``bench_pretrain.OursTrain``) for a few warm-up steps, then profiles ``--steps``
steps and prints the summed op time per step, largest first. Ops run concurrently on the inter-op threads, so
the sum exceeds the wall time and an op's time includes waiting for cores another op holds: the table points at
what to try next; whether a change helps is decided by timing the step (``bench_pretrain.py``).

``--matmuls`` instead lists every MatMul/BatchMatMul in the traced step by shape, each timed on its own (20
back-to-back runs in one ``tf.while_loop``, inputs warm in cache), with its count per step, time and GFLOP/s:
an optimistic floor for the step's matmul time, and which shapes run far below the machine's peak.
"""

from __future__ import annotations

import argparse
import collections
import glob
import math
import os
import sys
import tempfile
import time

import numpy as np

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
                    # TF op events are "op_name:OpType" (op names cannot hold a ':'). The executor's own scopes
                    # on these lines ("ExecutorState::Process", ...) span the ops they run: counted, they were
                    # half the step's "op time" as an op type "Process".
                    if name.count(":") != 1:
                        continue
                    totals[name.rsplit(":", 1)[1] if by == "type" else name] += event.duration_ps * 1e-12
    return totals


def _matmul_products(graph):
    """(op type, x shape, y shape, transpose_x, transpose_y, dtype) of every matmul op in ``graph``."""
    products = []
    for op in graph.get_operations():
        if op.type == "MatMul":
            flags = op.get_attr("transpose_a"), op.get_attr("transpose_b")
        elif op.type in ("BatchMatMulV2", "BatchMatMulV3"):
            flags = op.get_attr("adj_x"), op.get_attr("adj_y")
        else:
            continue
        x, y = op.inputs[0], op.inputs[1]
        products.append((op.type, tuple(x.shape.as_list()), tuple(y.shape.as_list()), *flags, x.dtype))
    return products


def _product_flops(x, y, transpose_x, transpose_y) -> int:
    m, k = (x[-1], x[-2]) if transpose_x else (x[-2], x[-1])
    n = y[-2] if transpose_y else y[-1]
    return 2 * math.prod(np.broadcast_shapes(x[:-2], y[:-2])) * m * n * k


def matmul_table(tf, system, repeats: int = 20) -> None:
    """Prints each matmul shape of ``system``'s step: count, time per step, GFLOP/s; then the totals."""
    graph = system._step.get_concrete_function(system.batches[0], system.mems).graph
    counts = collections.Counter(_matmul_products(graph))
    rows, total_seconds, total_flops = [], 0.0, 0
    for (op_type, x_shape, y_shape, tx, ty, dtype), count in counts.items():
        if None in x_shape + y_shape:
            print(f"  (skipped, dynamic shape) {op_type} {x_shape} {y_shape}")
            continue
        x = tf.cast(tf.random.normal(x_shape), dtype)
        y = tf.cast(tf.random.normal(y_shape), dtype)

        def product(x, y, op_type=op_type, tx=tx, ty=ty):
            if op_type == "MatMul":
                return tf.matmul(x, y, transpose_a=tx, transpose_b=ty)
            return tf.raw_ops.BatchMatMulV2(x=x, y=y, adj_x=tx, adj_y=ty)

        @tf.function
        def loop(x=x, y=y, product=product):
            def body(i, acc):
                return i + 1, acc + tf.cast(tf.reshape(product(x, y), [-1])[0], tf.float32)
            # One iteration at a time: the products run back to back, never two at once.
            return tf.while_loop(lambda i, acc: i < repeats, body, (tf.constant(0), tf.constant(0.0)),
                                 parallel_iterations=1)[1]

        for _ in range(3):
            loop().numpy()
        times = []
        for _ in range(7):
            start = time.perf_counter()
            loop().numpy()
            times.append((time.perf_counter() - start) / repeats)
        seconds = sorted(times)[len(times) // 2]
        flops = _product_flops(x_shape, y_shape, tx, ty)
        rows.append((seconds * count, count, op_type, x_shape, y_shape, tx, ty, flops / seconds / 1e9))
        total_seconds += seconds * count
        total_flops += flops * count
    print(f"  {'ms/step':>8}  {'count':>5}  {'op':13}  {'x':24} {'y':24} {'T(x)':>4} {'T(y)':>4}  GFLOP/s")
    for seconds, count, op_type, x_shape, y_shape, tx, ty, rate in sorted(rows, reverse=True):
        print(f"  {1e3 * seconds:8.1f}  {count:5d}  {op_type:13}  {str(x_shape):24} {str(y_shape):24} "
              f"{int(tx):4d} {int(ty):4d}  {rate:7.0f}")
    print(f"  total {1e3 * total_seconds:.1f} ms/step for {total_flops / 1e9:.1f} GFLOP executed "
          f"({total_flops / total_seconds / 1e9:.0f} GFLOP/s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="bench-small", choices=sorted(CONFIGS))
    parser.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--objective", default="plm", choices=("plm", "pmlm", "mpnet"),
                        help="pretraining objective of the profiled step (docs/objectives.md)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--by", choices=("type", "name"), default="type")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--matmuls", action="store_true", help="time every matmul shape of the step on its own")
    args = parser.parse_args()
    set_thread_env(args.threads)

    import tensorflow as tf
    from bench_pretrain import OursTrain, setup_tf

    setup_tf(args.threads)
    system = OursTrain(CONFIGS[args.config], args.dtype, objective=args.objective)
    for _ in range(args.warmup):
        system.step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        system.step()
    wall = (time.perf_counter() - t0) / args.steps
    if args.matmuls:
        print(f"{args.config} {args.dtype} {args.objective}: wall {wall:.3f} s/step; its matmuls, each timed alone:")
        matmul_table(tf, system)
        return
    logdir = tempfile.mkdtemp(prefix="xlnet_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(args.steps):
        system.step()
    tf.profiler.experimental.stop()
    totals = op_times(logdir, args.by)
    total = sum(totals.values()) / args.steps
    print(f"{args.config} {args.dtype} {args.objective}: wall {wall:.3f} s/step (unprofiled); op time {total:.3f} "
          f"s/step summed over threads; top {args.top} by {args.by}:")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
        per_step = seconds / args.steps
        print(f"  {1e3 * per_step:9.1f} ms  {100 * per_step / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
