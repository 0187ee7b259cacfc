"""Batch fine-tuning: several ``run_classifier.py`` runs from one YAML job file, in sequence, resumable, with one
results table.

    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml            # run (or resume) every run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --dry_run  # the runs and their flags, nothing run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --only=rte,mrpc

The job file::

    output_dir: runs/glue            # each run's --model_dir is <output_dir>/<run name>
    script: run_classifier.py        # optional: or run_tagger.py (token classification)
    defaults: {...}                  # flag values of every run (run_classifier.py's flag names)
    runs:
      - name: rte                    # required, unique; letters, digits, '.', '_', '-'
        task_name: rte               # any run_classifier.py flag: overrides the defaults
        seeds: [1, 2, 3]             # optional: one run per seed, named rte.seed1 ... (else the --seed flag)
        metric: accuracy             # optional: the metric of the table (default: the task's main one)

Runs of a task family of your own name its module like any flag (``task_module: my_tasks.py`` under defaults or
in a run entry; run_classifier.py loads it).

Each run is a subprocess (``python run_classifier.py --config_file=<model_dir>/job_flags.yaml``, output in
``<model_dir>/job.log``): a crash or an out-of-memory kill ends that run only, and no TensorFlow state carries
over. A run is *done* once its process exits 0 (``<model_dir>/job_done.json``); a rerun of the job skips done
runs, starts the others again (an interrupted one resumes from its last checkpoint: same ``--model_dir``) and
tries failed ones again. A run whose flags changed since it started is refused (recorded as failed, naming the
flags) rather than resumed with other settings. A failure is recorded with its reason (``job_failed.json``) and the
next run starts. ``<output_dir>/results.json`` and ``results.md`` (run, task, metric, value, best step, seed,
status; mean +- sd over the seeds of each entry) are rewritten atomically before and after every run, from the
runs' directories alone (``run_row``): ``gather`` writes the same bytes after runs elsewhere (``xlnet_tf.batch.
cluster``: Kubernetes, Slurm, Vertex AI) or a crash.

No TensorFlow in this process: it only starts and watches the runs. The command line is ``xlnet_tf.cli.jobs``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import yaml

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError
from xlnet_tf.io_utils import write_json_atomic, write_text_atomic
from xlnet_tf.training.settings import output_dir_problem

JOB_KEYS = ("output_dir", "defaults", "runs", "script")
RUN_KEYS = ("name", "seeds", "metric")  # the job's own keys in a run entry; every other key is a flag
FLAGS_FILE, LOG_FILE, DONE_FILE = "job_flags.yaml", "job.log", "job_done.json"
FAILED_FILE = "job_failed.json"  # the last attempt's end when it did not finish: status, reason, finished
# The task's main metric: what its report names (main_metric); in reports that name none, the first of these.
MAIN_METRICS = ("mcc", "pearson", "accuracy")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root


class JobError(InputError):
    """A job file that cannot work; the message names the file and the key."""


@dataclasses.dataclass
class Run:
    """One fine-tuning run of a job: ``flags`` are its run_classifier.py flag values (``model_dir`` and ``seed``
    included); ``group`` is the job file entry it comes from (its seeds are aggregated)."""
    name: str
    group: str
    flags: dict
    seed: Optional[int]
    metric: Optional[str] = None

    @property
    def model_dir(self) -> str:
        return self.flags["model_dir"]


@dataclasses.dataclass
class Job:
    path: str
    output_dir: str
    script: str
    runs: list
    sources: list = dataclasses.field(default_factory=list)  # (where in the file, its flags): the defaults, each entry


# The scripts a job runs, and the settings class of each one's flags ("module:class"; no TensorFlow in them):
# cli.jobs checks a job file's flags against it before any run starts.
SCRIPT_SETTINGS = {"run_classifier.py": "xlnet_tf.tasks.task_settings:ClassifierSettings",
                   "run_tagger.py": "xlnet_tf.tasks.tagging:TaggingSettings"}


def load_job(path: str) -> Job:
    """Reads and checks a job file (see the module docstring); expands seeds into runs."""
    spec = io_utils.read_mapping(path, missing="job file", expected="a mapping with output_dir, defaults and runs",
                                 error=JobError)
    unknown = sorted(set(spec) - set(JOB_KEYS))
    if unknown:
        raise JobError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))} (a job file has "
                       f"{', '.join(JOB_KEYS)}; flags go under defaults or a run)")
    if not spec.get("output_dir"):
        raise JobError(f"{path}: output_dir is missing (each run's --model_dir is <output_dir>/<run name>)")
    problem = output_dir_problem(str(spec["output_dir"]))
    if problem:
        raise JobError(f"{path}: output_dir={spec['output_dir']}: {problem}")
    defaults = spec.get("defaults") or {}
    entries = spec.get("runs")
    if not isinstance(defaults, dict):
        raise JobError(f"{path}: defaults must be a mapping of flag names to values")
    if not isinstance(entries, list) or not entries:
        raise JobError(f"{path}: runs must be a non-empty list")
    for where, values in [("defaults", defaults)] + [(f"runs[{i}]", e) for i, e in enumerate(entries)]:
        if not isinstance(values, dict):
            raise JobError(f"{path}: {where} must be a mapping")
        for owned in ("model_dir", "config_file"):
            if owned in values:
                raise JobError(f"{path}: {where} sets {owned!r}; the job sets it (model_dir: <output_dir>/<run "
                               f"name>; flags: defaults and the run entry)")
    output_dir = str(spec["output_dir"])
    runs, seen = [], set()
    for i, entry in enumerate(entries):
        name = entry.get("name")
        # A name is a directory under output_dir: "." and ".." would be the output directory or its parent.
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name) or set(name) == {"."}:
            raise JobError(f"{path}: runs[{i}] needs a name of letters, digits, '.', '_', '-', not only dots "
                           f"(got {name!r})")
        seeds = entry.get("seeds")
        if seeds is not None and (not isinstance(seeds, list) or not seeds
                                  or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds)):
            raise JobError(f"{path}: runs[{i}] ({name}): seeds must be a non-empty list of integers")
        if seeds is not None and "seed" in entry:
            raise JobError(f"{path}: runs[{i}] ({name}): give seed or seeds, not both")
        if entry.get("metric") is not None and not isinstance(entry["metric"], str):
            raise JobError(f"{path}: runs[{i}] ({name}): metric must be a metric's name, e.g. accuracy")
        flags = dict(defaults)
        flags.update({k: v for k, v in entry.items() if k not in RUN_KEYS})
        for seed in seeds if seeds is not None else [None]:
            run_name = name if seed is None else f"{name}.seed{seed}"
            if run_name in seen:
                raise JobError(f"{path}: run name {run_name!r} is used twice")
            seen.add(run_name)
            run_flags = dict(flags, model_dir=os.path.join(output_dir, run_name))
            if seed is not None:
                run_flags["seed"] = seed
            runs.append(Run(run_name, name, run_flags, run_flags.get("seed"), entry.get("metric")))
    script = str(spec.get("script", "run_classifier.py"))
    if os.path.basename(script) not in SCRIPT_SETTINGS:
        raise JobError(f"{path}: script {script!r}: batch fine-tuning runs run_classifier.py (GLUE, IMDB, Yelp, "
                       "RACE) or run_tagger.py (token classification)")
    sources = [("defaults", dict(defaults))] + [
        (f"runs[{i}] ({e['name']})", {k: v for k, v in e.items() if k not in RUN_KEYS}) for i, e in enumerate(entries)]
    return Job(path, output_dir, script, runs, sources)


def script_path(script: str) -> str:
    """``script`` as given if it exists (relative to the working directory), else in the repository root."""
    return script if os.path.exists(script) else os.path.join(REPO, script)


# --- one run ----------------------------------------------------------------------------------------------------

def failure_reason(log_text: str, returncode: int) -> str:
    """Why a run failed, for the table: the entry point's usage error ("run_classifier.py: error: ..."), else the
    exception at the end of a traceback, else how the process ended."""
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()]
    for line in reversed(lines):
        match = re.search(r"\.py: error: (.*)", line)
        if match:
            return match.group(1)
    if any(line.startswith("Traceback") for line in lines):
        for line in reversed(lines):
            if not line.startswith((" ", "\t")) and re.match(r"[\w.]+(Error|Exception|Exit)\b", line):
                return line
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        return f"killed by signal {name}" + (" (out of memory?)" if returncode == -signal.SIGKILL else "")
    return f"exit status {returncode}" + (f": {lines[-1]}" if lines else "")


def dump_flags(flags: dict) -> str:
    return yaml.safe_dump(flags, sort_keys=True, default_flow_style=False)


def flags_changed(run: Run) -> list:
    """The flags whose values differ from those the run's model_dir was started with ([] if none, or new)."""
    path = os.path.join(run.model_dir, FLAGS_FILE)
    if not io_utils.exists(path):
        return []
    try:
        with io_utils.open(path, encoding="utf-8") as f:
            before = yaml.safe_load(f) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        before = f"not valid YAML ({' '.join(str(e).split())[:200]})"
    if not isinstance(before, dict):
        detail = before if isinstance(before, str) else "not a mapping of flags"
        raise JobError(f"{path}: damaged, {detail}: it records the flags run {run.name!r} started with; delete it "
                       "(or the run's directory) to start the run with the job's flags")
    return sorted(k for k in set(before) | set(run.flags) if before.get(k) != run.flags.get(k))


