"""Batch fine-tuning (python -m xlnet_tf.cli.jobs finetune): the job file, the results table, and a job of three runs
(one failing on purpose) that is killed in its first run and resumes it."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from background import background
from classifier_helpers import FIXTURES, MICRO_CONFIG, REPO, SPIECE
from xlnet_tf.batch import job_runner as jobs
from xlnet_tf.cli import jobs as cli_jobs


def write_job(tmp_path, runs, script=None, **defaults) -> str:
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO_CONFIG))
    spec = dict(output_dir=str(tmp_path / "out"), runs=runs, **({"script": script} if script else {}), defaults=dict(
        task_name="sst-2", data_dir=os.path.join(FIXTURES, "glue", "SST-2"), model_config_path=str(config),
        spiece_model_file=SPIECE, do_train=True, do_eval=True, max_seq_length=32, train_batch_size=4,
        eval_batch_size=6, learning_rate=1e-3, dropout=0.0, dropatt=0.0, **defaults))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_job_file_defaults_overrides_and_seeds(tmp_path):
    path = write_job(tmp_path, [{"name": "a", "seeds": [1, 2], "learning_rate": 5e-4},
                                {"name": "b", "task_name": "rte", "metric": "loss"}], train_steps=3)
    job = jobs.load_job(path)
    assert [(r.name, r.group, r.seed, r.metric) for r in job.runs] == [
        ("a.seed1", "a", 1, None), ("a.seed2", "a", 2, None), ("b", "b", None, "loss")]
    assert job.runs[0].flags["learning_rate"] == 5e-4 and job.runs[2].flags["learning_rate"] == 1e-3
    assert job.runs[1].flags["seed"] == 2 and "seed" not in job.runs[2].flags
    assert job.runs[2].flags["task_name"] == "rte" and job.runs[2].flags["train_steps"] == 3
    assert job.runs[1].model_dir == str(tmp_path / "out" / "a.seed2")
    for runs, message in [([{"name": "a"}, {"name": "a"}], "run name 'a' is used twice"),
                          ([{"name": "a b"}], r"runs\[0\] needs a name of letters"),
                          ([{"name": ".."}], r"runs\[0\] needs a name .*not only dots"),
                          ([{"name": "."}], r"runs\[0\] needs a name .*not only dots"),
                          ([{"name": "a", "model_dir": "x"}], r"runs\[0\] sets 'model_dir'; the job sets it"),
                          ([{"name": "a", "seeds": [1, "2"]}], "seeds must be a non-empty list of integers"),
                          ([{"name": "a", "metric": 3}], r"runs\[0\] \(a\): metric must be a metric's name")]:
        with pytest.raises(jobs.JobError, match=message):
            jobs.load_job(write_job(tmp_path, runs))
    (tmp_path / "typo.yaml").write_text("output_dir: x\nrun: []\n")
    with pytest.raises(jobs.JobError, match=r"typo.yaml: unknown key\(s\) 'run'"):
        jobs.load_job(str(tmp_path / "typo.yaml"))
    # The flags, as each run's --config_file will read them: checked before a run starts or is submitted.
    cli_jobs.check_flags(jobs.load_job(write_job(tmp_path, [{"name": "a", "seed": 3, "metric": "loss"}])))
    for runs, defaults, message in [
            ([{"name": "a"}, {"name": "b", "learning_rte": 1}], {},
             r"runs\[1\] \(b\): unknown flag 'learning_rte' \(run_classifier.py's flags\)"),
            ([{"name": "a", "train_steps": "many"}], {}, r"runs\[0\] \(a\): bad value for 'train_steps'"),
            ([{"name": "a"}], {"dropuot": 0.1}, "defaults: unknown flag 'dropuot'"),
            ([{"name": "a"}, {"name": "b", "learning_rate": -3e-4}], {},  # would have failed once the others ran
             r"runs\[1\] \(b\): learning_rate=-0.0003 must be positive \(run_classifier.py's flags\)"),
            ([{"name": "a"}], {"min_lr_ratio": 1.5}, r"defaults: min_lr_ratio=1.5 must be in \[0, 1\]")]:
        with pytest.raises(jobs.JobError, match=message):
            cli_jobs.check_flags(jobs.load_job(write_job(tmp_path, runs, **defaults)))
    # YAML keeps the last of a key given twice: the first runs (or flag value) would vanish without a word
    (tmp_path / "twice.yaml").write_text("output_dir: x\nruns:\n  - name: a\nruns:\n  - name: b\n")
    with pytest.raises(jobs.JobError, match=r"twice.yaml: not valid YAML \(key 'runs' given twice .*line 4"):
        jobs.load_job(str(tmp_path / "twice.yaml"))


def test_a_metric_or_a_value_no_run_could_use_is_refused_before_any_run(tmp_path):
    """A job file's values of another YAML type, nulls for settings that cannot be unset and a metric its task does
    not report are errors naming the file, the run entry and the key, before a run starts (the types were raw
    tracebacks, the nulls failed each run after its data was encoded, a misspelt metric trained every run and
    showed '-' in the table, exit 0)."""
    def check(runs, **defaults):
        job = jobs.load_job(write_job(tmp_path, runs, **defaults))
        cli_jobs.check_flags(job)
        cli_jobs.check_metrics(job)

    check([{"name": "a", "train_steps": 10.0, "metric": "accuracy"}, {"name": "b", "task_name": "mrpc",
                                                                     "metric": "f1"},
           {"name": "c", "task_name": "sts-b", "metric": "spearman"}, {"name": "d", "task_name": "race",
                                                                       "metric": "accuracy_high"}])
    for runs, defaults, message in [
            ([{"name": "a", "train_steps": 10.5}], {}, r"runs\[0\] \(a\): bad value for 'train_steps': 10.5 "
                                                       r"\(expected an integer\)"),
            ([{"name": "a", "learning_rate": [1, 2]}], {}, r"bad value for 'learning_rate': \[1, 2\] \(expected a "
                                                           r"number\)"),
            ([{"name": "a"}], {"predict_dir": 5}, r"defaults: bad value for 'predict_dir': 5 is a number"),
            ([{"name": "a", "max_seq_length": None}], {}, r"runs\[0\] \(a\): bad value for 'max_seq_length': null "
                                                          r"\(expected an integer: this setting cannot be unset\)"),
            ([{"name": "a", "seeds": [1, 2], "metric": "acc"}, {"name": "b", "task_name": "mrpc", "metric": "F1"}],
             {}, r"job.yaml: run 'a': metric 'acc': task sst-2 reports accuracy, loss; run 'b': metric 'F1': task "
                 r"mrpc reports accuracy, f1, loss$")]:
        with pytest.raises(jobs.JobError, match=message):
            check(runs, **defaults)
    # run_tagger.py's metrics: the entity F1 of each type is f1/<type>
    tagging = dict(task_name="ner")
    job = jobs.load_job(write_job(tmp_path, [dict(tagging, name="a", metric="f1/PER"), dict(tagging, name="b",
                                                                                           metric="f1")],
                                  script="run_tagger.py"))
    cli_jobs.check_metrics(job)
    job = jobs.load_job(write_job(tmp_path, [dict(tagging, name="a", metric="F1")], script="run_tagger.py"))
    with pytest.raises(jobs.JobError, match=r"metric 'F1': task ner reports accuracy, precision, recall, f1, "
                                            r"f1/<type>, num_words, loss"):
        cli_jobs.check_metrics(job)


def test_results_table_and_failure_reasons(tmp_path):
    rows = [dict(run=f"rte.seed{i}", group="rte", task="rte", metric="accuracy", value=v, best_step=100, seed=i,
                 status="done") for i, v in enumerate([0.70, 0.72, 0.74])]
    rows.append(dict(run="mrpc", group="mrpc", task="mrpc", seed=None, status="failed", reason="--data_dir=x: not "
                     "a directory", log="out/mrpc/job.log"))
    (task,) = jobs.aggregate(rows)
    assert task["n"] == 3 and task["mean"] == pytest.approx(0.72) and task["sd"] == pytest.approx(0.02)
    job = jobs.Job("job.yaml", str(tmp_path), "run_classifier.py", [])
    jobs.write_results(job, rows)
    md = (tmp_path / "results.md").read_text()
    assert "| rte.seed1 | rte | accuracy | 0.7200 | 100 | 1 | done |" in md
    assert "| rte | rte | accuracy | 3 | 0.7200 ± 0.0200 |" in md
    assert "- mrpc: --data_dir=x: not a directory (log: out/mrpc/job.log)" in md
    assert json.loads((tmp_path / "results.json").read_text())["tasks"][0]["values"] == [0.70, 0.72, 0.74]
    assert sorted(os.listdir(tmp_path)) == ["results.json", "results.md"]  # written via temporary files

    usage = "I1124 ...\nrun_classifier.py: error: --data_dir=/no: not a directory\nSee `python run_classifier.py"
    assert jobs.failure_reason(usage, 1) == "--data_dir=/no: not a directory"
    crash = "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: x.tsv:3: label '7' is bad\n"
    assert jobs.failure_reason(crash, 1) == "ValueError: x.tsv:3: label '7' is bad"
    assert jobs.failure_reason("step 10\n", -9) == "killed by signal SIGKILL (out of memory?)"


def test_damaged_result_files_are_reported_not_fatal(tmp_path, capsys):
    """A damaged results.json is rewritten from the runs' directories (a run's "done" is its DONE file); a damaged
    eval_results file becomes a note naming it in the run's row."""
    job = jobs.load_job(write_job(tmp_path, [{"name": "a"}], train_steps=3))
    run = job.runs[0]
    os.makedirs(run.model_dir)
    (tmp_path / "out" / "a" / jobs.DONE_FILE).write_text("{}")
    (tmp_path / "out" / "a" / "eval_results.dev.json").write_text('{"metrics": {"accu')
    (tmp_path / "out" / "results.json").write_text("{not json")
    results = jobs.run_job(job)
    (row,) = results["runs"]
    assert row["status"] == "done" and "eval_results.dev.json: unreadable (JSONDecodeError" in row["note"]
    assert "results.json: unreadable (JSONDecodeError" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]["run"] == "a"


