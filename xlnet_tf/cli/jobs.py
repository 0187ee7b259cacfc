"""Batch fine-tuning: the run_classifier.py runs of a YAML job file, in sequence, resumable, with one results table.

    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml            # run (or resume) every run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --dry_run  # the runs and their flags, nothing run
    python -m xlnet_tf.cli.jobs finetune configs/glue_jobs.yaml --only=rte,mrpc

Arguments: the command (``finetune``) and the job file. The job file's layout, resuming and the results table:
``xlnet_tf.batch.job_runner`` and docs/batch.md. Exit status: 0 when every selected run is done, 1 when one
failed (or on a usage error), 130 when the job was stopped by a signal.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Settings, setting

COMMANDS = ("finetune",)


@dataclasses.dataclass
class JobsSettings(Settings):
    command: Optional[str] = setting(None, "finetune: run (or resume) the fine-tuning runs of a YAML job file.",
                                     choices=COMMANDS, positional=True)
    job_file: Optional[str] = setting(None, "The YAML job file.", positional=True)
    only: str = setting("", "Comma-separated run or entry names (default: all).")
    dry_run: bool = setting(False, "List the runs and their flags; run nothing.")

    def required(self) -> tuple:
        return ("command", "job_file")

    @property
    def selected(self) -> list:
        return [name for name in self.only.split(",") if name.strip()]


def main(s: JobsSettings) -> int:
    """The command; returns the exit status."""
    from xlnet_tf.batch import job_runner

    job = job_runner.load_job(s.job_file)
    only = s.selected
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


if __name__ == "__main__":
    cli.run(JobsSettings, main)
