"""MultiWorkerMirroredStrategy with three local worker processes (TF_CONFIG on 127.0.0.1 ports): lockstep, a lost
worker, preemption, exact resume."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from training_state import assert_same_state, checkpoint_state

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start_workers(tmp_path, *args, workers):
    """``workers`` workers of one job (TF_CONFIG on free local ports), sharing ``tmp_path/model``: worker i > 0
    saves into model/.worker-i (TF's convention). ``args``: train_steps, iterations, save_steps."""
    addresses = [f"127.0.0.1:{p}" for p in _free_ports(workers)]
    procs = []
    for index in range(workers):
        # PYTHONPATH: this checkout's xlnet_tf, not the one the environment has installed
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.dirname(HERE),
                   TF_CONFIG=json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "multiworker_main.py"),
                                       str(tmp_path / "model"), str(tmp_path / f"out{index}.json"), *map(str, args)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def _launch(tmp_path, *args):
    """The workers started as a user starts them: python -m xlnet_tf.cli.launch (TF_CONFIG per worker, {worker} in
    the command); every line of their output is prefixed with its worker."""
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.launch", "--workers=3", "--",
                           sys.executable, os.path.join(HERE, "multiworker_main.py"), str(tmp_path / "model"),
                           str(tmp_path / "out{worker}.json"), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.dirname(HERE)),
                          cwd=os.path.dirname(HERE))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {line[:len("[worker 0]")] for line in done.stdout.splitlines()} <= {f"[worker {i}]" for i in range(3)}
    return [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(3)]


def _wait_for(path, procs, seconds=300):
    import time

    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.5)
    if not path.exists():
        for p in procs:
            p.kill()
        raise AssertionError(f"no {path.name}: " + " | ".join(p.communicate()[0][-2000:] for p in procs))


@pytest.mark.alone  # three workers keep both cores busy; beside more, they miss the coordination's heartbeats
@pytest.mark.multiprocess
@pytest.mark.slow
def test_killed_or_preempted_workers_stop_together_and_a_rerun_resumes(tmp_path):
    """Three workers. SIGKILL of worker 2: worker 0 stops within the coordination service's heartbeat timeout,
    non-zero, with one line naming the lost task and the step a rerun resumes from. The rerun of all workers resumes
    from that checkpoint; SIGTERM to its worker 1 (a preemption): all save at the same step and exit 0, with the
    weights, optimizer state and dropout seeds of an uninterrupted three-worker run to that step (started by
    python -m xlnet_tf.cli.launch, in lockstep), bit for bit. (Three starts of three workers: each start is ~15 s
    of TensorFlow imports and tracing on 2 cores.)"""
    import signal
    import time

    model = tmp_path / "model"
    procs = _start_workers(tmp_path, 100000, 2, 4, workers=3)  # endless, a checkpoint every 4 steps
    _wait_for(model / "xlnet_model-4.index", procs)
    procs[2].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    try:
        out, _ = procs[0].communicate(timeout=150)
        other, _ = procs[1].communicate(timeout=150)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert time.monotonic() - killed < 150 and procs[0].returncode == 1, out[-3000:]
    line = [entry for entry in out.splitlines() if entry.startswith("error: ")]
    assert len(line) == 1 and "lost worker 2 of the multi-worker job" in line[0], out[-3000:]
    resume = int(re.search(r"resume from step (\d+)", line[0]).group(1))
    assert resume >= 4 and resume % 4 == 0
    assert _latest_step(model) == resume
    # Every worker names the checkpoint a rerun reads (worker 1 named its private copy in .worker-1/).
    assert f"resume from step {resume} ({model / f'xlnet_model-{resume}'})" in other, other[-3000:]

    procs = _start_workers(tmp_path, 100000, 2, 4, workers=3)  # resumes from the lost worker's checkpoint
    _wait_for(model / f"xlnet_model-{resume + 4}.index", procs)
    procs[1].send_signal(signal.SIGTERM)
    for p in procs:
        out, _ = p.communicate(timeout=150)
        assert p.returncode == 0, out[-3000:]
        # (a run that started from scratch would end with the uninterrupted run's state too)
        assert f"resumed from {model / f'xlnet_model-{resume}'} at step {resume}" in out, out[-3000:]
        assert re.search(r"stopped by (SIGTERM|another worker) at step \d+ of 100000; rerun the same command on "
                         r"every worker to resume", out), out[-3000:]
    results = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(3)]
    assert all(r["preempted"] for r in results) and len({r["step"] for r in results}) == 1, results
    assert [r["stopped_by"] for r in results] == ["another worker", "SIGTERM", "another worker"], results
    preempted = results[0]["step"]
    assert preempted >= resume + 4 and (model / f"xlnet_model-{preempted}.index").exists()

    # The uninterrupted run, started by the launcher: three workers in lockstep, each saving its checkpoints.
    # (Not beside the others: six workers on a loaded 2-core machine miss the coordination service's heartbeats.)
    (tmp_path / "straight").mkdir()
    results = _launch(tmp_path / "straight", preempted, 2, 4)
    assert [r["step"] for r in results] == [preempted] * 3 and [r["replicas"] for r in results] == [3, 3, 3]
    assert max(r["loss"] for r in results) - min(r["loss"] for r in results) < 1e-6
    for worker in (1, 2):
        assert os.path.exists(tmp_path / "straight" / "model" / f".worker-{worker}" / "checkpoint")
    # not compared: save_counter, the number of saves (the preemption's is an extra one), which no step reads
    interrupted, straight = (checkpoint_state(str(d / "model" / f"xlnet_model-{preempted}"),
                                              skip=lambda name: name.startswith("save_counter/"))
                             for d in (tmp_path, tmp_path / "straight"))
    assert any("seed" in n.lower() or "rng" in n.lower() for n in straight), sorted(straight)  # dropout's state
    assert_same_state(interrupted, straight)  # to float32 round-off (training_state.py); bit-identical so far


