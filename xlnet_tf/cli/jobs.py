"""Batch fine-tuning: the run_classifier.py runs of a YAML job file, here in sequence or on a cluster, resumable, with
one results table.

    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml            # run (or resume) every run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --dry_run  # the runs and their flags, nothing run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --only=rte,mrpc
    python -m xlnet_tf.cli.jobs submit JOB.yaml --scheduler=kubernetes|slurm|vertex ...  # files for a scheduler
    python -m xlnet_tf.cli.jobs gather JOB.yaml                            # the table from the runs' directories
    python -m xlnet_tf.cli.jobs run --script=run_classifier.py MODEL_DIR   # one run: what those files run

Arguments: the command and the job file (``run``: the run's directory, or several and ``--index_env``). The job
file's layout, resuming and the results table: ``xlnet_tf.batch.job_runner`` and docs/batch.md; clusters:
``xlnet_tf.batch.cluster``. Exit status: 0 when every selected run is done (``submit``: files written), 1 when one
failed or is not done (or on a usage error), 130 when the job was stopped by a signal.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Settings, setting

COMMANDS = ("finetune", "submit", "gather", "run")
SCHEDULERS = ("kubernetes", "slurm", "vertex")  # xlnet_tf.batch.cluster.SCHEDULERS (no import here: see run())
# Flags of one command only (the others' are errors); submit's per scheduler: xlnet_tf.batch.cluster.
COMMAND_FLAGS = {"finetune": ("only", "dry_run"), "gather": (), "run": ("script", "index_env")}
TASK = ("-m", "xlnet_tf.cli.jobs", "run")  # what a cluster task runs (python + these + --script=... + run dirs)


@dataclasses.dataclass
class JobsSettings(Settings):
    command: Optional[str] = setting(None, "finetune: run (or resume) the fine-tuning runs of a YAML job file here; "
                                     "submit: write them for a cluster scheduler; gather: rebuild the results table "
                                     "from the runs' directories; run: one run on a cluster (what submit's files "
                                     "run).", choices=COMMANDS, positional=True)
    job_file: Optional[str] = setting(None, "The YAML job file (run: the run's directory).", positional=True)
    more_dirs: tuple = setting((), "run: further run directories, one picked by --index_env.", positional="rest")
    only: str = setting("", "Comma-separated run or entry names (default: all).")
    dry_run: bool = setting(False, "List the runs and their flags; run nothing.")
    # submit
    scheduler: Optional[str] = setting(None, "submit: kubernetes (one Indexed Job), slurm (one array script) or "
                                       "vertex (one Vertex AI CustomJob spec per run).", choices=SCHEDULERS)
    out: str = setting("", "submit: directory of the files written (default: <job file name>_<scheduler>).")
    job_name: str = setting("", "submit: the cluster job's name (default: from the job file's name).")
    python: str = setting("", "submit: the Python interpreter of the tasks (default: python in a container; this "
                          "one for slurm).")
    gpus: int = setting(1, "submit: GPUs per run (0: none).")
    image: str = setting("", "submit (kubernetes, vertex): the container image, with xlnet_tf and its entry points.")
    workdir: str = setting("", "submit (kubernetes, slurm): the tasks' working directory, where the job's relative "
                           "paths and script resolve (default: the image's; slurm: this directory).")
    cpus: int = setting(0, "submit (kubernetes, slurm): CPUs per run (0: the scheduler's default).")
    memory: str = setting("", "submit (kubernetes, slurm): memory per run, e.g. 32Gi (kubernetes), 32G (slurm).")
    parallelism: int = setting(0, "submit (kubernetes, slurm): runs at a time at most (0: all).")
    namespace: str = setting("", "submit (kubernetes): the Job's namespace (default: kubectl's).")
    retries: int = setting(2, "submit (kubernetes): retries of each run's pod (backoffLimitPerIndex, Kubernetes "
                           ">= 1.29); a retry resumes from the run's last checkpoint.")
    service_account: str = setting("", "submit (kubernetes, vertex): the service account of the tasks (its "
                                   "credentials reach the gs:// paths).")
    partition: str = setting("", "submit (slurm): the partition (default: the cluster's).")
    account: str = setting("", "submit (slurm): the account to charge (default: yours).")
    time_limit: str = setting("", "submit (slurm): a run's time limit, e.g. 24:00:00 (default: the partition's).")
    region: str = setting("", "submit (vertex): the region, e.g. us-central1.")
    machine_type: str = setting("n1-standard-8", "submit (vertex): the machine type.")
    accelerator_type: str = setting("", "submit (vertex): the GPU type, e.g. NVIDIA_TESLA_V100, NVIDIA_L4.")
    # run
    script: str = setting("run_classifier.py", "run: the entry point (the job file's script).")
    index_env: str = setting("", "run: the environment variable holding this task's index into the run "
                             "directories (JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID).")

    def required(self) -> tuple:
        return ("command", "job_file") + (("scheduler",) if self.command == "submit" else ())

    def errors(self) -> list:
        errors = super().errors()
        if self.more_dirs and self.command != "run":
            errors.append(f"unexpected argument(s): {' '.join(self.more_dirs)}")
        if self.command == "submit" and self.scheduler:
            from xlnet_tf.batch.cluster import submit_problems

            errors += submit_problems(self)
        return errors

    def given_problems(self, given: set) -> list:
        """Flags given that the command (submit: the scheduler) does not take."""
        if self.command == "submit":
            from xlnet_tf.batch.cluster import SCHEDULER_FLAGS, SUBMIT_FLAGS

            takes = SUBMIT_FLAGS + SCHEDULER_FLAGS.get(self.scheduler, ())
            where = f"submit --scheduler={self.scheduler}"
        else:
            takes, where = COMMAND_FLAGS[self.command], self.command
        return [f"--{name} is not a flag of `jobs {where}`" for name in sorted(given)
                if name not in takes and name in {f.name for f in dataclasses.fields(self)}]

    @property
    def selected(self) -> list:
        return [name for name in self.only.split(",") if name.strip()]


def main(s: JobsSettings, given: set = frozenset()) -> int:
    """The command; returns the exit status."""
    from xlnet_tf.batch import job_runner

    problems = s.given_problems(set(given))
    if problems:
        raise cli.SettingsError("; ".join(problems))
    if s.command == "run":
        from xlnet_tf.batch import cluster

        return cluster.run_task([s.job_file, *s.more_dirs], s.script, s.index_env)
    job = job_runner.load_job(s.job_file)
    if s.command in ("finetune", "submit"):
        check_flags(job)
        check_metrics(job)
    only = s.selected
    if s.command == "submit":
        return submit(s, job)
    if s.command == "gather":
        results = job_runner.gather(job)
        print(job_runner.render_markdown(results), end="", flush=True)
        missing = [f"{r['run']} ({r['status']}{': ' + r['reason'] if r.get('reason') else ''})"
                   for r in results["runs"] if r["status"] != "done"]
        if missing:
            print(f"[jobs] {len(missing)} of {len(results['runs'])} runs not done: {'; '.join(missing)}", flush=True)
        return 1 if missing else 0
    if s.dry_run:
        for run in job_runner.select_runs(job, only):
            print(f"# {run.name}\n{job_runner.dump_flags(run.flags)}")
        return 0
    try:
        results = job_runner.run_job(job, only)
    except KeyboardInterrupt:
        return 130
    ran = [r for r in results["runs"] if not only or r["run"] in only or r["group"] in only]
    return 1 if any(r["status"] == "failed" for r in ran) else 0


def check_flags(job) -> None:
    """Every flag of the job file's defaults and run entries must be one of its script's, with a value that its
    flag parses, as each run's ``--config_file`` will be read, and a number in its range (``Bounds``): a typo
    found now, not in each run's log (or on a cluster, after the runs waited for their GPUs). Paths are not
    checked: a cluster's tasks may see other files."""
    import importlib
    import os

    from absl import flags

    from xlnet_tf.batch.job_runner import SCRIPT_SETTINGS, JobError
    from xlnet_tf.training.settings import out_of_bounds

    module, name = SCRIPT_SETTINGS[os.path.basename(job.script)].split(":")
    settings_cls = getattr(importlib.import_module(module), name)
    for where, values in job.sources:
        flag_values = flags.FlagValues()
        cli.define_flags(settings_cls, flag_values)
        try:
            cli.apply_values(flag_values, values, f"{job.path}: {where}", settings_cls)
        except flags.ValidationError as e:
            raise JobError(f"{e} ({os.path.basename(job.script)}'s flags)") from None
        for key in values:
            problem = out_of_bounds(settings_cls, key, flag_values[key].value)
            if problem:
                raise JobError(f"{job.path}: {where}: {key}={flag_values[key].value} {problem} "
                               f"({os.path.basename(job.script)}'s flags)")


