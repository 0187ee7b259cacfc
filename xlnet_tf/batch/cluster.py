"""Fine-tuning runs on a cluster: the runs of a job file handed to Kubernetes, Slurm or Vertex AI.

    python -m xlnet_tf.cli.jobs submit JOB.yaml --scheduler=kubernetes --image=IMAGE  # <out>/job.yaml: kubectl apply -f
    python -m xlnet_tf.cli.jobs submit JOB.yaml --scheduler=slurm --partition=gpu       # <out>/job.sbatch: sbatch
    python -m xlnet_tf.cli.jobs submit JOB.yaml --scheduler=vertex --image=I --region=R --accelerator_type=T
    python -m xlnet_tf.cli.jobs gather JOB.yaml    # the results table from the runs' directories, wherever they ran

``submit`` writes files and submits nothing. It prepares each run that is not done as the local runner does (its
``job_flags.yaml`` in its ``model_dir``; a run whose flags changed since it started is refused) and writes one
Kubernetes Indexed Job, one Slurm array script or one Vertex AI CustomJob spec per run. Every task runs
``python -m xlnet_tf.cli.jobs run --script=<script> <model_dir>``: the local runner's attempt at that run (the same
``python run_classifier.py --config_file=<model_dir>/job_flags.yaml``, its output appended to ``job.log`` and
echoed, ``job_done.json`` or ``job_failed.json`` at its end), so ``gather`` and the local runner read the same
directories. A task whose run is done exits 0 at once: reapplying a manifest skips done runs.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from typing import Optional

import yaml

from xlnet_tf import io_utils
from xlnet_tf.batch import job_runner
from xlnet_tf.batch.job_runner import DONE_FILE, FLAGS_FILE, JobError

SCHEDULERS = ("kubernetes", "slurm", "vertex")
# The flags of `submit` for every scheduler, then each scheduler's own: another scheduler's flag is an error.
SUBMIT_FLAGS = ("scheduler", "out", "only", "job_name", "python", "gpus")
SCHEDULER_FLAGS = {
    "kubernetes": ("image", "workdir", "namespace", "parallelism", "retries", "service_account", "cpus", "memory"),
    "slurm": ("workdir", "parallelism", "partition", "account", "time_limit", "cpus", "memory"),
    "vertex": ("image", "region", "machine_type", "accelerator_type", "service_account"),
}
INDEX_ENV = {"kubernetes": "JOB_COMPLETION_INDEX", "slurm": "SLURM_ARRAY_TASK_ID"}


def submit_problems(s) -> list:
    """What is missing for ``s.scheduler`` (settings of ``xlnet_tf.cli.jobs``), naming the flags."""
    problems = []
    if s.scheduler in ("kubernetes", "vertex") and not s.image:
        problems.append(f"--image is required with --scheduler={s.scheduler} (the container image with xlnet_tf "
                        "and its entry points)")
    if s.scheduler == "vertex":
        if not s.region:
            problems.append("--region is required with --scheduler=vertex (e.g. us-central1)")
        if s.gpus and not s.accelerator_type:
            problems.append(f"--accelerator_type is required with --scheduler=vertex and --gpus={s.gpus} (e.g. "
                            "NVIDIA_TESLA_V100, NVIDIA_L4; or --gpus=0)")
    if s.scheduler == "kubernetes" and s.job_name and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?",
                                                                        s.job_name):
        problems.append(f"--job_name={s.job_name}: a Kubernetes Job name is lower-case letters, digits and '-', "
                        "at most 52 characters, starting and ending with a letter or digit")
    if s.out and io_utils.is_uri(s.out):
        problems.append(f"--out={s.out}: a local directory (kubectl, sbatch and gcloud read the files from here)")
    for name in ("gpus", "cpus", "parallelism", "retries"):
        if getattr(s, name) < 0:
            problems.append(f"--{name}={getattr(s, name)}: must be >= 0")
    return problems


def runs_to_submit(job: job_runner.Job, only: Optional[list] = None) -> tuple:
    """(the runs to submit, prepared: their flags files written; the runs done before). A run whose flags changed
    since it started is refused with the reason, before anything is written."""
    selected = job_runner.select_runs(job, only)
    refused = [(run.name, job_runner.flags_problem(run)) for run in selected]
    refused = [f"{name}: {problem}" for name, problem in refused if problem]
    if refused:
        raise JobError(f"{job.path}: not submitted: {'; '.join(refused)}")
    done = [run for run in selected if io_utils.exists(os.path.join(run.model_dir, DONE_FILE))]
    todo = [run for run in selected if run not in done]
    for run in todo:
        job_runner.prepare_run(run)
    return todo, done


def task_command(s, job: job_runner.Job, task: tuple, model_dirs: list, index_env: Optional[str] = None) -> list:
    """``task``: the arguments of Python that run one run (the command-line tool's, which hands them down)."""
    python = s.python or (sys.executable if s.scheduler == "slurm" else "python")
    return ([python, *task, f"--script={job.script}"]
            + ([f"--index_env={index_env}"] if index_env else []) + list(model_dirs))


def _name(s, job: job_runner.Job) -> str:
    if s.job_name:
        return s.job_name
    stem = os.path.splitext(os.path.basename(job.path))[0]
    if s.scheduler == "kubernetes":
        return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", stem.lower())).strip("-")[:52].strip("-") or "finetune"
    return stem


def _header(job: job_runner.Job, runs: list, done: list, then: str) -> str:
    lines = [f"Generated by `python -m xlnet_tf.cli.jobs submit {job.path}`: {len(runs)} run(s) of {job.path}.",
             then, f"Afterwards: python -m xlnet_tf.cli.jobs gather {job.path}", "Index: run (model_dir)"]
    lines += [f"  {i}: {run.name} ({run.model_dir})" for i, run in enumerate(runs)]
    if done:
        lines.append(f"Done before, not submitted: {', '.join(run.name for run in done)}")
    return "".join(f"# {line}\n" for line in lines)


def kubernetes_manifest(s, job: job_runner.Job, task: tuple, runs: list, done: list, path: str) -> str:
    """One Indexed Job: completion index i runs runs[i]."""
    name = _name(s, job)
    resources: dict = {}
    if s.gpus:
        resources.setdefault("limits", {})["nvidia.com/gpu"] = s.gpus
    if s.cpus:
        resources.setdefault("requests", {})["cpu"] = s.cpus
    if s.memory:
        resources.setdefault("requests", {})["memory"] = s.memory
        resources.setdefault("limits", {})["memory"] = s.memory
    container = dict(name="finetune", image=s.image,
                     command=task_command(s, job, task, [r.model_dir for r in runs], INDEX_ENV["kubernetes"]))
    if s.workdir:
        container["workingDir"] = s.workdir
    if resources:
        container["resources"] = resources
    pod = dict(restartPolicy="Never", containers=[container])
    if s.service_account:
        pod["serviceAccountName"] = s.service_account
    labels = {"app.kubernetes.io/name": "xlnet-tf-finetune", "xlnet-tf/job": name}
    metadata = dict(name=name, labels=labels)
    if s.namespace:
        metadata["namespace"] = s.namespace
    # A pod evicted or preempted (a drained node, a reclaimed spot VM) gets SIGTERM: its run checkpoints and stops,
    # and the pod that replaces it resumes; such a disruption is not one of the run's --retries.
    disrupted = dict(rules=[dict(action="Ignore", onPodConditions=[dict(type="DisruptionTarget")])])
    manifest = dict(apiVersion="batch/v1", kind="Job", metadata=metadata, spec=dict(
        completionMode="Indexed", completions=len(runs), parallelism=min(s.parallelism or len(runs), len(runs)),
        backoffLimitPerIndex=s.retries, podFailurePolicy=disrupted,
        template=dict(metadata=dict(labels=dict(labels)), spec=pod)))
    return (_header(job, runs, done, f"Submit: kubectl apply -f {path}")
            + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=1000))


