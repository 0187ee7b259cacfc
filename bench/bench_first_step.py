"""What a training run waits for before its first step: the first host loop of the training loop (tracing the step,
then running it once), at the XLNet-Base shape, for this checkout against another one.

    python bench/bench_first_step.py --other /tmp/base [--rounds=3]    # ~4 min on 2 cores; prints one JSON object

``--other``: a checkout of another commit (``git worktree add /tmp/base <commit>``). Each round runs, in a fresh
process per checkout and mode (alternating, since two versions of xlnet_tf cannot share a process), that
checkout's entry point as a user starts it, and times its first host loop (``--iterations=1``):
``finetune``: run_classifier.py on the bundled sentiment sentences (XLNet-Base layers, data/spiece.model's
8000-piece vocabulary, random weights, seq 128, batch 4); ``pretrain``: run_pretrain.py on the bundled corpus (same
shape, plm, seq 128, memory 64, batch 4; its data written once, before the rounds). Medians over the rounds, and
B / A (above 1: --other is slower), and the median second host loop (one step, both checkouts). The report
quoting it: bench/reports/performance.md ("Time to the first step").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reporting import cpu_name  # noqa: E402

# Runs an entry point of the checkout argv[1] (argv[2]: the script, then its flags) and prints the seconds of its
# first two host loops of one step (xlnet_tf.training.setup.run_host_loops): the step traced and run, then run.
_CHILD = """
import os, runpy, sys, time
tree, script = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
from xlnet_tf.training import setup
assert setup.__file__.startswith(tree), setup.__file__
run_host_loops, loops = setup.run_host_loops, []
def timed(host_loop, **kwargs):
    def loop(steps, state):
        start = time.perf_counter()
        out = host_loop(steps, state)
        loops.append(time.perf_counter() - start)
        if len(loops) == 2:  # printed now: the entry point ends its process with os._exit
            print("HOST_LOOPS", *loops, flush=True)
        return out
    return run_host_loops(loop, **kwargs)
setup.run_host_loops = timed
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(os.path.join(tree, script), run_name="__main__")
"""


def base_config(path: str) -> str:
    """XLNet-Base's layers with data/spiece.model's vocabulary (its 8000 pieces)."""
    with open(os.path.join(ROOT, "configs", "xlnet_cased_L-12_H-768_A-12.json")) as f:
        config = json.load(f)
    config["n_token"] = 8000
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def commands(tmp: str, config: str) -> dict:
    common = [f"--model_config_path={config}", f"--spiece_model_file={ROOT}/data/spiece.model", "--iterations=1",
              "--train_steps=3", "--warmup_steps=0", "--train_batch_size=4"]
    return {
        "finetune": ["run_classifier.py", "--task_name=sst-2", f"--data_dir={ROOT}/data/sentiment", "--do_train",
                     f"--output_dir={tmp}/features", "--max_seq_length=128", *common],
        "pretrain": ["run_pretrain.py", f"--input_glob={ROOT}/data/corpus/brown_sample.txt",
                     f"--data_dir={tmp}/pretrain_data", "--seq_len=128", "--reuse_len=64", "--mem_len=64",
                     "--perm_size=64", "--num_predict=21", *common],
    }


def host_loops(tree: str, argv: list, model_dir: str) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, tree, *argv, f"--model_dir={model_dir}"], cwd=tree,
                          capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {argv[0]} failed:\n{done.stderr[-3000:]}")
    timed = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("HOST_LOOPS ")]
    if not timed:
        raise RuntimeError(f"{tree}: {argv[0]} ran fewer than two host loops:\n{done.stderr[-3000:]}")
    return float(timed[0][0]), float(timed[0][1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", required=True, help="another checkout (B); this one is A")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    trees = {"A": ROOT, "B": os.path.abspath(args.other)}
    with tempfile.TemporaryDirectory() as tmp:
        runs = commands(tmp, base_config(os.path.join(tmp, "base.json")))
        host_loops(ROOT, runs["pretrain"], os.path.join(tmp, "warm"))  # writes the pretraining data once
        seconds = {mode: {name: [] for name in trees} for mode in runs}
        steps = {mode: [] for mode in runs}
        for round_ in range(args.rounds):
            for mode, argv_ in runs.items():
                for name, tree in (trees.items() if round_ % 2 == 0 else reversed(trees.items())):
                    model_dir = os.path.join(tmp, f"{mode}-{name}-{round_}")
                    first, second = host_loops(tree, argv_, model_dir)
                    seconds[mode][name].append(first)
                    steps[mode].append(second)
    result = {"cpu": cpu_name(), "cores": os.cpu_count(), "rounds": args.rounds, "other": trees["B"],
              "first_host_loop_s": {mode: {name: round(statistics.median(v), 2) for name, v in by.items()}
                                    for mode, by in seconds.items()},
              "step_s": {mode: round(statistics.median(v), 2) for mode, v in steps.items()}}
    for mode, by in result["first_host_loop_s"].items():
        by["B/A"] = round(by["B"] / by["A"], 2)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
