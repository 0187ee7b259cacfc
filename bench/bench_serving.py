"""Serving latency of the exported classifier, raw text in, next to HuggingFace's PyTorch XLNet on the same strings.

    .venv/bin/python bench/bench_serving.py --dtypes=float32          # 4-10 min on 2 cores (load-dependent)
    .venv/bin/python bench/bench_serving.py --dtypes=mixed_bfloat16   # the same in mixed bfloat16
    .venv/bin/python bench/bench_serving.py          # both precisions in one run (twice as long)
    .venv/bin/python bench/bench_serving.py --quick  # fewer calls, batch 32 only in float32; prints only

Each precision's last run is kept in bench/results_serving.json; the report of all of them goes to
bench/results_serving.md and between the markers in bench/reports/serving.md.

What runs: an XLNet-Base-shape sequence classifier (``configs/xlnet_cased_L-12_H-768_A-12.json``, random weights,
2 labels, ``max_seq_length`` 128) exported with ``xlnet_tf.finetuning.serving.write_serving_model`` (the SavedModel
TF Serving loads, traced with the plain kernels), then loaded the way TF Serving loads it: a fresh process with
TensorFlow and tensorflow-text's kernels only (no xlnet_tf, no Keras), ``tf.saved_model.load``. Both signatures
are timed: ``serving_default`` (raw strings: in-graph SentencePiece + packing + the model) and ``serve_ids``
(the same requests already encoded). The peer, in its own fresh process: ``XLNetForSequenceClassification`` of
the same shape with ``XLNetTokenizerFast`` built from the same ``data/spiece.model`` (no download), raw text =
tokenizer + model, ids = model only, under ``torch.inference_mode()``. Same strings (the sentiment dev sentences,
padded to 128), same thread count (``--threads``: TensorFlow intra- and inter-op pools, torch
``set_num_threads``), in float32 and, where the CPU has bfloat16 instructions, mixed bfloat16 (our export built
with ``dtype="mixed_bfloat16"``; torch under ``autocast(bfloat16)``).

Reported per (implementation, inputs, batch, precision): latency p50 and p99 over the timed calls (n given; at
batch 32 there are few calls, so p99 is close to the maximum), throughput = batch / mean latency (sequences/s),
and HF p50 / ours p50 (above 1: ours is faster). The preprocessing's share of the raw-text latency at batch 32 is
measured two ways: the in-graph preprocessor alone (``XLNetPreprocessor`` under ``tf.function``, same ops as in
the export) over the raw-text p50, and (raw text p50 - ids p50) / raw text p50.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from reporting import replace_block  # noqa: E402
from workload import THREADS, set_thread_env  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "xlnet_cased_L-12_H-768_A-12.json")
SPIECE = os.path.join(ROOT, "data", "spiece.model")
SEQ = 128
BATCHES = (1, 32)


def sentences(n: int) -> list:
    """The first ``n`` sentences of the bundled sentiment dev set (real text of typical review length)."""
    with open(os.path.join(ROOT, "data", "sentiment", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[0] for line in f][1:]
    return rows[:n]


def timed(fns: dict, batch: int, budget_s: float, min_calls: int, max_calls: int, warmup: int = 2) -> dict:
    """Latency of each of ``fns`` ({name: fn}), called in turn (a, b, a, b, ...: a burst of load on the shared
    machine hits both alike), after ``warmup`` calls each: p50/p99/min/mean in ms over at least ``min_calls``
    calls and ``budget_s`` seconds (at most ``max_calls``); throughput in sequences/s; the load average after;
    the median CPU time of this process per call (all its threads: less disturbed than wall time by other
    processes). Returns {name: stats}."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    start = time.perf_counter()
    while len(times[next(iter(fns))]) < max_calls and (
            len(times[next(iter(fns))]) < min_calls or time.perf_counter() - start < budget_s):
        for name, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    stats = {}
    for name in fns:
        ms = np.array(times[name]) * 1e3
        stats[name] = dict(p50=float(np.percentile(ms, 50)), p99=float(np.percentile(ms, 99)), min=float(ms.min()),
                           mean=float(ms.mean()), n=len(ms), throughput=batch / (ms.mean() / 1e3),
                           load=os.getloadavg()[0], cpu_ms=float(np.median(cpu[name]) * 1e3))
    return stats