def slurm_script(s, job: job_runner.Job, task: tuple, runs: list, done: list, path: str, out: str) -> str:
    """One array script: task i runs runs[i] through srun."""
    q = shlex.quote
    options = [f"--job-name={_name(s, job)}",
               f"--array=0-{len(runs) - 1}" + (f"%{s.parallelism}" if s.parallelism else ""),
               f"--output={os.path.join(os.path.abspath(out), '%x-%A_%a.out')}", "--ntasks=1"]
    options += [f"--partition={s.partition}"] * bool(s.partition) + [f"--account={s.account}"] * bool(s.account)
    options += [f"--gres=gpu:{s.gpus}"] * bool(s.gpus) + [f"--cpus-per-task={s.cpus}"] * bool(s.cpus)
    options += [f"--mem={s.memory}"] * bool(s.memory) + [f"--time={s.time_limit}"] * bool(s.time_limit)
    command = " ".join(q(part) for part in task_command(s, job, task, []))
    return ("#!/bin/bash\n" + "".join(f"#SBATCH {option}\n" for option in options)
            + _header(job, runs, done, f"Submit: sbatch {path}") + "set -euo pipefail\n"
            + f"cd {q(s.workdir or os.getcwd())}\n" + "RUNS=(\n"
            + "".join(f"  {q(run.model_dir)}  # {i}: {run.name}\n" for i, run in enumerate(runs)) + ")\n"
            + f'exec srun {command} "${{RUNS[$SLURM_ARRAY_TASK_ID]}}"\n')