def test_a_damaged_flags_file_fails_its_run_with_a_line_naming_it(tmp_path):
    """A run's job_flags.yaml (the flags it started with) that is not YAML, or not a mapping, fails that run with a
    reason naming the file; the flags file is left for the user to look at."""
    job = jobs.load_job(write_job(tmp_path, [{"name": "a"}], train_steps=3))
    run = job.runs[0]
    os.makedirs(run.model_dir)
    flags_file = tmp_path / "out" / "a" / jobs.FLAGS_FILE
    for damaged in ("task_name: [sst-2\n", "- a list\n"):
        flags_file.write_text(damaged)
        reason = jobs.prepare_run(run)
        assert reason.startswith(f"{flags_file}: damaged, ") and "delete it" in reason, reason
        assert flags_file.read_text() == damaged
    # The job's output_dir is checked when the job file is read.
    (tmp_path / "a_file").write_text("x")
    job_file = tmp_path / "blocked.yaml"
    job_file.write_text(yaml.safe_dump(dict(output_dir=str(tmp_path / "a_file" / "runs"), runs=[{"name": "a"}])))
    with pytest.raises(jobs.JobError, match=r"blocked.yaml: output_dir=.*a_file/runs: .*a_file is a file, not a "
                                            r"directory"):
        jobs.load_job(str(job_file))