def check_metrics(job) -> None:
    """Each run entry's ``metric:`` must be one its task's evaluation reports (``TaskFamily.metric_names``): a
    misspelt one trained every run and showed '-' in the table. Tasks of a family of a ``--task_module`` (not
    loaded here) and families that do not say their metrics are not checked."""
    import importlib
    import os

    from xlnet_tf import tasks
    from xlnet_tf.batch.job_runner import SCRIPT_SETTINGS, JobError

    module, name = SCRIPT_SETTINGS[os.path.basename(job.script)].split(":")
    settings_cls = getattr(importlib.import_module(module), name)
    default_task = {f.name: f.default for f in dataclasses.fields(settings_cls)}.get("task_name")
    problems = {}  # run entry -> what is wrong (its seeds' runs share it)
    for run in job.runs:
        task_name = run.flags.get("task_name", default_task)
        if run.metric is None or not isinstance(task_name, str):
            continue
        try:
            family = tasks.for_task(task_name)
        except ValueError:  # a task of a --task_module, or a typo the run reports
            continue
        names = family.metric_names(family.canonical_task(task_name))
        if names is None or any(run.metric == n or (n.endswith("/") and run.metric.startswith(n)) for n in names):
            continue
        shown = ", ".join(n + "<type>" if n.endswith("/") else n for n in names)
        problems[run.group] = f"run {run.group!r}: metric {run.metric!r}: task {task_name} reports {shown}"
    if problems:
        raise JobError(f"{job.path}: {'; '.join(problems.values())}")


