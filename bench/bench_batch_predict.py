"""Batch prediction (xlnet_tf.batch.prediction): throughput from a SavedModel and from a checkpoint, and memory against
input size, with a killed-and-rerun check. The tables in bench/reports/batch.md come from here.

    python bench/bench_batch_predict.py throughput   # XLNet-Base shape, random weights, seq 128 (~5 min on 2 cores)
    python bench/bench_batch_predict.py memory       # tiny model: peak RSS at 50k and 200k rows, kill + rerun (~8 min)

Inputs are the bundled sentences (data/sentiment/train.tsv) repeated into shards under --work_dir; nothing is
downloaded. Throughput is measured in this process after a warm-up shard (the first batch traces the graph), as
wall-clock rows/s of ``predict_shards`` (reading, tokenizing, the model, writing), one path after the other, and
per CPU-second of this process (less disturbed by other processes on a shared machine):
  * checkpoint: the Keras model restored from a checkpoint, the fast kernels (run_classifier.py --do_predict
    --predict_input_glob);
  * saved_model text: the export's serving_default on raw strings (tokenized in the graph), plain TF ops;
  * saved_model ids: the export's serve_ids (or an older export's ids serving_default), tokenized in Python.
Memory: ``python -m xlnet_tf.cli.predict`` in a child process per input size, its peak RSS from wait4().
"""

from __future__ import annotations

import argparse
import dataclasses
import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SPIECE = os.path.join(ROOT, "data", "spiece.model")


def sentences() -> list:
    with open(os.path.join(ROOT, "data", "sentiment", "train.tsv"), encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f.read().splitlines()[1:]]


