"""Batch prediction on Apache Beam (xlnet_tf.batch.beam) against ``python -m xlnet_tf.cli.predict`` on one machine:
the same export and input, each as a child process (its TensorFlow start and model load included, as a user runs
it): wall-clock seconds, rows/s, the ratio to cli.predict, peak RSS, and whether the rows are the same (as sets
keyed by file and line, values equal).

    python bench/bench_beam.py                      # tiny model, 50k rows in 4 shards (~6 min on 2 cores)
    python bench/bench_beam.py --rows=200000        # memory against input size: compare the RSS columns

Paths: cli.predict; Beam's DirectRunner engine (FnApiRunner) in memory, in the launcher's process; the same with
two worker processes (multi_processing), each with its own model, and with ``--share_model`` (one model on the
machine, the workers calling it). Peak RSS is wait4()'s: the child's own, or its largest waited-for descendant's
(the Beam worker processes), whichever is larger. Inputs are the bundled sentences (data/sentiment/train.tsv)
repeated; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_batch_predict import build, write_shards  # noqa: E402
from reporting import cpu_name  # noqa: E402


def run(cmd: list) -> tuple:
    """(seconds, peak RSS MiB) of ``cmd`` as a child; exits with its output if it fails."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{output[-5000:]}")
    return time.monotonic() - start, usage.ru_maxrss / 1024


def rows_of(out: str, beam: bool) -> dict:
    rows = {}
    if beam:
        for path in glob.glob(os.path.join(out, "predictions-*.jsonl")):
            for line in open(path, encoding="utf-8"):
                row = json.loads(line)
                rows[(row.pop("file"), row["line"])] = row
    else:
        for shard in json.load(open(os.path.join(out, "predict_summary.json")))["shards"]:
            for line in open(shard["output"], encoding="utf-8"):
                row = json.loads(line)
                rows[(shard["input"], row["line"])] = row
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--work_dir", default="/tmp/bench_beam")
    parser.add_argument("--paths", default="cli,beam_in_memory,beam_2_processes,beam_2_processes_shared")
    args = parser.parse_args()
    work = args.work_dir
    build(os.path.join(ROOT, "configs", "tiny.json"), os.path.join(work, "model_tiny"), args.seq)
    export = os.path.join(work, "model_tiny", "export")
    data = write_shards(os.path.join(work, f"in_{args.rows}"), args.rows, args.shards)
    base = [sys.executable, "-m", "xlnet_tf.cli.predict", f"--saved_model={export}", f"--input_glob={data}",
            "--id_field=id", f"--batch_size={args.batch_size}", "--progress_every_s=1e9"]
    beam = ["--runner=FnApiRunner"]  # the DirectRunner's batch engine, without its attempt to download Prism
    two = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    commands = {"cli": base, "beam_in_memory": base + beam + ["--direct_running_mode=in_memory"],
                "beam_2_processes": base + beam + two,
                "beam_2_processes_shared": base + beam + two + ["--share_model"]}
    table, expected = [], None
    for name in args.paths.split(","):
        out = os.path.join(work, f"out_{name}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = commands[name] + [f"--output_dir={out}"]
        seconds, rss = run(cmd)
        rows = rows_of(out, name != "cli")
        if name == "cli":
            expected = rows
        same = "-" if expected is None or name == "cli" else ("yes" if rows == expected else "NO")
        table.append((name, len(rows), seconds, rss, same, " ".join(c for c in cmd[1:] if not c.startswith(
            ("--saved_model", "--input_glob", "--output_dir")))))
        print(f"{name}: {len(rows)} rows in {seconds:.1f} s, peak RSS {rss:.0f} MiB, same rows as cli: {same}",
              flush=True)
    print(f"\n{cpu_name()}, {os.cpu_count()} CPUs; tiny model (configs/tiny.json), raw-text export, seq {args.seq}, "
          f"batch {args.batch_size}, {args.rows} rows in {args.shards} TSV shards; each path a child process "
          "(start and model load included)\n")
    print("| path | rows | seconds | rows/s | time vs cli | peak RSS MiB | rows equal cli's |")
    print("|---|---:|---:|---:|---:|---:|---|")
    cli_seconds = table[0][2] if table and table[0][0] == "cli" else None
    for name, n, seconds, rss, same, _ in table:
        ratio = f"{seconds / cli_seconds:.2f}x" if cli_seconds else "-"
        print(f"| {name} | {n} | {seconds:.1f} | {n / seconds:.0f} | {ratio} | {rss:.0f} | {same} |")
    print()
    for name, *_, cmd in table:
        print(f"{name}: {cmd}")


if __name__ == "__main__":
    main()
