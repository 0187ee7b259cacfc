"""Fine-tuning runs on a cluster (python -m xlnet_tf.cli.jobs submit / run / gather): the generated Kubernetes,
Slurm and Vertex AI files, and their tasks run here as separate processes (bash with a stand-in ``srun`` on PATH
for the Slurm script; the manifests' container commands with their index variable). The runs are a stand-in
``run_classifier.py`` (it writes an evaluation report; no TensorFlow): the real end-to-end run, a model trained by
a generated Slurm task, is in test_batch_jobs.py."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml

from classifier_helpers import REPO
from cli_helpers import assert_usage_error
from needs import skip_unless_ci
from xlnet_tf.batch import cluster, job_runner as jobs
from xlnet_tf.cli.jobs import TASK, JobsSettings
from xlnet_tf.errors import InputError

STAND_IN = '''"""Stand-in for run_classifier.py: the flags file in, an evaluation report out."""
import json, os, sys, yaml
flags = yaml.safe_load(open(sys.argv[1].split("=", 1)[1]))
if not os.path.isdir(flags["data_dir"]):
    sys.exit(f"run_classifier.py: error: --data_dir={flags['data_dir']}: not a directory")
print("trained", os.path.basename(flags["model_dir"]))
with open(os.path.join(flags["model_dir"], "eval_results.dev.json"), "w") as f:
    json.dump({"task": flags["task_name"], "step": 4,
               "metrics": {"accuracy": 0.5 + flags["seed"] / 100 + flags["learning_rate"] * 10}}, f)
'''


def needs(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        skip_unless_ci(f"{program} is not installed")
    return path


def six_runs(tmp_path) -> str:
    """A job of 6 runs (3 entries x 2 seeds), the last entry's with a missing data directory."""
    (tmp_path / "run_classifier.py").write_text(STAND_IN)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(
        output_dir=str(tmp_path / "out"), script=str(tmp_path / "run_classifier.py"),
        defaults=dict(task_name="sst-2", data_dir=str(tmp_path), learning_rate=1e-3),
        runs=[dict(name="a", seeds=[1, 2]), dict(name="b", seeds=[1, 2], learning_rate=3e-3),
              dict(name="c", seeds=[1, 2], data_dir=str(tmp_path / "missing"))])))
    return str(path)


def settings(tmp_path, scheduler, **values) -> JobsSettings:
    values.setdefault("out", str(tmp_path / scheduler))
    return JobsSettings(command="submit", job_file="job.yaml", scheduler=scheduler, **values).validate()


def submit(s, job) -> tuple:
    return cluster.submit(s, job, TASK)