def vertex_spec(s, job: job_runner.Job, task: tuple, run: job_runner.Run) -> dict:
    """A CustomJobSpec, as ``gcloud ai custom-jobs create --config`` takes it."""
    machine = dict(machineType=s.machine_type)
    if s.gpus:
        machine.update(acceleratorType=s.accelerator_type, acceleratorCount=s.gpus)
    spec = dict(workerPoolSpecs=[dict(machineSpec=machine, replicaCount=1, containerSpec=dict(
        imageUri=s.image, command=task_command(s, job, task, [run.model_dir])))])
    if s.service_account:
        spec["serviceAccount"] = s.service_account
    return spec


def submit(s, job: job_runner.Job, task: tuple) -> tuple:
    """Writes the scheduler's files for the runs of ``job`` that are not done, each task running Python with the
    arguments ``task`` + ``--script=...`` + its run directory; returns (files, runs, done)."""
    runs, done = runs_to_submit(job, s.selected)
    if not runs:
        return [], runs, done
    out = s.out or f"{os.path.splitext(os.path.basename(job.path))[0]}_{s.scheduler}"
    os.makedirs(out, exist_ok=True)
    if s.scheduler == "kubernetes":
        path = os.path.join(out, "job.yaml")
        files = {path: kubernetes_manifest(s, job, task, runs, done, path)}
    elif s.scheduler == "slurm":
        path = os.path.join(out, "job.sbatch")
        files = {path: slurm_script(s, job, task, runs, done, path, out)}
    else:
        files = {}
        commands = []
        for run in runs:
            path = os.path.join(out, f"{run.name}.yaml")
            command = (f"gcloud ai custom-jobs create --region={shlex.quote(s.region)} --display-name="
                       f"{shlex.quote(_name(s, job) + '.' + run.name)} --config={shlex.quote(path)}")
            files[path] = f"# Submit: {command}\n" + yaml.safe_dump(vertex_spec(s, job, task, run), sort_keys=False,
                                                                    width=1000)
            commands.append(command + "\n")
        path = os.path.join(out, "submit.sh")
        files[path] = ("#!/bin/sh\n" + _header(job, runs, done, f"Submit: sh {path}") + "set -e\n"
                       + "".join(commands))
    for path, text in files.items():
        io_utils.write_text_atomic(path, text)
    return list(files), runs, done


# --- a task on the cluster ------------------------------------------------------------------------------------------

def pick(model_dirs: list, index_env: str) -> str:
    """The run directory of this task: the only one given, or the one at the index in ``$<index_env>``."""
    if len(model_dirs) == 1 and not index_env:
        return model_dirs[0]
    if not index_env:
        raise JobError(f"{len(model_dirs)} run directories and no --index_env: name the environment variable "
                       "that holds this task's index (JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID)")
    value = os.environ.get(index_env, "")
    if not value.isdigit() or int(value) >= len(model_dirs):
        raise JobError(f"--index_env={index_env}: ${index_env}={value!r} is not an index of the "
                       f"{len(model_dirs)} run directories (0-{len(model_dirs) - 1})")
    return model_dirs[int(value)]


def run_task(model_dirs: list, script: str, index_env: str = "") -> int:
    """One run on a cluster (what the generated files run): done before → exit 0 at once; else the local runner's
    attempt, its output echoed. Exit status 0 done, 1 failed, 128 + the signal's number stopped by a signal (it
    checkpointed: 143 for a preemption's SIGTERM, 130 for Ctrl-C)."""
    model_dir = pick(model_dirs, index_env)
    if not io_utils.exists(os.path.join(model_dir, FLAGS_FILE)):
        raise JobError(f"{model_dir}: no {FLAGS_FILE} (`python -m xlnet_tf.cli.jobs submit` writes it)")
    if io_utils.exists(os.path.join(model_dir, DONE_FILE)):
        print(f"[jobs] {model_dir}: done before, skipped", flush=True)
        return 0
    print(f"[jobs] {model_dir}: starting", flush=True)
    forward = job_runner._Forward()
    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        outcome = job_runner.attempt(model_dir, script, forward, echo=True)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    print(f"[jobs] {model_dir}: {outcome['status']}" + (f": {outcome['reason']}" if outcome["reason"] else "")
          + f" ({outcome['seconds']:.0f}s)", flush=True)
    return {"done": 0, "failed": 1}.get(outcome["status"], 128 + (forward.received or signal.SIGINT))