def submit(s: JobsSettings, job) -> int:
    from xlnet_tf import io_utils
    from xlnet_tf.batch import cluster

    files, runs, done = cluster.submit(s, job, TASK)
    if done:
        print(f"[jobs] done before, not submitted: {', '.join(run.name for run in done)}", flush=True)
    if not runs:
        print("[jobs] every run is done: nothing to submit", flush=True)
        return 0
    print(f"[jobs] {len(runs)} run(s) for {s.scheduler}: {', '.join(run.name for run in runs)}", flush=True)
    if s.scheduler != "slurm" and not io_utils.is_uri(job.output_dir):
        print(f"[jobs] note: output_dir {job.output_dir} is not a gs:// path: the tasks must see it at that path "
              "(a mounted volume), or their results stay in their containers", flush=True)
    print("\n".join(f"[jobs] wrote {path}" for path in files), flush=True)
    then = {"kubernetes": f"kubectl apply -f {files[0]}", "slurm": f"sbatch {files[0]}",
            "vertex": f"sh {files[-1]}"}[s.scheduler]
    print(f"[jobs] submit with: {then}\n[jobs] then: python -m xlnet_tf.cli.jobs gather {job.path}", flush=True)
    return 0


if __name__ == "__main__":
    cli.run(JobsSettings, main, with_given=True, tensorflow=False)