def budget(batch: int, quick: bool) -> dict:
    """Timing budget per row: a batch of 32 takes seconds on 2 cores, so few calls (p99 ~ the maximum there)."""
    if batch == 1:
        return dict(budget_s=2 if quick else 4, min_calls=10 if quick else 20, max_calls=200)
    return dict(budget_s=2 if quick else 6, min_calls=3 if quick else 5, max_calls=50, warmup=1)


# -- children: each in a fresh process --------------------------------------------------------------------------
def child_tf(args) -> dict:
    """TF Serving's view: TensorFlow + tensorflow-text kernels, the SavedModel, nothing of xlnet_tf."""
    import glob
    import importlib.util

    text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    import tensorflow as tf

    for library in sorted(glob.glob(os.path.join(text_dir, "python", "ops", "_*.so"))):
        tf.load_op_library(library)
    assert not [m for m in sys.modules if m.startswith("xlnet_tf")]
    data = np.load(args._data)
    loaded = tf.saved_model.load(args._export)
    text_fn, ids_fn = loaded.signatures["serving_default"], loaded.signatures["serve_ids"]
    results = {}
    for batch in args._batches:
        strings = tf.constant(list(data["sentences"][:batch]))
        ids = {k: tf.constant(data[k][:batch]) for k in ("input_ids", "segment_ids", "padding_mask")}
        stats = timed({"text": lambda: text_fn(sentence=strings)["probabilities"].numpy(),
                       "ids": lambda: ids_fn(**ids)["probabilities"].numpy()}, batch, **budget(batch, args.quick))
        results.update({f"{name}/{batch}": value for name, value in stats.items()})
    return results


def child_hf(args) -> dict:
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    with open(CONFIG) as f:
        c = json.load(f)
    config = transformers.XLNetConfig(vocab_size=c["n_token"], d_model=c["d_model"], n_layer=c["n_layer"],
                                      n_head=c["n_head"], d_inner=c["d_inner"], ff_activation=c["ff_activation"],
                                      untie_r=c["untie_r"], num_labels=2, summary_type="last",
                                      summary_use_proj=True, dropout=0.1)
    torch.manual_seed(0)
    model = transformers.XLNetForSequenceClassification(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(SPIECE, os.path.join(tmp, "spiece.model"))
        tokenizer = transformers.XLNetTokenizerFast.from_pretrained(tmp)
    data = np.load(args._data)
    autocast = args._dtype == "mixed_bfloat16"
    results = {}

    def forward(inputs):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return torch.softmax(model(**inputs).logits.float(), -1).numpy()

    for batch in args._batches:
        strings = [s.decode("utf-8") for s in data["sentences"][:batch]]

        def encode():
            return tokenizer(strings, padding="max_length", truncation=True, max_length=SEQ, return_tensors="pt",
                             return_token_type_ids=True)
        ids = encode()
        stats = timed({"text": lambda: forward(encode()), "ids": lambda: forward(ids)}, batch,
                      **budget(batch, args.quick))
        results.update({f"{name}/{batch}": value for name, value in stats.items()})
    return results


# -- the parent ---------------------------------------------------------------------------------------------------
def export(dtype: str, directory: str, log) -> tuple:
    """The exported classifier in ``dtype`` (a SavedModel under ``directory``), the encoded strings and the
    in-graph preprocessor's own latency at batch 32 (ms, p50)."""
    import keras
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from xlnet_tf import tasks
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.finetuning.serving import ServingInfo, write_serving_model
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
    from xlnet_tf.preprocessing import XLNetPreprocessor

    keras.utils.set_random_seed(0)
    model = XLNetClassifier(XLNetConfig.from_json(CONFIG), num_labels=2, task_scope="bench", dtype=dtype)
    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=SEQ)
    info = ServingInfo(kind="classification", task="bench", max_seq_length=SEQ, labels=["0", "1"], global_step=1,
                       family=tasks.for_kind("classification"))
    start = time.perf_counter()
    path = write_serving_model(model, directory, info, SPIECE, pre)
    log(f"exported {dtype} in {time.perf_counter() - start:.0f} s: {path}")
    strings = sentences(max(BATCHES))
    features = {k: v.numpy() for k, v in pre(strings).items()}
    encode = tf.function(lambda s: pre(s))
    batch = tf.constant(strings[:32])
    pre_only = timed({"pre": lambda: encode(batch)["input_ids"].numpy()}, 32, budget_s=3, min_calls=10,
                     max_calls=100)["pre"]
    return path, strings, features, pre_only