def flags_problem(run: Run) -> Optional[str]:
    """Why the run must not start (or count as done): its model_dir was started with other flags, or the file
    recording them is damaged; None if neither."""
    try:
        changed = flags_changed(run)
    except JobError as e:  # this run cannot start; the job's other runs can
        return str(e)
    if changed:
        return (f"its flags changed since it started ({', '.join(changed)}); {run.model_dir} holds the earlier "
                "run: rename the run, or delete that directory to start it afresh")
    return None


def prepare_run(run: Run) -> Optional[str]:
    """Writes the run's flags file; returns the reason it must not start if its flags changed since it started
    (its model_dir holds a run with other settings, which would be resumed or reported as this one)."""
    problem = flags_problem(run)
    if problem:
        return problem
    if not io_utils.exists(os.path.join(run.model_dir, FLAGS_FILE)):
        write_text_atomic(os.path.join(run.model_dir, FLAGS_FILE), dump_flags(run.flags))
    return None


class _Forward:
    """Forwards SIGTERM/SIGINT to the running child (so a preempted job stops its run, which checkpoints), then
    lets the job end."""

    def __init__(self):
        self.child: Optional[subprocess.Popen] = None
        self.received: Optional[int] = None

    def __call__(self, signum, frame):
        self.received = signum
        if self.child and self.child.poll() is None:
            self.child.send_signal(signum)


