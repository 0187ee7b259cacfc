"""Does pretraining pay? Pretrain a small XLNet on the bundled corpora for a fixed token budget, then fine-tune it
and a randomly initialised copy on the bundled sentiment sentences with few labels, several seeds each.

    .venv/bin/python bench/pretraining_pays.py --quick   # a few minutes: the pipeline end to end, not the answer
    .venv/bin/python bench/pretraining_pays.py           # the reported run (30-45 min on 2 cores)

Steps, each skipped when its output exists (a rerun resumes; delete --work_dir to start over):

1. A SentencePiece model with XLNet's ids (``xlnet_tf.cli.train_spm``'s recipe) on ``--corpus`` (``shared/data/corpus``:
   the Brown corpus and Jane Austen's novels, ~10 MB, ~2.5M pieces at the default 8,000 vocabulary).
2. Pretraining data (``create_pretraining_data``'s writer) and ``pretrain`` of ``--model_config`` (default
   ``configs/small.json``: 4 layers, d_model 128) for ``--pretrain_tokens`` tokens (steps = tokens / (batch x
   seq_len)), keeping ``--checkpoints`` checkpoints along the way (4: every quarter of the budget). The loss
   curve, accuracy and tokens/s come from the run's TensorBoard scalars.
3. For every ``--labels`` count (a seeded sample of ``train.tsv``; ``all`` = every row) and ``--seeds`` seed:
   fine-tune from the last pretraining checkpoint and from random weights with the same flags and the same
   sample (paired), and evaluate on ``dev.tsv`` (never used for anything else). The smallest label count is also
   fine-tuned from the earlier checkpoints: what the pretraining budget buys.
4. ``<work_dir>/results.json`` (everything) and the tables between the markers of ``bench/reports/pretraining_pays.md``.

Everything goes through the library's entry-point functions (``pretrain`` and the classifier's ``run``) with every
setting given explicitly, in this process.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import glob
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from reporting import replace_block, scalars  # noqa: E402  (bench/ is the script's directory)
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
DOC = os.path.join(HERE, "reports", "pretraining_pays.md")

# Pretraining shape (the tiny demo's, on the small model): 16 x 128 tokens a step, half of each reused as memory.
BATCH, SEQ_LEN, REUSE_LEN, NUM_PREDICT = 16, 128, 64, 21
QUICK = dict(pretrain_tokens=1_000_000, labels="200,all", seeds="0,1", finetune_steps="150,200", checkpoints=1)


def sentencepiece(args, work, log) -> str:
    prefix = os.path.join(work, "spm", "spiece")
    if not os.path.exists(prefix + ".model"):
        from xlnet_tf.tokenization import train_sentencepiece

        start = time.time()
        train_sentencepiece(args.corpus.split(","), prefix, vocab_size=args.vocab_size)
        log(f"  SentencePiece model {prefix}.model ({args.vocab_size} pieces, {time.time() - start:.0f} s)")
    return prefix + ".model"


def unigram_entropy(data_dir: str, vocab_size: int) -> float:
    """Cross-entropy of the data under its own unigram distribution: a pretraining loss at this level has learned
    token frequencies and nothing from the context."""
    import numpy as np

    from xlnet_tf.data.unigram import token_counts

    counts = token_counts(data_dir, vocab_size)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def pretrain_stage(args, work, spm, log) -> dict:
    from xlnet_tf.training.pretraining import pretrain
    from xlnet_tf.training.settings import PretrainSettings

    steps = max(4, math.ceil(args.pretrain_tokens / (BATCH * SEQ_LEN)))
    every = max(1, math.ceil(steps / args.checkpoints))
    report = min(100, every)
    settings = PretrainSettings(
        objective="plm", model_config_path=args.model_config, spiece_model_file=spm, input_glob=args.corpus,
        data_dir=os.path.join(work, "pretrain_data"), model_dir=os.path.join(work, "pretrain"),
        train_batch_size=BATCH, seq_len=SEQ_LEN, reuse_len=REUSE_LEN, mem_len=REUSE_LEN, perm_size=REUSE_LEN,
        num_predict=NUM_PREDICT, bi_data=False, train_steps=steps, iterations=report, save_steps=every,
        max_save=0, learning_rate=args.pretrain_lr, warmup_steps=max(1, steps // 16), decay_method="poly",
        min_lr_ratio=0.001, weight_decay=0.01, adam_epsilon=1e-6, clip=1.0, dropout=0.1, dropatt=0.1,
        seed=args.seed, strategy="one_device", dtype="float32")
    start = time.time()
    pretrain(settings)
    seconds = time.time() - start
    logged = scalars(settings.model_dir)
    speeds = [v for step, v in logged.get("tokens_per_sec", []) if step > report] or \
        [v for _, v in logged.get("tokens_per_sec", [])]
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(settings.model_dir)
    checkpoints = sorted(state.all_model_checkpoint_paths, key=lambda p: int(p.rsplit("-", 1)[1]))
    result = dict(model_dir=settings.model_dir, steps=steps, tokens=steps * BATCH * SEQ_LEN, seconds=seconds,
                  tokens_per_sec=statistics.median(speeds) if speeds else float("nan"),
                  unigram_entropy=unigram_entropy(settings.data_dir, args.vocab_size),
                  checkpoints=checkpoints, curves={tag: values for tag, values in logged.items()
                                                   if tag in ("loss", "accuracy", "tokens_per_sec")})
    loss = result["curves"]["loss"]
    log(f"  pretrained {steps} steps ({result['tokens']:,} tokens): loss {loss[0][1]:.3f} -> {loss[-1][1]:.3f} "
        f"(unigram entropy {result['unigram_entropy']:.3f}), {result['tokens_per_sec']:,.0f} tok/s, {seconds:.0f} s")
    return result


def label_subset(args, work, count: str, seed: int) -> str:
    """A directory in the GLUE SST-2 layout with ``count`` training rows drawn with ``seed`` (all rows for 'all')
    and the full dev set."""
    import numpy as np

    out = os.path.join(work, "labels", f"n{count}_seed{seed}")
    if os.path.exists(os.path.join(out, "dev.tsv")):
        return out
    with open(os.path.join(args.sentiment, "train.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quotechar=None))
    header, rows = rows[0], rows[1:]
    if count != "all":
        keep = np.random.default_rng(1000 + seed).permutation(len(rows))[:int(count)]
        rows = [rows[i] for i in sorted(keep)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    with open(os.path.join(args.sentiment, "dev.tsv"), encoding="utf-8") as src:
        dev = src.read()
    with open(os.path.join(out, "dev.tsv") + ".tmp", "w", encoding="utf-8") as f:
        f.write(dev)
    os.replace(os.path.join(out, "dev.tsv") + ".tmp", os.path.join(out, "dev.tsv"))
    return out


def finetune_one(args, work, spm, count, seed, steps, init_name, init_checkpoint, log) -> float:
    from xlnet_tf.runner import run
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    model_dir = os.path.join(work, "finetune", f"n{count}_seed{seed}_{init_name}")
    results = os.path.join(model_dir, "eval_results.dev.json")
    if not os.path.exists(results):
        settings = ClassifierSettings(
            task_name="sst-2", data_dir=label_subset(args, work, count, seed), model_config_path=args.model_config,
            spiece_model_file=spm, init_checkpoint=init_checkpoint, model_dir=model_dir,
            output_dir=os.path.join(model_dir, "features"), do_train=True, do_eval=True, do_predict=False,
            export_dir=None, eval_split="dev", max_seq_length=64, train_batch_size=32, eval_batch_size=200,
            train_steps=steps, warmup_steps=max(1, steps // 10), iterations=steps, save_steps=steps, max_save=1,
            learning_rate=args.finetune_lr, decay_method="poly", min_lr_ratio=0.0, weight_decay=0.0,
            adam_epsilon=1e-6, clip=1.0, dropout=0.1, dropatt=0.1, summary_type="last", use_summ_proj=True,
            lr_layer_decay_rate=1.0, seed=seed, strategy="one_device", dtype="float32")
        run(settings)
    with open(results, encoding="utf-8") as f:
        accuracy = json.load(f)["metrics"]["accuracy"]
    log(f"  n={count} seed {seed} {init_name}: dev accuracy {accuracy:.4f}")
    return accuracy


def mean_sd(values) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {spread:.3f}"


def render(args, pre, runs, seconds, started) -> str:
    labels = args.labels.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    load = os.getloadavg()
    command = "python bench/pretraining_pays.py" + (" --quick" if args.quick else "")
    lines = [
        f"Run of {started:%Y-%m-%d %H:%M}: `{command}` ({seconds / 60:.0f} min in all, of which pretraining "
        f"{pre['seconds'] / 60:.0f} min; load average {load[0]:.1f} at the end on {os.cpu_count()} CPUs shared with "
        f"other jobs). Model `{os.path.relpath(args.model_config, ROOT)}`, SentencePiece vocabulary "
        f"{args.vocab_size}; pretraining {pre['steps']} steps of {BATCH} x {SEQ_LEN} tokens ({pre['tokens']:,} "
        f"tokens), learning rate {args.pretrain_lr}; fine-tuning batch 32, learning rate {args.finetune_lr}, "
        f"steps {args.finetune_steps} for labels {args.labels}; seeds {args.seeds}; dev = the 600 sentences of "
        "`dev.tsv`.",
        "",
        "| labelled examples | fine-tuning steps | random init | pretrained | pretrained - random (paired) "
        "| pretrained better | runs (random / pretrained) |",
        "|---|---:|---|---|---|---:|---|",
    ]
    final = pre["checkpoints"][-1]
    for count, steps in zip(labels, args.finetune_steps.split(",")):
        rnd = [runs[(count, s, "random")] for s in seeds if (count, s, "random") in runs]
        prt = [runs[(count, s, final)] for s in seeds if (count, s, final) in runs]
        diffs = [p - r for p, r in zip(prt, rnd)]
        shown = "2400 (all)" if count == "all" else count
        lines.append(f"| {shown} | {steps} | {mean_sd(rnd)} | {mean_sd(prt)} | {mean_sd(diffs)} | "
                     f"{sum(d > 0 for d in diffs)}/{len(diffs)} | {', '.join(f'{a:.3f}' for a in rnd)} / "
                     f"{', '.join(f'{a:.3f}' for a in prt)} |")
    low = labels[0]
    lines += ["", f"With {low} labels, from each pretraining checkpoint (what the token budget buys):", "",
              "| checkpoint | tokens | pretraining loss | dev accuracy | pretrained - random (paired) |",
              "|---|---:|---:|---|---|"]
    loss = dict(pre["curves"].get("loss", []))
    rnd = [runs[(low, s, "random")] for s in seeds if (low, s, "random") in runs]
    lines.append(f"| random init | 0 | - | {mean_sd(rnd)} | - |")
    for ckpt in pre["checkpoints"]:
        step = int(ckpt.rsplit("-", 1)[1])
        acc = [runs[(low, s, ckpt)] for s in seeds if (low, s, ckpt) in runs]
        diffs = [a - r for a, r in zip(acc, rnd)]
        at = loss.get(step, float("nan"))
        lines.append(f"| step {step} | {step * BATCH * SEQ_LEN:,} | {at:.3f} | {mean_sd(acc)} | {mean_sd(diffs)} |")
    lines += ["", f"Pretraining curve (unigram entropy of the data: {pre['unigram_entropy']:.3f}; median "
                  f"{pre['tokens_per_sec']:,.0f} tokens/s, {pre['seconds'] / 60:.1f} min):", "",
              "| step | tokens | loss | accuracy | tokens/s |", "|---:|---:|---:|---:|---:|"]
    acc = dict(pre["curves"].get("accuracy", []))
    speed = dict(pre["curves"].get("tokens_per_sec", []))
    every = max(1, len(loss) // 12)
    shown = sorted(loss)[every - 1::every]
    if sorted(loss)[-1] not in shown:
        shown.append(sorted(loss)[-1])
    for step in shown:
        a = f"{acc[step]:.3f}" if step in acc else "-"
        lines.append(f"| {step} | {step * BATCH * SEQ_LEN:,} | {loss[step]:.3f} | {a} | {speed.get(step, 0):,.0f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"a few minutes: {QUICK['pretrain_tokens']:,} pretraining tokens, labels "
                             f"{QUICK['labels']}, seeds {QUICK['seeds']}; writes no doc unless --doc")
    parser.add_argument("--work_dir", help="default: runs/pretraining_pays (runs/pretraining_pays_quick)")
    parser.add_argument("--corpus", default=",".join(sorted(glob.glob(os.path.join(SHARED, "corpus", "*.txt")))),
                        help="pretraining text files, comma-separated")
    parser.add_argument("--sentiment", default=os.path.join(SHARED, "sentiment"),
                        help="train.tsv / dev.tsv in the GLUE SST-2 layout")
    parser.add_argument("--model_config", default=os.path.join(ROOT, "configs", "small.json"))
    parser.add_argument("--vocab_size", type=int, default=8000, help="SentencePiece vocabulary (= the config's)")
    parser.add_argument("--pretrain_tokens", type=int, default=8_000_000, help="the pretraining token budget")
    parser.add_argument("--pretrain_lr", type=float, default=1e-3)
    parser.add_argument("--checkpoints", type=int, default=4,
                        help="pretraining checkpoints kept along the budget; the smallest label count is fine-tuned "
                             "from each")
    parser.add_argument("--seed", type=int, default=0, help="pretraining seed")
    parser.add_argument("--labels", default="200,500,all", help="labelled training examples per run")
    parser.add_argument("--finetune_steps", default="200,250,300", help="fine-tuning steps, one per --labels")
    parser.add_argument("--finetune_lr", type=float, default=1e-3)
    parser.add_argument("--seeds", default="0,1,2", help="fine-tuning seeds (label sample, head, dropout, order)")
    parser.add_argument("--doc", action="store_true", help="write bench/reports/pretraining_pays.md even with --quick")
    parser.add_argument("--no_doc", action="store_true", help="do not write bench/reports/pretraining_pays.md")
    args = parser.parse_args()
    if args.quick:
        for key, value in QUICK.items():
            if parser.get_default(key) == getattr(args, key):
                setattr(args, key, value)
    if len(args.finetune_steps.split(",")) != len(args.labels.split(",")):
        parser.error("--finetune_steps needs one value per --labels entry")
    work = args.work_dir or os.path.join(ROOT, "runs", "pretraining_pays_quick" if args.quick else "pretraining_pays")
    os.makedirs(work, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from xlnet_tf.config import XLNetConfig

    if XLNetConfig.from_json(args.model_config).n_token != args.vocab_size:
        parser.error(f"--model_config n_token must equal --vocab_size={args.vocab_size}")
    started, start = datetime.datetime.now(), time.time()

    def log(message):
        print(f"[{time.time() - start:6.0f} s] {message}", flush=True)

    log(f"work dir {work}")
    spm = sentencepiece(args, work, log)
    pre = pretrain_stage(args, work, spm, log)
    runs = {}
    labels, seeds = args.labels.split(","), [int(s) for s in args.seeds.split(",")]
    for count, steps in zip(labels, [int(s) for s in args.finetune_steps.split(",")]):
        for seed in seeds:
            runs[(count, seed, "random")] = finetune_one(args, work, spm, count, seed, steps, "random", None, log)
            inits = pre["checkpoints"] if count == labels[0] else pre["checkpoints"][-1:]
            for ckpt in inits:
                name = "pretrained-" + ckpt.rsplit("-", 1)[1]
                runs[(count, seed, ckpt)] = finetune_one(args, work, spm, count, seed, steps, name, ckpt, log)
    seconds = time.time() - start
    block = render(args, pre, runs, seconds, started)
    with open(os.path.join(work, "results.json"), "w", encoding="utf-8") as f:
        json.dump(dict(args=vars(args), pretraining=pre, seconds=seconds,
                       runs=[dict(labels=c, seed=s, init=i, accuracy=a) for (c, s, i), a in runs.items()]), f, indent=1)
    print(block)
    if not args.no_doc and (args.doc or not args.quick):
        replace_block(DOC, "pretraining_pays.py", block)
        log(f"wrote {DOC}")


if __name__ == "__main__":
    main()
