"""Which pretraining objective? XLNet's permutation LM, UniLMv2's pseudo-masked LM and MPNet on the same backbone,
corpus, token budget and seeds, then fine-tuned on the bundled sentiment sentences, against random initialisation.

    .venv/bin/python bench/compare_objectives.py --quick   # the short run (its time: bench/reports/objectives.md)
    .venv/bin/python bench/compare_objectives.py           # the longer run: a longer corpus, sequences, training

Steps (everything through the library's own entry points, ``pretrain`` and the classifier's ``run``):

1. One pretraining data directory from ``shared/data/corpus`` (``--corpus``; the same records serve every
   objective: each draws its masks and orders from them when reading).
2. For each objective, ``pretrain`` from the same initial weights and seed for the same number of steps (the same
   text tokens), without memory (UniLMv2 and MPNet have none; XLNet's with memory is ``--plm_mem_len``): the loss
   curves, step time, text tokens/s and MFU come from the run's TensorBoard scalars.
3. Fine-tune every pretrained network and a randomly initialised one on ``shared/data/sentiment`` (GLUE SST-2
   layout) with ``--seeds`` seeds; dev accuracy per run.
4. ``<work_dir>/results.json`` (everything) and the tables between the markers of ``bench/reports/objectives.md``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from reporting import replace_block, scalars  # noqa: E402  (bench/ is the script's directory)
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
DOC = os.path.join(HERE, "reports", "objectives.md")
OBJECTIVES = ("plm", "pmlm", "mpnet")

# (quick, full): the budget of each part.
PLANS = {
    True: dict(corpus_lines=6000, seq_len=64, batch=16, pretrain_steps=600, finetune_steps=300, report_every=50),
    False: dict(corpus_lines=None, seq_len=128, batch=16, pretrain_steps=2000, finetune_steps=500, report_every=100),
}


def corpus_file(work: str, sources: list[str], lines) -> str:
    """The corpus as one file (the first ``lines`` lines of each source, or all)."""
    path = os.path.join(work, "corpus.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            for source in sources:
                with open(source, encoding="utf-8") as f:
                    out.writelines(f.readlines()[:lines] if lines else f.readlines())
                out.write("\n")
        os.replace(path + ".tmp", path)
    return path


def pretrain_one(args, plan, work, corpus, objective, log) -> dict:
    from xlnet_tf.training.pretraining import pretrain
    from xlnet_tf.training.settings import PretrainSettings

    seq = plan["seq_len"]
    mem_len = args.plm_mem_len if objective == "plm" else 0
    settings = PretrainSettings(
        objective=objective, model_config_path=args.model_config, spiece_model_file=args.spiece_model_file,
        input_glob=corpus, data_dir=os.path.join(work, "data"), model_dir=os.path.join(work, f"pretrain_{objective}"),
        train_batch_size=plan["batch"], seq_len=seq, reuse_len=seq // 2, mem_len=mem_len,
        num_predict=round(0.15 * seq), train_steps=plan["pretrain_steps"], iterations=plan["report_every"],
        learning_rate=args.pretrain_lr, warmup_steps=plan["pretrain_steps"] // 10, weight_decay=0.01,
        adam_epsilon=1e-6, seed=args.seed)
    start = time.time()
    pretrain(settings)
    logged = scalars(settings.model_dir)

    def steady(tag):  # the median after the first report (which includes tracing)
        values = logged.get(tag, [])
        return statistics.median([v for step, v in values if step > plan["report_every"]] or
                                 [v for _, v in values] or [float("nan")])

    result = dict(objective=objective, mem_len=mem_len, model_dir=settings.model_dir, seconds=time.time() - start,
                  tokens=plan["pretrain_steps"] * plan["batch"] * seq, tokens_per_sec=steady("tokens_per_sec"),
                  step_seconds=plan["batch"] * seq / steady("tokens_per_sec"), mfu=steady("mfu"),
                  curves={tag: values for tag, values in logged.items()
                          if tag == "loss" or tag.startswith(("loss_", "accuracy"))})
    log(f"  pretrained {objective}: loss {result['curves']['loss'][0][1]:.3f} -> {result['curves']['loss'][-1][1]:.3f}"
        f", {result['tokens_per_sec']:.0f} tok/s ({result['seconds']:.0f} s)")
    return result


def finetune_one(args, plan, work, init, seed, log) -> float:
    from xlnet_tf.runner import run
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    name = f"finetune_{init}_seed{seed}"
    steps = plan["finetune_steps"]
    settings = ClassifierSettings(
        task_name="sst-2", data_dir=args.sentiment, output_dir=os.path.join(work, "features"),
        model_config_path=args.model_config, spiece_model_file=args.spiece_model_file,
        init_checkpoint=None if init == "random" else os.path.join(work, f"pretrain_{init}"),
        model_dir=os.path.join(work, name), do_train=True, do_eval=True, max_seq_length=64, train_batch_size=32,
        eval_batch_size=200, train_steps=steps, warmup_steps=steps // 10, iterations=steps,
        learning_rate=args.finetune_lr, adam_epsilon=1e-6, seed=seed)
    accuracy = run(settings)["eval"]["metrics"]["accuracy"]
    log(f"  fine-tuned {init} seed {seed}: dev accuracy {accuracy:.4f}")
    return accuracy


def render(args, plan, pretrained, accuracies, seconds) -> str:
    """The tables for bench/reports/objectives.md."""
    load = os.getloadavg()
    lines = [
        f"Run {datetime.datetime.now():%Y-%m-%d %H:%M}: `python bench/compare_objectives.py"
        f"{' --quick' if args.quick else ''}` ({seconds / 60:.0f} min, load average {load[0]:.1f} at the end, "
        f"{os.cpu_count()} CPUs). Backbone `{os.path.relpath(args.model_config, ROOT)}`; pretraining: seq_len "
        f"{plan['seq_len']}, batch {plan['batch']}, {plan['pretrain_steps']} steps "
        f"({plan['pretrain_steps'] * plan['batch'] * plan['seq_len']:,} text tokens) per objective, learning rate "
        f"{args.pretrain_lr}, seed {args.seed}; fine-tuning: SST-2 layout sentiment sentences (2,400 train, 600 dev), "
        f"{plan['finetune_steps']} steps of batch 32, learning rate {args.finetune_lr}, seeds "
        f"{', '.join(map(str, range(args.seeds)))}.",
        "",
        "| initialisation | memory | pretraining loss, first -> last | last terms | step (s) | text tokens/s | MFU "
        "| dev accuracy, mean ± sd | runs |",
        "|---|---:|---|---|---:|---:|---:|---|---|",
    ]
    for init in (*OBJECTIVES, "random"):
        acc = accuracies.get(init, [])
        mean = statistics.mean(acc) if acc else float("nan")
        spread = statistics.stdev(acc) if len(acc) > 1 else 0.0
        runs = ", ".join(f"{a:.3f}" for a in acc)
        if init == "random":
            lines.append(f"| random | - | - | - | - | - | - | {mean:.3f} ± {spread:.3f} | {runs} |")
            continue
        p = pretrained[init]
        loss = p["curves"]["loss"]
        terms = ", ".join(f"{tag} {values[-1][1]:.3f}" for tag, values in sorted(p["curves"].items())
                          if tag != "loss")
        mfu = f"{100 * p['mfu']:.2f}%"
        lines.append(f"| {init} | {p['mem_len']} | {loss[0][1]:.3f} -> {loss[-1][1]:.3f} | {terms} | "
                     f"{p['step_seconds']:.3f} | {p['tokens_per_sec']:,.0f} | {mfu} | {mean:.3f} ± {spread:.3f} | "
                     f"{runs} |")
    lines += ["", "Pretraining loss curves (the progress line's loss, every report; pmlm: L_AE + L_PAR):", "",
              "| step | " + " | ".join(OBJECTIVES) + " |", "|---:|" + "---:|" * len(OBJECTIVES)]
    steps = [step for step, _ in pretrained[OBJECTIVES[0]]["curves"]["loss"]]
    for i, step in enumerate(steps):
        row = [f"{pretrained[o]['curves']['loss'][i][1]:.3f}" if i < len(pretrained[o]["curves"]["loss"]) else ""
               for o in OBJECTIVES]
        lines.append(f"| {step} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller corpus slice, shorter runs")
    parser.add_argument("--work_dir", default=os.path.join(ROOT, "runs", "compare_objectives"))
    parser.add_argument("--corpus", default=",".join(sorted(glob.glob(os.path.join(SHARED, "corpus", "*.txt")))))
    parser.add_argument("--sentiment", default=os.path.join(SHARED, "sentiment"))
    parser.add_argument("--model_config", default=os.path.join(ROOT, "configs", "tiny.json"))
    parser.add_argument("--spiece_model_file", default=os.path.join(ROOT, "data", "spiece.model"))
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per initialisation")
    parser.add_argument("--seed", type=int, default=0, help="pretraining seed (weights, data order, masks)")
    parser.add_argument("--pretrain_lr", type=float, default=1e-3)
    parser.add_argument("--finetune_lr", type=float, default=1e-3)
    parser.add_argument("--plm_mem_len", type=int, default=0, help="XLNet's memory (the others have none)")
    parser.add_argument("--pretrain_steps", type=int, help="override the plan's pretraining steps")
    parser.add_argument("--finetune_steps", type=int, help="override the plan's fine-tuning steps")
    parser.add_argument("--no_doc", action="store_true", help="do not write bench/reports/objectives.md")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    plan = dict(PLANS[args.quick])
    plan.update({k: getattr(args, k) for k in ("pretrain_steps", "finetune_steps") if getattr(args, k)})
    work = os.path.join(args.work_dir, "quick" if args.quick else "full")
    os.makedirs(work, exist_ok=True)

    def log(message):
        print(message, flush=True)

    start = time.time()
    corpus = corpus_file(work, args.corpus.split(","), plan["corpus_lines"])
    log(f"corpus {corpus} ({os.path.getsize(corpus) / 1e6:.1f} MB); work dir {work}")
    pretrained = {o: pretrain_one(args, plan, work, corpus, o, log) for o in OBJECTIVES}
    accuracies = {init: [finetune_one(args, plan, work, init, seed, log) for seed in range(args.seeds)]
                  for init in (*OBJECTIVES, "random")}
    seconds = time.time() - start
    block = render(args, plan, pretrained, accuracies, seconds)
    print("\n" + block)
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(dict(args=vars(args), plan=plan, pretrained=pretrained, accuracies=accuracies, seconds=seconds), f,
                  indent=1)
    if not args.no_doc:
        replace_block(DOC, "compare_objectives.py", block)
        log(f"wrote {DOC}")


if __name__ == "__main__":
    main()