def write_shards(directory: str, rows: int, shards: int) -> str:
    """``rows`` sentences (the bundled ones repeated) in ``shards`` TSV files with an id column; returns the glob."""
    texts = sentences()
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    per = -(-rows // shards)
    for k in range(shards):
        with open(os.path.join(directory, f"part-{k:03d}.tsv"), "w", encoding="utf-8") as f:
            f.write("id\tsentence\n")
            for i in range(k * per, min(rows, (k + 1) * per)):
                f.write(f"{i}\t{texts[i % len(texts)]}\n")
    return os.path.join(directory, "part-*.tsv")


def build(config_path: str, work: str, max_seq_length: int):
    """A random-weight SST-2 classifier of ``config_path``'s shape (with the bundled 8,000-piece vocabulary): its
    checkpoint in ``work/model`` and a SavedModel export under ``work/export``. Returns (model, settings, bundle,
    tokenizer, checkpoint)."""
    import tensorflow as tf
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.finetuning import serving as export
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    config = json.load(open(config_path))
    config["n_token"] = 8000  # the bundled SentencePiece model; the embedding lookup's cost does not depend on it
    os.makedirs(work, exist_ok=True)
    shape_path = os.path.join(work, "config.json")
    with open(shape_path, "w") as f:
        json.dump(config, f)
    XLNetConfig.from_json(shape_path)
    s = ClassifierSettings(task_name="sst-2", model_config_path=shape_path, spiece_model_file=SPIECE,
                           model_dir=os.path.join(work, "model"), max_seq_length=max_seq_length, do_predict=True,
                           dropout=0.0, dropatt=0.0)
    bundle = s.family().task(s)
    tokenizer = bundle.tokenizer
    model = bundle.build_model()
    model({k: v[None] for k, v in bundle.dummy_features.items()}, training=False)
    checkpoint = tf.train.Checkpoint(model=model).save(os.path.join(s.model_dir, "model"))
    shutil.rmtree(os.path.join(work, "export"), ignore_errors=True)
    export.export_serving(model, os.path.join(work, "export"), bundle.serving_info(1), SPIECE)
    return model, s, bundle, tokenizer, checkpoint


def throughput(args) -> None:
    from xlnet_tf.batch import prediction as bp

    work = args.work_dir
    model, s, bundle, tokenizer, checkpoint = build(args.config, os.path.join(work, "model_base"), args.seq)
    warm = write_shards(os.path.join(work, "warm"), args.batch_size, 1)
    data = write_shards(os.path.join(work, "rows"), args.rows, 2)
    predictors = {"checkpoint (Keras, fast kernels)": bp.KerasPredictor(
        model, bundle.family, dataclasses.asdict(bundle.serving_info(1)), tokenizer, args.seq,
        identity=dict(checkpoint=checkpoint), batch_size=args.batch_size)}
    export = os.path.join(work, "model_base", "export")
    text = bp.SavedModelPredictor(export, "auto")  # the exported length is the run's (args.seq)
    if text.takes_text:
        predictors["saved_model serving_default (raw text)"] = text
        predictors["saved_model serve_ids (tokenized in Python)"] = bp.SavedModelPredictor(export, "serve_ids")
    else:  # an older export records no length
        predictors["saved_model ids (tokenized in Python)"] = bp.SavedModelPredictor(export, max_seq_length=args.seq)
    fields = bp.Fields.parse("sentence", "id")
    rows = []
    for name, predictor in predictors.items():
        out = os.path.join(work, "out", name.split()[0] + str(len(rows)))
        shutil.rmtree(out, ignore_errors=True)
        bp.predict_shards(predictor, warm, out + "-warm", fields, args.batch_size, progress_every_s=1e9)
        start, cpu_start = time.perf_counter(), time.process_time()
        summary = bp.predict_shards(predictor, data, out, fields, args.batch_size, progress_every_s=60)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        rows.append((name, summary["rows"], seconds, cpu))
        print(f"{name}: {summary['rows']} rows in {seconds:.1f} s = {summary['rows'] / seconds:.2f} examples/s "
              f"({cpu:.1f} CPU-s)", flush=True)
    # The shape measured is --config's (XLNet-Base by default): named from it, not assumed.
    with open(args.config) as f:
        shape = json.load(f)
    print(f"\n{os.path.basename(args.config)} shape ({shape['n_layer']} layers, d_model {shape['d_model']}; random "
          f"weights), seq {args.seq}, batch {args.batch_size}, {args.rows} rows, float32\n")
    print("| path | rows | seconds | examples/s | CPU-seconds | examples per CPU-second |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, seconds, cpu in rows:
        print(f"| {name} | {n} | {seconds:.1f} | {n / seconds:.2f} | {cpu:.1f} | {n / cpu:.2f} |")


def _child(cmd: list, kill_after: float | None = None):
    """Runs ``cmd``; returns (exit status, peak RSS in MiB, seconds, output). ``kill_after``: SIGKILL it then."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024, time.monotonic() - start, output


def memory(args) -> None:
    work = args.work_dir
    build(os.path.join(ROOT, "configs", "tiny.json"), os.path.join(work, "model_tiny"), args.seq)
    export = os.path.join(work, "model_tiny", "export")
    base = [sys.executable, "-m", "xlnet_tf.cli.predict", f"--saved_model={export}", "--id_field=id",
            f"--batch_size={args.batch_size}", f"--max_seq_length={args.seq}", "--progress_every_s=20"]
    table = []
    for rows in args.sizes:
        glob = write_shards(os.path.join(work, f"in_{rows}"), rows, args.shards)
        out = os.path.join(work, f"out_{rows}")
        shutil.rmtree(out, ignore_errors=True)
        code, rss, seconds, output = _child(base + [f"--input_glob={glob}", f"--output_dir={out}"])
        if code != 0:
            raise SystemExit(output)
        progress = [line for line in output.splitlines() if "examples/s" in line]
        print(f"{rows} rows: peak RSS {rss:.0f} MiB, {seconds:.1f} s; last progress line:\n  {progress[-1]}",
              flush=True)
        table.append((rows, rss, seconds))
    # Killed at a random point and rerun: the files equal the uninterrupted run's.
    rows = args.sizes[0]
    glob = os.path.join(work, f"in_{rows}", "part-*.tsv")
    out = os.path.join(work, f"out_{rows}_killed")
    shutil.rmtree(out, ignore_errors=True)
    kill_after = random.Random(args.seed).uniform(0.3, 0.9) * table[0][2]
    code, _, _, _ = _child(base + [f"--input_glob={glob}", f"--output_dir={out}"], kill_after)
    done = len([n for n in os.listdir(out) if n.endswith(".predictions.jsonl")]) if os.path.isdir(out) else 0
    code2, _, _, output = _child(base + [f"--input_glob={glob}", f"--output_dir={out}"])
    reference = os.path.join(work, f"out_{rows}")
    names = sorted(n for n in os.listdir(reference) if n.endswith(".predictions.jsonl"))
    same = code2 == 0 and all(filecmp.cmp(os.path.join(out, n), os.path.join(reference, n), shallow=False)
                              for n in names)
    print(f"\nkilled after {kill_after:.1f} s (exit {code}, {done} of {len(names)} shards done), rerun exit {code2}: "
          f"output {'IDENTICAL to' if same else 'DIFFERENT from'} the uninterrupted run")
    print(f"\ntiny model (configs/tiny.json, random weights), seq {args.seq}, batch {args.batch_size}, "
          f"{args.shards} shards, python -m xlnet_tf.cli.predict (SavedModel)\n")
    print("| rows | peak RSS (MiB) | seconds | examples/s (incl. start-up) |\n|---:|---:|---:|---:|")
    for rows, rss, seconds in table:
        print(f"| {rows:,} | {rss:.0f} | {seconds:.1f} | {rows / seconds:.0f} |")
    if not same:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["throughput", "memory"])
    parser.add_argument("--work_dir", default="/tmp/xlnet_tf_bench_batch")
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "xlnet_cased_L-12_H-768_A-12.json"))
    parser.add_argument("--seq", type=int, default=None, help="default: 128 (throughput), 64 (memory)")
    parser.add_argument("--batch_size", type=int, default=None, help="default: 32 (throughput), 128 (memory)")
    parser.add_argument("--rows", type=int, default=256, help="throughput: rows per path")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000], help="memory: input sizes")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.seq = args.seq or (128 if args.what == "throughput" else 64)
    args.batch_size = args.batch_size or (32 if args.what == "throughput" else 128)
    print(f"machine: {_cpu()}; load average at start: {os.getloadavg()}", flush=True)
    throughput(args) if args.what == "throughput" else memory(args)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    os._exit(0)  # skip the interpreter teardown (live tf.data iterators can block it; see xlnet_tf.cli.flags)


def _cpu() -> str:
    from reporting import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()