def run_child(kind: str, dtype: str, export_dir: str, data: str, args, log) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), f"--_child={kind}", f"--_dtype={dtype}", f"--_data={data}",
           f"--_export={export_dir}", f"--threads={args.threads}", "--_batches", *map(str, args._batches)]
    if args.quick:
        cmd.append("--quick")
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {dtype} child failed:\n{done.stderr[-3000:]}")
    log(f"{kind} {dtype}: {time.perf_counter() - start:.0f} s")
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(runs: dict) -> str:
    """The report of ``runs`` ({precision: {"rows": {key: (ours, hf)}, "pre_share": ..., "meta": ...}}, one entry
    per precision, possibly from separate invocations)."""
    metas = list(runs.values())
    first = metas[0]["meta"]
    lines = [f"Serving an XLNet-Base-shape classifier (12 layers, d_model 768, seq 128, 2 labels, random weights) "
             f"with {first['threads']} threads on {first['cpu']}. Ours: the SavedModel loaded as TF Serving loads "
             f"it (fresh process, TensorFlow + tensorflow-text kernels only); HF: transformers "
             f"{first['transformers']} / torch {first['torch']} `XLNetForSequenceClassification` + "
             "`XLNetTokenizerFast` of the same `data/spiece.model`. Raw text = tokenization + model; ids = model "
             "only. Each process calls raw text and ids in turn. vs HF = HF / ours: p50 wall time, best (minimum) "
             "wall time (the least disturbed by other processes on a shared machine), and median CPU time per call "
             "(all threads of the process). load = the 1-minute load average after our row / after HF's (2.0 = "
             "both cores busy with this benchmark alone).", ""]
    for dtype, run in runs.items():
        m = run["meta"]
        lines.append(f"- {dtype}: measured {m['when']}, load average {m['load_before']:.2f} before, "
                     f"{m['load_after']:.2f} after (`{m['command']}`, {m['seconds']:.0f} s)")
    lines += ["", "| precision | inputs | batch | ours p50 (ms) | ours p99 (ms) | ours seq/s | HF p50 (ms) "
              "| HF p99 (ms) | HF seq/s | vs HF (p50) | vs HF (best) | vs HF (CPU) | load | calls |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dtype, run in runs.items():
        for key, (ours, hf) in run["rows"].items():
            inputs, batch = key.split("/")
            lines.append(f"| {dtype} | {'raw text' if inputs == 'text' else 'ids'} | {batch} | {ours['p50']:.1f} | "
                         f"{ours['p99']:.1f} | {ours['throughput']:.1f} | {hf['p50']:.1f} | {hf['p99']:.1f} | "
                         f"{hf['throughput']:.1f} | {hf['p50'] / ours['p50']:.2f}x | "
                         f"{hf['min'] / ours['min']:.2f}x | "
                         f"{hf['cpu_ms'] / ours['cpu_ms']:.2f}x | {ours['load']:.1f} / {hf['load']:.1f} | "
                         f"{ours['n']} / {hf['n']} |")
    lines.append("")
    for dtype, run in runs.items():
        share = run.get("pre_share")
        if share:
            lines.append(f"**In-graph preprocessing at batch 32 ({dtype}):** {share['alone']:.1f} ms alone "
                         f"(`XLNetPreprocessor` under `tf.function`) = {100 * share['share']:.1f}% of the raw-text "
                         f"p50 (target <= 10%); best raw text - best ids = {100 * share['difference']:.1f}% of "
                         "the best raw text (noisier: a difference of two timings).")
    return "\n".join(lines)


def render_readme(runs: dict) -> str:
    """The README's short version: raw text in, per precision and batch, ours against HF's tokenizer + model."""
    first = next(iter(runs.values()))["meta"]
    lines = [f"Serving raw text (XLNet-Base shape, seq 128; our SavedModel as TF Serving loads it vs HF's fast "
             f"tokenizer + PyTorch model; {first['cpu'].split(',')[0]}, {first['when']}; "
             "[bench/reports/serving.md](bench/reports/serving.md)):", "",
             "| precision | batch | ours p50 (ms) | HF p50 (ms) | ours vs HF |", "|---|---:|---:|---:|---:|"]
    for dtype, run in runs.items():
        for key, (ours, hf) in run["rows"].items():
            inputs, batch = key.split("/")
            if inputs == "text":
                lines.append(f"| {dtype} | {batch} | {ours['p50']:.0f} | {hf['p50']:.0f} | "
                             f"{hf['p50'] / ours['p50']:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtypes", default=None, help="comma-separated (default: float32, plus mixed_bfloat16 "
                        "where the CPU has bfloat16 instructions)")
    parser.add_argument("--out", default=os.path.join(HERE, "results_serving.md"))
    parser.add_argument("--_child", choices=["tf", "hf"])
    parser.add_argument("--_dtype")
    parser.add_argument("--_data")
    parser.add_argument("--_export")
    parser.add_argument("--_batches", type=int, nargs="+", default=list(BATCHES))
    args = parser.parse_args()
    set_thread_env(args.threads)
    if args._child:
        result = (child_tf if args._child == "tf" else child_hf)(args)
        sys.stdout.write("\n" + json.dumps(result) + "\n")
        sys.stdout.flush()
        os._exit(0)

    from bench_pretrain import machine_info

    def log(message):
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    with open("/proc/cpuinfo") as f:
        bf16 = any(flag in f.read() for flag in ("avx512_bf16", "amx_bf16"))
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32"] + (["mixed_bfloat16"] if bf16 else [])
    if args.quick:
        dtypes, args._batches = dtypes[:1], [32]
    load_before, started = os.getloadavg()[0], time.perf_counter()
    log(f"machine: {machine_info()}; load average {load_before:.2f}; {args.threads} threads; {dtypes}")
    import torch
    import transformers

    results = os.path.splitext(args.out)[0] + ".json"  # every precision's last run, merged into one report
    runs = {}
    if os.path.exists(results) and not args.quick:
        with open(results, encoding="utf-8") as f:
            runs = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            began, load = time.perf_counter(), os.getloadavg()[0]
            path, strings, features, pre_only = export(dtype, os.path.join(tmp, dtype), log)
            data = os.path.join(tmp, f"{dtype}.npz")
            np.savez(data, sentences=np.array([s.encode() for s in strings]), **features)
            ours = run_child("tf", dtype, path, data, args, log)
            hf = run_child("hf", dtype, path, data, args, log)
            run = {"rows": {key: (ours[key], hf[key]) for key in ours}}
            if "text/32" in ours:
                text = ours["text/32"]["p50"]
                best = ours["text/32"]["min"]
                run["pre_share"] = dict(alone=pre_only["p50"], share=pre_only["p50"] / text,
                                        difference=(best - ours["ids/32"]["min"]) / best)
            run["meta"] = dict(when=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), threads=args.threads,
                               cpu=machine_info(), load_before=load, load_after=os.getloadavg()[0],
                               transformers=transformers.__version__, torch=torch.__version__,
                               seconds=time.perf_counter() - began,
                               command="python bench/bench_serving.py" + (" --quick" if args.quick else "")
                               + (f" --dtypes={args.dtypes}" if args.dtypes else ""))
            runs[dtype] = run
            shutil.rmtree(os.path.join(tmp, dtype), ignore_errors=True)
    report = render(runs)
    print(report)
    log(f"done in {time.perf_counter() - started:.0f} s")
    if not args.quick:
        with open(results + ".tmp", "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=1)
        os.replace(results + ".tmp", results)
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            f.write("# Serving benchmark (bench/bench_serving.py)\n\n" + report + "\n")
        os.replace(args.out + ".tmp", args.out)
        replace_block(os.path.join(HERE, "reports", "serving.md"), "bench_serving.py", report)
        replace_block(os.path.join(ROOT, "README.md"), "bench_serving.py", render_readme(runs))
        log("updated bench/reports/serving.md and README.md")


if __name__ == "__main__":
    main()