def _latest_step(model_dir) -> int:
    """The step of the checkpoint the manager's state file names (what a rerun resumes from)."""
    text = (model_dir / "checkpoint").read_text()
    return int(re.search(r'^model_checkpoint_path: ".*-(\d+)"$', text, re.M).group(1))


@pytest.mark.alone  # two workers' heartbeats, as above
@pytest.mark.multiprocess
@pytest.mark.slow
def test_workers_pretraining_from_raw_text_train_on_the_data_the_chief_writes(tmp_path):
    """run_pretrain.py on two workers from raw text (--input_glob), as docs/pretraining.md starts them: the chief
    writes the data, with a shard for each worker's input pipeline, while the other waits; both train on it. (Each
    worker used to write the same shards into the shared --data_dir at once, and the bundled corpus made one shard:
    too few for two pipelines.)"""
    command = [sys.executable, "run_pretrain.py", "--config_file=configs/pretrain_tiny.yaml", "--strategy=multi_worker",
               f"--model_dir={tmp_path / 'model'}", f"--data_dir={tmp_path / 'data'}", "--train_steps=2",
               "--iterations=1", "--save_steps=2", "--warmup_steps=1"]

    def launch(*command):
        return subprocess.run([sys.executable, "-m", "xlnet_tf.cli.launch", "--workers=2", "--", *command],
                              capture_output=True, text=True, timeout=300, cwd=os.path.dirname(HERE),
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.dirname(HERE)))

    # Worker 1 started with another learning rate: nothing compared the workers' settings, and they trained apart
    # (another --iterations: each waited in a collective the other never entered, for ever). Refused on both.
    done = launch("sh", "-c", " ".join(command) + " --learning_rate=$([ {worker} = 0 ] && echo 1e-3 || echo 5e-3)")
    out = done.stdout + done.stderr
    assert done.returncode != 0 and not (tmp_path / "data").exists(), out[-3000:]
    for worker, rate in ((0, 0.001), (1, 0.005)):
        assert (f"other settings: --learning_rate={rate} on worker {worker} (see the other workers' lines)"
                in out), out[-3000:]
    done = launch(*command)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    writing = [line[:len("[worker 0]")] for line in out.splitlines() if "writing pretraining data" in line]
    assert writing == ["[worker 0]"] and "[worker 1]" in out and "waiting for the chief" in out, out[-3000:]
    assert out.count("done: trained to step 2") == 2, out[-3000:]
    shards = json.loads((tmp_path / "data" / "manifest.json").read_text())["shards"]
    assert len(shards) >= 2, shards


@pytest.mark.alone  # two workers' heartbeats, as above
@pytest.mark.multiprocess
@pytest.mark.slow
def test_workers_fine_tuning_evaluate_all_the_data_and_the_chief_alone_writes(tmp_path):
    """run_classifier.py on two workers (the launcher) with --do_eval (--eval_all_ckpt), --do_predict and
    --export_dir, the micro model on the SST-2 fixture (6 dev examples: 2 batches of 4, one padded). Evaluation used
    to shard the single eval file over the workers (an error) and would have counted each worker's share only;
    every worker exported into --export_dir, and the chief lost the race for the version. Now both evaluate all of
    it to the metrics of a one-device evaluation of the checkpoint, and only the chief writes the report, the
    predictions and the export."""
    from classifier_helpers import FIXTURES, make_flags, micro_config
    from xlnet_tf.finetuning.serving import existing_versions
    from xlnet_tf.runner import run

    model, export = tmp_path / "model", tmp_path / "export"
    flags = dict(task_name="sst-2", data_dir=os.path.join(FIXTURES, "glue", "SST-2"), model_dir=str(model),
                 output_dir=str(tmp_path / "data"), model_config_path=micro_config(tmp_path),
                 spiece_model_file=os.path.join(os.path.dirname(HERE), "data", "spiece.model"), max_seq_length=32,
                 train_batch_size=4, eval_batch_size=4, dropout=0.0, dropatt=0.0)
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.launch", "--workers=2", "--", sys.executable,
                           "run_classifier.py", "--strategy=multi_worker", "--do_train", "--do_eval",
                           "--eval_all_ckpt", "--do_predict", "--train_steps=2", "--iterations=1", "--save_steps=1",
                           f"--export_dir={export}", *(f"--{k}={v}" for k, v in flags.items())],
                          capture_output=True, text=True, timeout=300, cwd=os.path.dirname(HERE),
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.dirname(HERE)))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    finished = [line for line in out.splitlines() if "done: trained to step 2" in line]
    assert sorted(line[:len("[worker 0]")] for line in finished) == ["[worker 0]", "[worker 1]"], out[-3000:]
    assert "the chief (worker 0) exports" in out and existing_versions(str(export)) == [2], out[-3000:]
    evaluated = {re.search(r"evaluated [^;]*", line).group(0) for line in finished}  # both workers' metrics
    assert len(evaluated) == 1, finished
    written = json.loads((model / "eval_results.dev.json").read_text())
    assert written["step"] == 2 and written["data"]["num_examples"] == 6 and len(written["all_checkpoints"]) == 2
    assert out.count("predictions: ") == 2 and "predictions: written by the chief" in out, out[-3000:]
    assert len((model / "predict" / "sst-2.dev.logits.json").read_text().split('"index"')) == 7
    reference = run(make_flags(tmp_path, **flags, do_eval=True))["eval"]  # the same checkpoint on one device
    assert reference["checkpoint"] == written["checkpoint"]
    assert written["metrics"] == pytest.approx(reference["metrics"], rel=1e-5, abs=1e-6)