def test_submit_writes_each_schedulers_files_for_the_runs_not_done(tmp_path):
    job = jobs.load_job(six_runs(tmp_path))
    done_run = job.runs[0]
    jobs.prepare_run(done_run)
    (tmp_path / "out" / "a.seed1" / jobs.DONE_FILE).write_text("{}")
    todo = [r.model_dir for r in job.runs[1:]]

    files, runs, done = submit(settings(tmp_path, "kubernetes", image="gcr.io/p/xlnet:1", namespace="ml",
                                                parallelism=2, cpus=8, memory="32Gi", workdir="/app"), job)
    assert [r.name for r in done] == ["a.seed1"] and len(runs) == 5
    assert all(os.path.exists(os.path.join(d, jobs.FLAGS_FILE)) for d in todo)  # prepared as the local runner does
    text = open(files[0]).read()
    manifest = yaml.safe_load(text)
    assert "# Done before, not submitted: a.seed1" in text and "#   4: c.seed2 (" in text
    assert (manifest["kind"], manifest["metadata"]["name"], manifest["metadata"]["namespace"]) == ("Job", "job", "ml")
    spec = manifest["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == (
        "Indexed", 5, 2, 2)
    # a preempted or evicted pod (its run checkpointed on SIGTERM) is not one of the retries
    assert spec["podFailurePolicy"] == {"rules": [{"action": "Ignore",
                                                   "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and len(pod["containers"]) == 1
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "xlnet_tf.cli.jobs", "run", f"--script={job.script}",
                                    "--index_env=JOB_COMPLETION_INDEX", *todo]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1, "memory": "32Gi"},
                                      "requests": {"cpu": 8, "memory": "32Gi"}}
    assert (container["image"], container["workingDir"]) == ("gcr.io/p/xlnet:1", "/app")

    files, _, _ = submit(settings(tmp_path, "slurm", partition="gpu", time_limit="24:00:00", gpus=2), job)
    script = open(files[0]).read()
    for line in ("#SBATCH --array=0-4\n", "#SBATCH --partition=gpu\n", "#SBATCH --gres=gpu:2\n",
                 "#SBATCH --time=24:00:00\n", 'exec srun ', '"${RUNS[$SLURM_ARRAY_TASK_ID]}"\n'):
        assert line in script, script
    assert [line.split()[0] for line in script.split("RUNS=(\n")[1].split(")")[0].splitlines()] == todo

    files, _, _ = submit(settings(tmp_path, "vertex", image="gcr.io/p/xlnet:1", region="us-central1",
                                          accelerator_type="NVIDIA_L4", machine_type="g2-standard-8"), job)
    assert sorted(map(os.path.basename, files)) == sorted([f"{r.name}.yaml" for r in job.runs[1:]] + ["submit.sh"])
    specs = {os.path.basename(f): yaml.safe_load(open(f)) for f in files if f.endswith(".yaml")}
    (pool,) = specs["b.seed2.yaml"]["workerPoolSpecs"]
    assert pool["machineSpec"] == dict(machineType="g2-standard-8", acceleratorType="NVIDIA_L4", acceleratorCount=1)
    assert pool["replicaCount"] == 1 and pool["containerSpec"]["imageUri"] == "gcr.io/p/xlnet:1"
    assert pool["containerSpec"]["command"][-1] == str(tmp_path / "out" / "b.seed2")
    # submit.sh with a stand-in gcloud: one custom job a run, each with its spec file.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/gcloud.calls\n')
    (bin_dir / "gcloud").chmod(0o755)
    subprocess.run([needs("sh"), files[-1]], check=True, env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
    calls = (tmp_path / "gcloud.calls").read_text().splitlines()
    assert len(calls) == 5 and all(c.startswith("ai custom-jobs create --region=us-central1 --display-name=job.")
                                   for c in calls)
    assert [c.split("--config=")[1] for c in calls] == [f for f in files if f.endswith(".yaml")]

    # A run whose flags changed since it started is refused, naming it; nothing is written.
    (tmp_path / "out" / "b.seed1" / jobs.FLAGS_FILE).write_text("learning_rate: 1.0\n")
    with pytest.raises(jobs.JobError, match=r"not submitted: b.seed1: its flags changed since it started "):
        submit(settings(tmp_path, "slurm", out=str(tmp_path / "refused")), job)
    assert not (tmp_path / "refused").exists()


def _task(command, cwd, **env):
    """A task's command as its node runs it: its own process, the scheduler's index variable set."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))


PREEMPTED = '''"""Stand-in for run_classifier.py: trains until SIGTERM, then exits as the entry points do."""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
print("training", flush=True)
time.sleep(120)
'''


def test_a_preempted_task_forwards_sigterm_and_exits_as_its_run_did(tmp_path):
    """A pod's SIGTERM (a preemption): the task forwards it to its run, which checkpoints and exits 143; the run is
    recorded as interrupted (not failed, not done) and the task exits 143 too, so the scheduler reruns it."""
    path = six_runs(tmp_path)
    (tmp_path / "run_classifier.py").write_text(PREEMPTED)
    job = jobs.load_job(path)
    run = job.runs[0]
    jobs.prepare_run(run)
    task = subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli.jobs", "run", f"--script={job.script}",
                             run.model_dir], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in task.stdout:  # the run's output, echoed: it is training
            if line.startswith("training"):
                break
        task.send_signal(signal.SIGTERM)
        out = task.communicate(timeout=60)[0]
    finally:
        task.kill()
    assert task.returncode == 143 and "interrupted: interrupted by signal SIGTERM (" in out, out
    failed = json.loads(open(os.path.join(run.model_dir, jobs.FAILED_FILE)).read())
    assert (failed["status"], failed["reason"]) == ("interrupted", "interrupted by signal SIGTERM")
    assert not os.path.exists(os.path.join(run.model_dir, jobs.DONE_FILE))


def test_tasks_in_separate_processes_and_gather_give_the_local_runners_table(tmp_path):
    """The 6 runs as a cluster runs them: 2 Slurm array tasks (bash, srun standing in), a Kubernetes pod's
    command, a Vertex AI job's command, 2 more tasks; `jobs gather` names the failed runs, and after the local
    runner's rerun (it skips the done runs, tries the failed ones again) both write the same bytes."""
    path = six_runs(tmp_path)
    job = jobs.load_job(path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    (bin_dir / "srun").chmod(0o755)
    slurm = submit(settings(tmp_path, "slurm", workdir=REPO), job)[0][0]
    on_path = f"{bin_dir}:{os.environ['PATH']}"
    for index in (0, 1):
        done = _task([needs("bash"), slurm], tmp_path, SLURM_ARRAY_TASK_ID=str(index), PATH=on_path)
        assert done.returncode == 0 and f"trained a.seed{index + 1}\n" in done.stdout, done.stdout + done.stderr
    again = _task([needs("bash"), slurm], tmp_path, SLURM_ARRAY_TASK_ID="0", PATH=on_path)  # a rerun of a done task
    assert again.returncode == 0 and "a.seed1: done before, skipped" in again.stdout, again.stderr

    manifest = yaml.safe_load(open(submit(settings(tmp_path, "kubernetes", image="i", workdir=REPO),
                                                  job)[0][0]))
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert manifest["spec"]["completions"] == 4  # a.seed1, a.seed2 done
    pod = _task([sys.executable, *container["command"][1:]], container["workingDir"], JOB_COMPLETION_INDEX="0")
    assert pod.returncode == 0 and "trained b.seed1" in pod.stdout, pod.stderr
    vertex = [f for f in submit(settings(tmp_path, "vertex", image="i", region="r", gpus=0), job)[0]
              if f.endswith("b.seed2.yaml")]
    command = yaml.safe_load(open(vertex[0]))["workerPoolSpecs"][0]["containerSpec"]["command"]
    assert _task([sys.executable, *command[1:]], REPO).returncode == 0
    assert cluster.run_task([job.runs[4].model_dir], job.script) == 1  # the missing data directory
    assert cluster.run_task([job.runs[5].model_dir], job.script) == 1

    gathered = _task([sys.executable, "-m", "xlnet_tf.cli.jobs", "gather", path], REPO)
    assert gathered.returncode == 1, gathered.stderr
    missing = f"--data_dir={tmp_path / 'missing'}: not a directory"
    assert f"[jobs] 2 of 6 runs not done: c.seed1 (failed: {missing}); c.seed2 (failed: {missing})" in gathered.stdout
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| b | sst-2 | accuracy | 2 | 0.5450 ± 0.0071 |" in table and f"- c.seed2: {missing} (log: " in table

    results = jobs.run_job(job)  # the local runner, on the same runs
    assert [r["status"] for r in results["runs"]] == ["done"] * 4 + ["failed"] * 2
    local = {name: (tmp_path / "out" / name).read_bytes() for name in ("results.md", "results.json")}
    assert _task([sys.executable, "-m", "xlnet_tf.cli.jobs", "gather", path], REPO).returncode == 1
    assert {name: (tmp_path / "out" / name).read_bytes() for name in local} == local


@pytest.mark.alone
def test_bad_submit_and_run_flags_are_one_line_errors(tmp_path):
    path = six_runs(tmp_path)
    assert_usage_error(_task([sys.executable, "-m", "xlnet_tf.cli.jobs", "submit", path, "--scheduler=slurm",
                        "--image=x"], REPO), "xlnet_tf.cli.jobs", "--image is not a flag of `jobs submit "
                                                                 "--scheduler=slurm`")
    for values, message in [
            (dict(scheduler=None), "missing required flag(s): --scheduler"),
            (dict(scheduler="kubernetes"), "--image is required with --scheduler=kubernetes"),
            (dict(scheduler="vertex", image="i"), "--region is required with --scheduler=vertex"),
            (dict(scheduler="vertex", image="i", region="r"), "--accelerator_type is required with "
                                                              "--scheduler=vertex and --gpus=1"),
            (dict(scheduler="kubernetes", image="i", job_name="My_Job"), "--job_name=My_Job: a Kubernetes Job name"),
            (dict(scheduler="slurm", out="gs://b/x"), "--out=gs://b/x: a local directory"),
            (dict(scheduler="slurm", parallelism=-1), "--parallelism=-1: must be >= 0")]:
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            JobsSettings(command="submit", job_file=path, **values).validate()
    s = JobsSettings(command="submit", job_file=path, scheduler="vertex")
    assert s.given_problems({"namespace", "region"}) == ["--namespace is not a flag of `jobs submit "
                                                         "--scheduler=vertex`"]
    assert JobsSettings(command="gather", job_file=path).given_problems({"only"}) == [
        "--only is not a flag of `jobs gather`"]
    dirs = [str(tmp_path / "x"), str(tmp_path / "y")]
    with pytest.raises(jobs.JobError, match="2 run directories and no --index_env"):
        cluster.pick(dirs, "")
    os.environ["XLNET_TEST_INDEX"] = "2"
    try:
        with pytest.raises(jobs.JobError, match=r"\$XLNET_TEST_INDEX='2' is not an index of the 2 run directories"):
            cluster.pick(dirs, "XLNET_TEST_INDEX")
    finally:
        del os.environ["XLNET_TEST_INDEX"]
    with pytest.raises(jobs.JobError, match="no job_flags.yaml .*jobs submit` writes it"):
        cluster.run_task(dirs[:1], "run_classifier.py")
