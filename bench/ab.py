"""A/B timing of our training (or inference) step: two variants, interleaved, medians and their ratio.

    python bench/ab.py --dtype float32 --disable matmul          # fast backend vs fast without one fast path
    python bench/ab.py --dtype float32 --disable all             # fast backend vs the plain ops
    python bench/ab.py --objective pmlm --disable cross_entropy_and_hits   # UniLMv2's step (or mpnet)
    python bench/ab.py --dtype mixed_bfloat16 --other /tmp/base  # this checkout vs another one (e.g. a
                                                                  # `git worktree` of an older commit)
    python bench/ab.py --mode classify_train --other /tmp/base   # the classifier's fine-tuning step (or
                                                                  # classify: its forward), XLNet-Base, seq 128

In-process mode (``--disable``) traces the bench-small step (``bench_pretrain.OursTrain``) twice, with and
without the named fast paths (``xlnet_tf.kernels.use``), and alternates their steps. ``classify_train`` /
``classify`` (``--other`` only): ``XLNetClassifier`` at the XLNet-Base shape, 2 labels, ``--batch`` x 128 tokens
(left-padded pairs), the fine-tuning loop's step (``finetuning.trainer.make_replica_step``, AdamW, clipping) or
the forward (training=False), built from public APIs both checkouts have. ``--other`` alternates
processes, one per checkout and round, since two versions of xlnet_tf cannot share a process. Ratios are B / A:
above 1, B is slower. Use it on a quiet machine: the two variants share it, but noise still shows.
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

_CHILD = """
import json, os, sys, time
tree = sys.argv[1]
sys.path[:0] = [tree, os.path.join(tree, "bench")]
from workload import BENCH_SMALL, INFER_BASE
import bench_pretrain
bench_pretrain.setup_tf(2)
import xlnet_tf
assert xlnet_tf.__file__.startswith(tree), xlnet_tf.__file__


class Classifier:
    def __init__(self, cfg, dtype, batch, train):
        import numpy as np
        import tensorflow as tf
        from xlnet_tf.finetuning.trainer import make_replica_step
        try:
            from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
        except ImportError:  # a checkout from before the classification family's package
            from xlnet_tf.models.heads import XLNetClassifier
        from xlnet_tf.training.optimization import create_optimizer

        model = XLNetClassifier(cfg.xlnet_config(), num_labels=2, dtype=dtype)
        rng = np.random.default_rng(0)
        ids = rng.integers(9, cfg.n_token, (batch, cfg.seq_len)).astype(np.int32)
        real = rng.integers(cfg.seq_len // 2, cfg.seq_len + 1, batch)
        mask = (np.arange(cfg.seq_len)[None, :] >= cfg.seq_len - real[:, None]).astype(np.float32)
        segs = np.where(np.arange(cfg.seq_len)[None, :] < cfg.seq_len - real[:, None] // 2, 0, 1).astype(np.int32)
        self.features = {"input_ids": tf.constant(ids), "segment_ids": tf.constant(segs),
                         "padding_mask": tf.constant(mask), "label": tf.constant(rng.integers(0, 2, batch), tf.int32)}
        if train:
            optimizer = create_optimizer(model, 1e-5, 1000, 0, weight_decay=0.01)

            def loss_fn(features, outputs):
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label"],
                                                                             logits=outputs["logits"])
                return tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32)

            step = make_replica_step(model, optimizer, loss_fn, 1.0)
            self._fn = tf.function(lambda f: step(f, tf.zeros([]))[1])
        else:
            self._fn = tf.function(lambda f: model(f, training=False)["logits"])

    def step(self):
        self._fn(self.features).numpy()
if sys.argv[3] == "infer":
    system = bench_pretrain.OursInfer(INFER_BASE, dtype=sys.argv[2])
elif sys.argv[3].startswith("classify"):
    system = Classifier(INFER_BASE, sys.argv[2], int(sys.argv[6]), sys.argv[3] == "classify_train")
else:
    system = bench_pretrain.OursTrain(BENCH_SMALL, dtype=sys.argv[2], objective=sys.argv[5])
for _ in range(3):
    system.step()
times = []
for _ in range(int(sys.argv[4])):
    start = time.perf_counter()
    system.step()
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _other_checkout(args):
    trees = {"A (this)": os.path.dirname(HERE), "B (other)": os.path.abspath(args.other)}
    times = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, tree in (trees.items() if round_ % 2 == 0 else reversed(trees.items())):
            out = subprocess.run([sys.executable, "-c", _CHILD, tree, args.dtype, args.mode, str(args.steps),
                                  args.objective, str(args.batch)], check=True, capture_output=True, text=True).stdout
            times[name] += json.loads(out.strip().splitlines()[-1])
    return times


def _in_process(args):
    sys.path[:0] = [os.path.dirname(HERE), HERE]
    import bench_pretrain
    from workload import BENCH_SMALL, INFER_BASE

    bench_pretrain.setup_tf(2)
    from xlnet_tf import kernels

    disable = {"all"} if args.disable == "all" else set(args.disable.split(","))
    if args.mode == "infer":
        def build():
            return bench_pretrain.OursInfer(INFER_BASE, dtype=args.dtype)
    else:
        def build():
            return bench_pretrain.OursTrain(BENCH_SMALL, dtype=args.dtype, objective=args.objective)
    systems = {}
    for name, variant in (("A (fast)", kernels.use("fast")),
                          (f"B (without {args.disable})",
                           kernels.use("plain") if disable == {"all"} else kernels.use("fast", disable=disable))):
        with variant:
            systems[name] = build()
            systems[name].step()  # traced inside the variant's backend
    times = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, system in systems.items():
            for _ in range(args.steps):
                start = time.perf_counter()
                system.step()
                times[name].append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--mode", default="train", choices=("train", "infer", "classify_train", "classify"))
    parser.add_argument("--batch", type=int, default=8, help="sequences per step of the classify modes")
    parser.add_argument("--objective", default="plm", choices=("plm", "pmlm", "mpnet"),
                        help="pretraining objective of the training step (docs/objectives.md)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--disable", help="comma list of fast paths by the name of their plain definition "
                       "(xlnet_tf.kernels.fast_paths(): attention_probs, residual_layer_norm, "
                       "bias_activation_dropout, matmul, cross_entropy_and_hits, adamw_update), or 'all'")
    group.add_argument("--other", help="another checkout of this repository")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="steps per variant and round")
    args = parser.parse_args()
    if args.mode.startswith("classify") and not args.other:
        parser.error(f"--mode {args.mode} compares checkouts: give --other")
    times = _other_checkout(args) if args.other else _in_process(args)
    medians = {name: statistics.median(t) for name, t in times.items()}
    (a, ma), (b, mb) = medians.items()
    what = {"train": f"train {args.objective}", "infer": "infer"}.get(args.mode, f"{args.mode} batch {args.batch}")
    print(f"{what} {args.dtype}: {a} {ma:.3f} s, {b} {mb:.3f} s, B/A {mb / ma:.3f} "
          f"({len(times[a])} steps each)")


if __name__ == "__main__":
    main()
