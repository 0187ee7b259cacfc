"""Long documents (--long_document=memory against truncate) on the Brown genre documents: dev accuracy per seed,
training wall time and peak memory of each run, and the cost of one document by length.

    python bench/bench_long_document.py --data_dir=/work/shared/data/brown --out=bench/reports/long_document.json
    python bench/bench_long_document.py --cost_only      # the per-document cost table alone (a minute)

Each fine-tuning run is ``run_classifier.py`` in a process of its own (its peak RSS from ``os.wait4``), from the
same random initialisation per seed (no pretrained tiny checkpoint ships; ``--init_checkpoint`` uses one). The
report: bench/reports/long_document.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = {  # name -> run_classifier.py flags
    "truncate": ["--long_document=truncate"],
    "memory": ["--long_document=memory"],
    "memory_one_segment": ["--long_document=memory", "--mem_len={seq}"],
}


def run_one(mode: str, seed: int, args, work: str) -> dict:
    model_dir = os.path.join(work, f"{mode}-{seed}")
    flags = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=brown_genre",
             f"--data_dir={args.data_dir}", f"--model_config_path={args.config}",
             f"--spiece_model_file={os.path.join(REPO, 'data', 'spiece.model')}", f"--model_dir={model_dir}",
             f"--output_dir={os.path.join(work, 'features')}", "--do_train", "--do_eval",
             f"--max_seq_length={args.seq}", f"--max_segments={args.segments}", f"--train_steps={args.steps}",
             f"--warmup_steps={args.steps // 10}", f"--iterations={args.steps}", f"--train_batch_size={args.batch}",
             "--eval_batch_size=52", f"--learning_rate={args.lr}", "--adam_epsilon=1e-6", f"--seed={seed}",
             "--dropout=0.1", "--dropatt=0.1"] + [f.format(seq=args.seq) for f in MODES[mode]]
    if args.init_checkpoint:
        flags.append(f"--init_checkpoint={args.init_checkpoint}")
    start = time.time()
    with open(model_dir + ".log", "w") as log:
        proc = subprocess.Popen(flags, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    if status != 0:
        raise SystemExit(f"{mode} seed {seed} failed; see {model_dir}.log")
    with open(os.path.join(model_dir, "eval_results.dev.json")) as f:
        report = json.load(f)
    return dict(mode=mode, seed=seed, accuracy=report["metrics"]["accuracy"], loss=report["metrics"]["loss"],
                wall_s=round(wall, 1), peak_rss_mb=round(usage.ru_maxrss / 1024))


def document_cost(args) -> list:
    """Seconds per document (batch 8) of a training step and of inference, by document length in segments:
    memory (all earlier segments), memory of one segment, and one pass over the whole length."""
    import keras
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

    config = XLNetConfig.from_json(args.config)
    batch, rows = 8, []
    for segments in (1, 2, 4, 8):
        length = segments * args.seq
        variants = {"one pass": dict(num_segments=1, mem_len=0)}
        if segments > 1:
            variants.update({"memory": dict(num_segments=segments, mem_len=(segments - 1) * args.seq),
                             "memory_one_segment": dict(num_segments=segments, mem_len=args.seq)})
        for name, kw in variants.items():
            model = XLNetClassifier(config, num_labels=15, **kw)
            optimizer = keras.optimizers.Adam(1e-4)
            feats = {"input_ids": tf.constant(np.random.randint(10, 8000, [batch, length]), tf.int32),
                     "segment_ids": tf.zeros([batch, length], tf.int32),
                     "padding_mask": tf.ones([batch, length], tf.float32)}
            labels = tf.zeros([batch], tf.int32)

            @tf.function
            def train_step(f):
                with tf.GradientTape() as tape:
                    logits = model(f, training=True)["logits"]
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
                optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                              model.trainable_variables))
                return loss

            @tf.function
            def infer(f):
                return model(f, training=False)["logits"]

            timings = {}
            for label, fn in (("train", train_step), ("infer", infer)):
                fn(feats)
                times = []
                for _ in range(3):
                    t = time.perf_counter()
                    np.asarray(fn(feats))
                    times.append(time.perf_counter() - t)
                timings[label] = round(1000 * float(np.median(times)) / batch, 1)
            rows.append(dict(tokens=length, segments=segments, variant=name, train_ms_per_doc=timings["train"],
                             infer_ms_per_doc=timings["infer"]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", default="/work/shared/data/brown")
    p.add_argument("--config", default=os.path.join(REPO, "configs", "tiny.json"))
    p.add_argument("--init_checkpoint", default=None)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--segments", type=int, default=8)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--work", default="/tmp/bench_long_document")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "reports", "long_document.json"))
    p.add_argument("--cost_only", action="store_true")
    p.add_argument("--no_cost", action="store_true", help="the fine-tuning runs alone")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    result = dict(settings=vars(args), runs=[], cost=[])
    if args.cost_only and os.path.exists(args.out):  # keep the runs of an earlier full invocation
        with open(args.out) as f:
            result["runs"] = json.load(f).get("runs", [])
    if not args.cost_only:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for mode in args.modes.split(","):
                result["runs"].append(run_one(mode, seed, args, args.work))
                print(json.dumps(result["runs"][-1]), flush=True)
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=1)
    if not args.no_cost:
        result["cost"] = document_cost(args)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