def test_command_line_arguments_and_flags_in_any_order(tmp_path):
    """``finetune JOB.yaml`` are arguments after absl's flags (flags may come before, between or after them);
    --dry_run lists the runs --only selects, and runs nothing."""
    path = write_job(tmp_path, [{"name": "a", "seeds": [1, 2]}, {"name": "b"}], train_steps=3)
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.jobs", "--only=a", "finetune", path, "--dry_run"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("# ")] == ["# a.seed1", "# a.seed2"]
    assert "learning_rate: 0.001" in done.stdout and not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.jobs", "finetune", path, "--dry_run", "--only=c"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("xlnet_tf.cli.jobs: error: --only=c: no run of ")


def _job(path):
    return subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli.jobs", "finetune", path], cwd=REPO,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


# The job's script in the test below: run_classifier.py, except that the first time it runs it SIGKILLs its process
# group, the job and itself, as a scheduler ending the job would, at step 3 (steps 1 and 2 are checkpointed).
_KILLED_ONCE = """
import runpy, sys
sys.argv = [{killed_at!r}, "--group", "--once=" + {marker!r}, "3", {script!r}, *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_job_runs_past_a_failure_and_resumes_an_interrupted_run(tmp_path):
    """Three runs, the second with a bad data path. The job is SIGKILLed (with its run) in the first run, after its
    second checkpoint. The third run is trained meanwhile as on a cluster: the task of a generated Slurm array script
    (bash, a stand-in srun on PATH). The rerun skips it, resumes the first run from its checkpoint and records
    the failure with its reason; a third invocation skips the two finished runs; `jobs gather` then writes the
    local runner's table, byte for byte."""
    script = tmp_path / "killed_once" / "run_classifier.py"
    script.parent.mkdir()
    script.write_text(_KILLED_ONCE.format(killed_at=os.path.join(REPO, "tests", "killed_at.py"),
                                          marker=str(tmp_path / "killed_once" / "killed"),
                                          script=os.path.join(REPO, "run_classifier.py")))
    path = write_job(tmp_path, [
        {"name": "first", "train_steps": 12, "save_steps": 1, "iterations": 1},
        {"name": "broken", "data_dir": str(tmp_path / "no_such_dir"), "train_steps": 2},
        {"name": "third", "seed": 7, "train_steps": 2}], script=str(script))
    out = tmp_path / "out"
    proc = _job(path)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == -signal.SIGKILL, log[-3000:]
    assert sorted(n for n in os.listdir(out / "first") if n.endswith(".index")) == ["model-1.index", "model-2.index"]
    assert not (out / "first" / jobs.DONE_FILE).exists()
    assert json.loads((out / "results.json").read_text())["runs"][0]["status"] == "running"

    slurm = tmp_path / "slurm"
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.jobs", "submit", path, "--scheduler=slurm",
                           "--only=third", f"--out={slurm}", f"--workdir={REPO}", "--gpus=0"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"[jobs] submit with: sbatch {slurm / 'job.sbatch'}" in done.stdout, done.stderr
    assert "#SBATCH --array=0-0\n" in (slurm / "job.sbatch").read_text()
    (slurm / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    (slurm / "srun").chmod(0o755)
    task = subprocess.run(["bash", str(slurm / "job.sbatch")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SLURM_ARRAY_TASK_ID="0",
                                                PATH=f"{slurm}:{os.environ['PATH']}"))
    assert task.returncode == 0 and "trained to step 2" in task.stdout, task.stdout[-3000:] + task.stderr
    assert (out / "third" / jobs.DONE_FILE).exists() and "job attempt" in (out / "third" / jobs.LOG_FILE).read_text()

    proc = _job(path)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, log  # a run failed
    assert "[jobs] first: resuming" in log and "[jobs] third: done before, skipped" in log
    first_log = (out / "first" / jobs.LOG_FILE).read_text()
    assert first_log.count("job attempt") == 2
    assert f"resumed from {out / 'first' / 'model-2'} at step 2" in first_log.split("job attempt")[-1]
    results = json.loads((out / "results.json").read_text())
    by_run = {r["run"]: r for r in results["runs"]}
    assert [r["status"] for r in results["runs"]] == ["done", "failed", "done"]
    assert by_run["broken"]["reason"] == f"--data_dir={tmp_path / 'no_such_dir'}: not a directory"
    assert by_run["first"]["best_step"] == 12 and by_run["third"]["best_step"] == 2
    assert by_run["third"]["seed"] == 7 and by_run["first"]["metric"] == "accuracy"
    assert 0 <= by_run["first"]["value"] <= 1
    assert "| broken | sst-2 | - | - | - | - | failed |" in (out / "results.md").read_text()
    assert sorted(os.listdir(out)) == ["broken", "first", "results.json", "results.md", "third"]

    proc = _job(path)
    log = proc.communicate(timeout=120)[0]
    assert "[jobs] first: done before, skipped" in log and "[jobs] third: done before, skipped" in log
    assert "[jobs] broken: FAILED: --data_dir=" in log
    local = {name: (out / name).read_bytes() for name in ("results.md", "results.json")}
    gathered = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.jobs", "gather", path], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    assert gathered.returncode == 1 and "[jobs] 1 of 3 runs not done: broken (failed: --data_dir=" in gathered.stdout
    assert {name: (out / name).read_bytes() for name in local} == local