def run_command(model_dir: str, script: str) -> list:
    """The command of one run: the same here (``finetune``) and on a cluster (``run``)."""
    return [sys.executable, script_path(script), f"--config_file={os.path.join(model_dir, FLAGS_FILE)}"]


def start_run(model_dir: str, script: str, log, echo: bool = False) -> subprocess.Popen:
    command = run_command(model_dir, script)
    log.write(f"\n===== {_now()} job attempt: {' '.join(command)}\n")
    log.flush()
    return subprocess.Popen(command, stdout=subprocess.PIPE if echo else log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=echo, errors="replace" if echo else None)


def attempt(model_dir: str, script: str, forward: "_Forward", echo: bool = False) -> dict:
    """One attempt at a prepared run (its flags file written): the run's process, its output appended to its log
    (``echo``: also to this process's stdout, as on a cluster), then its end recorded in its directory: DONE_FILE
    when it exited 0 (not stopped by a forwarded signal), else FAILED_FILE with the status (failed, or
    interrupted) and the reason. Returns status, reason and seconds."""
    io_utils.remove(os.path.join(model_dir, FAILED_FILE))  # an earlier attempt's end; this one starts now
    started = time.monotonic()
    with _run_log(os.path.join(model_dir, LOG_FILE)) as log:
        offset = log.tell()
        forward.child = start_run(model_dir, script, log, echo)
        if echo:
            for line in forward.child.stdout:
                log.write(line)
                sys.stdout.write(line)
                sys.stdout.flush()
        returncode = forward.child.wait()
        log.flush()
        log.seek(offset)
        new_log = log.read()
    seconds = round(time.monotonic() - started, 1)
    # A run stopped by a forwarded signal checkpoints and exits 128 + its number (a run of an older version: 0):
    # not done.
    if returncode == 0 and not forward.received:
        write_json_atomic(os.path.join(model_dir, DONE_FILE), dict(finished=_now(), seconds=seconds))
        return dict(status="done", reason=None, seconds=seconds)
    reason = failure_reason(new_log, returncode)
    if forward.received:
        stopped = returncode in (0, 128 + forward.received)  # it checkpointed and stopped
        reason = (f"interrupted by signal {signal.Signals(forward.received).name}"
                  + ("" if stopped else f" ({reason})"))
    status = "interrupted" if forward.received else "failed"
    write_json_atomic(os.path.join(model_dir, FAILED_FILE), dict(status=status, reason=reason, finished=_now(),
                                                                 seconds=seconds))
    return dict(status=status, reason=reason, seconds=seconds)


@contextlib.contextmanager
def _run_log(path: str):
    """The run's log, opened for appending and reading: the file itself on a local disk; for another filesystem
    (gs://) a local temporary file (the child writes to a file descriptor) whose text is appended to ``path``
    when the run ends."""
    local = io_utils.local_path(path)
    if local is not None:
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        with open(local, "a+", encoding="utf-8", errors="replace") as log:
            yield log
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        try:
            yield log
        finally:
            log.flush()
            log.seek(0)
            before = io_utils.read_bytes(path) if io_utils.exists(path) else b""
            io_utils.write_bytes_atomic(path, before + log.read().encode("utf-8"))


# --- results ----------------------------------------------------------------------------------------------------

def read_result(run: Run) -> dict:
    """The run's evaluation (``eval_results.<split>.json``): task, metric, value, best step (the evaluated step;
    with --eval_all_ckpt the best checkpoint's). {} if it has none."""
    split = run.flags.get("eval_split", "dev")
    path = os.path.join(run.model_dir, f"eval_results.{split}.json")
    if not io_utils.exists(path):
        return {}
    try:
        with io_utils.open(path, encoding="utf-8") as f:
            report = json.load(f)
        metrics, step = report["metrics"], report.get("step")
    except (ValueError, KeyError, TypeError) as error:  # written atomically by the run: damaged afterwards
        return dict(metric=run.metric, value=None, note=f"{path}: unreadable ({type(error).__name__}: "
                                                        f"{str(error)[:200]})")
    if report.get("best_metrics"):
        metrics = report["best_metrics"]
        found = re.search(r"-(\d+)$", report.get("best_checkpoint", ""))
        step = int(found.group(1)) if found else step
    metric = run.metric or report.get("main_metric") or next((m for m in MAIN_METRICS if m in metrics), None)
    if metric not in metrics:
        return dict(task=report.get("task"), metric=metric, value=None, best_step=step,
                    note=f"no metric {metric!r} in {path} (it has: {', '.join(metrics)})")
    return dict(task=report.get("task"), metric=metric, value=metrics[metric], best_step=step)


def _record(path: str) -> Optional[dict]:
    """A run's end record (DONE_FILE, FAILED_FILE): None if absent; {} if damaged (it still says the run ended)."""
    if not io_utils.exists(path):
        return None
    try:
        value = io_utils.read_json(path)
    except ValueError:  # JSONDecodeError, bad UTF-8
        return {}
    return value if isinstance(value, dict) else {}


def run_row(run: Run) -> dict:
    """The run's row of the table from its directory alone, wherever it ran: ``done`` (DONE_FILE, started with
    the job's flags), ``failed`` or ``interrupted`` (FAILED_FILE, or flags changed since it started), ``started``
    (a log but no end: running, or killed without a word), else ``pending``. The local runner's table and
    ``gather``'s are made of these rows, so they are the same bytes for the same directories."""
    row = dict(run=run.name, group=run.group, task=run.flags.get("task_name"), seed=run.seed,
               model_dir=run.model_dir, log=os.path.join(run.model_dir, LOG_FILE), status="pending")
    problem = flags_problem(run)
    if problem:
        return dict(row, status="failed", reason=problem)
    done = _record(os.path.join(run.model_dir, DONE_FILE))
    if done is not None:
        row.update(status="done", ended=done.get("finished"), seconds=done.get("seconds"))
        return dict(row, **read_result(run))
    failed = _record(os.path.join(run.model_dir, FAILED_FILE))
    if failed is not None:
        row.update(status=failed.get("status") if failed.get("status") == "interrupted" else "failed",
                   reason=failed.get("reason") or f"{os.path.join(run.model_dir, FAILED_FILE)}: unreadable",
                   ended=failed.get("finished"))
    elif io_utils.exists(row["log"]):
        row["status"] = "started"
    return row


def gather(job: Job) -> dict:
    """Rewrites the job's results table from its runs' directories (wherever the runs ran); returns it."""
    return write_results(job, [run_row(run) for run in job.runs])


def aggregate(rows: list) -> list:
    """Mean and sample standard deviation of each (entry, task, metric) over its done runs (the seeds)."""
    groups: dict = {}
    for row in rows:
        if row["status"] == "done" and row.get("value") is not None:
            groups.setdefault((row["group"], row["task"], row["metric"]), []).append(row["value"])
    out = []
    for (group, task, metric), values in groups.items():
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
        out.append(dict(runs=group, task=task, metric=metric, n=len(values), mean=mean, sd=sd, values=values))
    return out


def _fmt(value, digits=4) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render_markdown(results: dict) -> str:
    runs = results["runs"]
    counts = {s: sum(r["status"] == s for r in runs) for s in ("done", "failed")}
    updated = f"Updated {results['updated']}" if results["updated"] else "No run has ended yet"
    lines = [f"# Fine-tuning job {results['job_file']}", "",
             f"{updated}: {counts['done']} of {len(runs)} runs done, {counts['failed']} failed.",
             "", "| run | task | metric | value | best step | seed | status |", "|---|---|---|---:|---:|---:|---|"]
    for r in runs:
        lines.append(f"| {r['run']} | {r.get('task') or '-'} | {r.get('metric') or '-'} | {_fmt(r.get('value'))} | "
                     f"{_fmt(r.get('best_step'))} | {_fmt(r.get('seed'))} | {r['status']} |")
    if results["tasks"]:
        lines += ["", "Mean ± sd over seeds (sample sd; '-' for one run):", "",
                  "| runs | task | metric | n | mean ± sd |", "|---|---|---|---:|---|"]
        for t in results["tasks"]:
            spread = f" ± {t['sd']:.4f}" if t["sd"] is not None else ""
            lines.append(f"| {t['runs']} | {t['task']} | {t['metric']} | {t['n']} | {t['mean']:.4f}{spread} |")
    failed = [r for r in runs if r["status"] == "failed"]
    if failed:
        lines += ["", "Failures:", ""] + [f"- {r['run']}: {r['reason']} (log: {r['log']})" for r in failed]
    return "\n".join(lines) + "\n"


def write_results(job: Job, rows: list) -> dict:
    """``results.json`` and ``results.md`` in the output directory, each written atomically. ``updated``: when
    the last run ended (so the same runs give the same bytes, whoever writes the table)."""
    ended = [r["ended"] for r in rows if r.get("ended")]
    results = dict(job_file=job.path, output_dir=job.output_dir, updated=max(ended) if ended else None, runs=rows,
                   tasks=aggregate(rows))
    write_json_atomic(os.path.join(job.output_dir, "results.json"), results)
    write_text_atomic(os.path.join(job.output_dir, "results.md"), render_markdown(results))
    return results


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- the job ----------------------------------------------------------------------------------------------------

def select_runs(job: Job, only: Optional[list] = None) -> list:
    """The runs named in ``only`` (run or entry names; all runs if none); a JobError if it names none."""
    selected = [r for r in job.runs if not only or r.name in only or r.group in only]
    if only and not selected:
        raise JobError(f"--only={','.join(only)}: no run of {job.path} has that name "
                       f"(runs: {', '.join(r.name for r in job.runs)})")
    return selected


def run_job(job: Job, only: Optional[list] = None) -> dict:
    """Runs (or resumes) the job's runs in order; returns the results written."""
    selected = select_runs(job, only)
    io_utils.makedirs(job.output_dir)
    previous = {}
    results_path = os.path.join(job.output_dir, "results.json")
    if io_utils.exists(results_path):
        # Only the reasons of earlier failures come from it (a run's "done" is its DONE file): a damaged one is
        # rebuilt, not fatal.
        try:
            with io_utils.open(results_path, encoding="utf-8") as f:
                previous = {r["run"]: r for r in json.load(f).get("runs", [])}
        except (ValueError, AttributeError, KeyError, TypeError) as error:  # JSONDecodeError, bad UTF-8, layout
            print(f"[jobs] {results_path}: unreadable ({type(error).__name__}: {str(error)[:200]}); rewritten from "
                  "the runs' directories (earlier failure reasons are lost)", flush=True)
    rows = [run_row(run) for run in job.runs]
    for i, run in enumerate(job.runs):  # runs of an earlier version, whose directories hold no FAILED_FILE
        before = previous.get(run.name) or {}
        if rows[i]["status"] in ("pending", "started") and before.get("status") in ("failed", "interrupted"):
            rows[i].update(status=before["status"], reason=before.get("reason"))
    write_results(job, rows)

    forward = _Forward()
    handlers = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for i, run in enumerate(job.runs):
            if run not in selected:
                continue
            if rows[i]["status"] == "done":
                print(f"[jobs] {run.name}: done before, skipped", flush=True)
                continue
            problem = prepare_run(run)
            if problem:
                rows[i].update(status="failed", reason=problem)
                print(f"[jobs] {run.name}: FAILED: {problem}", flush=True)
                write_results(job, rows)
                continue
            resuming = io_utils.exists(os.path.join(run.model_dir, "checkpoint"))
            print(f"[jobs] {run.name}: {'resuming' if resuming else 'starting'} ({run.model_dir})", flush=True)
            rows[i] = {k: v for k, v in rows[i].items() if k not in ("reason", "ended")}
            rows[i].update(status="running", started=_now())
            write_results(job, rows)
            outcome = attempt(run.model_dir, job.script, forward)
            rows[i] = row = run_row(run)
            if outcome["status"] == "done":
                print(f"[jobs] {run.name}: done in {outcome['seconds']:.0f}s: {row.get('metric')} "
                      f"{_fmt(row.get('value'))}", flush=True)
            else:
                print(f"[jobs] {run.name}: {outcome['status'].upper()}: {outcome['reason']} (log: {row['log']})",
                      flush=True)
            write_results(job, rows)
            if forward.received:
                break
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    results = write_results(job, rows)
    print(f"[jobs] results: {os.path.join(job.output_dir, 'results.md')}", flush=True)
    if forward.received:
        raise KeyboardInterrupt(f"signal {forward.received}")
    return results
