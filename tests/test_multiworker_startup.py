"""A multi-worker run starts or fails in bounded time, in one line naming TF_CONFIG and this task: a malformed
TF_CONFIG, a cluster given to a one-process strategy, a port another process holds, a task that never starts.
(The runs that form a cluster: test_multiworker.py.)"""

import json
import os
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from background import background
from classifier_helpers import REPO
from cli_helpers import parsed
from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.distribute import ClusterTask, _not_formed_message, check_tf_config, form_cluster
from xlnet_tf.training.settings import PretrainSettings

TWO = ["127.0.0.1:19101", "127.0.0.1:19102"]


def _tf_config(cluster, task_type="worker", index=0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _refusal(strategy, text) -> str:
    with pytest.raises(InputError) as raised:
        check_tf_config(strategy, text)
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_malformed_tf_config_is_one_line_naming_it():
    assert _refusal("multi_worker", "not json").startswith("TF_CONFIG is not JSON (Expecting value, character 0")
    assert _refusal("multi_worker", _tf_config({"worker": TWO}, index=5)) == (
        "TF_CONFIG's task index 5: its cluster has 2 worker addresses (index 0 to 1)")
    for job in ("evaluator", "ps"):
        assert f"task type '{job}': this stack's --strategy=multi_worker runs workers (and a chief) only" in (
            _refusal("multi_worker", _tf_config({"worker": TWO[:1]}, job)))
        assert f"cluster has a '{job}' job" in _refusal("multi_worker", _tf_config({"worker": TWO, job: ["h:1"]}))
    assert "cluster 'worker': expected a list of 'host:port'" in _refusal("multi_worker", _tf_config({"worker": "h:1"}))
    assert "expected a list" in _refusal("multi_worker", _tf_config({"worker": ["h:99999"]}))
    assert "gives 127.0.0.1:19101 to worker 0 and worker 1" in _refusal("multi_worker",
                                                                        _tf_config({"worker": TWO[:1] * 2}))
    assert "2 chiefs" in _refusal("multi_worker", _tf_config({"chief": TWO, "worker": ["h:1"]}))
    assert "no task" in _refusal("multi_worker", json.dumps({"cluster": {"worker": TWO}}))
    assert "has no 'chief' job" in _refusal("multi_worker", _tf_config({"worker": TWO}, "chief"))
    # What TensorFlow accepts: a chief and workers, an index written as text, no cluster (one local worker)
    task = check_tf_config("multi_worker", _tf_config({"chief": ["h:1"], "worker": TWO}, "worker", "1"))
    assert task == ClusterTask({"chief": ["h:1"], "worker": TWO}, "worker", 1) and task.leader() == ("chief", 0)
    assert task.name() == "worker 1 (127.0.0.1:19102)"
    assert check_tf_config("multi_worker", "") is None and check_tf_config("multi_worker", "{}") is None


def test_a_cluster_under_a_one_process_strategy_is_refused():
    """Each worker would train alone into the same --model_dir (one refused by its lock, hiding the cause)."""
    for strategy in ("one_device", "mirrored"):
        assert _refusal(strategy, _tf_config({"worker": TWO}, index=1)) == (
            f"TF_CONFIG names a 2-task cluster but --strategy={strategy}: use --strategy=multi_worker (or unset "
            "TF_CONFIG)")
        # one task, or a TF_CONFIG these strategies do not read anyway: as before
        assert check_tf_config(strategy, _tf_config({"worker": TWO[:1]})) is None
        assert check_tf_config(strategy, "not json") is None


def test_worker_timeout_flag(monkeypatch):
    values, _ = parsed(PretrainSettings, "--worker_timeout=30")
    assert cli.settings_from_flags(PretrainSettings, values).worker_timeout == 30
    assert PretrainSettings.__dataclass_fields__["worker_timeout"].default == 600
    errors = PretrainSettings(model_dir="m", data_dir="d", seq_len=16, reuse_len=8, num_predict=4,
                              model_config_path=os.path.join(REPO, "configs", "tiny.json"), worker_timeout=0).errors()
    assert "--worker_timeout=0 must be positive" in " ".join(errors)
    # ... and reaches the strategy (start_run: what every tool's run starts with)
    from xlnet_tf.training import setup

    given = {}
    monkeypatch.setattr(setup, "create_strategy", lambda *args, **kwargs: given.update(kwargs) or
                        tf.distribute.OneDeviceStrategy("/cpu:0"))
    setup.start_run(PretrainSettings(model_config_path=os.path.join(REPO, "configs", "tiny.json"), train_batch_size=2,
                                     worker_timeout=30))
    assert given["worker_timeout"] == 30


def test_a_port_in_use_is_named_before_tensorflow_tries_it():
    """gRPC's error says "Could not start gRPC server" in a traceback; the cause was in a log line."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(InputError) as raised:  # (before the coordination service is configured)
            form_cluster(ClusterTask({"worker": [TWO[0], address]}, "worker", 1))
    assert str(raised.value).startswith(f"TF_CONFIG worker 1 ({address}): port {address.split(':')[1]} is in use "
                                        "on this machine")


def test_a_cluster_that_does_not_form_names_the_tasks_waited_for():
    task = ClusterTask({"chief": ["c:1"], "worker": TWO}, "worker", 1)
    leader = ("Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0.\nThe first task at the barrier: "
              "/job:chief/replica:0/task:0. Some timed out task names:\n/job:worker/replica:0/task:0\n\nAdditional "
              "GRPC error information from remote target /job:chief/replica:0/task:0")
    message = _not_formed_message(task, 600, tf.errors.DeadlineExceededError(None, None, leader))
    assert message.startswith("TF_CONFIG worker 1 (127.0.0.1:19102): the cluster did not form within 600 s "
                              "(--worker_timeout): no word from worker 0 (127.0.0.1:19101). Check that every task")
    message = _not_formed_message(task, 600, tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded"))
    assert "no word from chief 0 (c:1), the leader every task registers with." in message


_STARTUP = """
import json, os, socket, sys, time
from xlnet_tf.cli.flags import import_tensorflow
import_tensorflow()  # as the tools' processes do
from xlnet_tf.errors import InputError
from xlnet_tf.training.distribute import create_strategy
held = socket.socket(); held.bind(("127.0.0.1", 0)); held.listen()
cluster = lambda *ports: {"worker": ["127.0.0.1:%d" % p for p in ports]}
cases = [("multi_worker", "not json"),
         ("one_device", {"cluster": cluster(1, 2), "task": {"type": "worker", "index": 1}}),
         ("multi_worker", {"cluster": cluster(held.getsockname()[1], 2), "task": {"type": "worker", "index": 0}}),
         ("multi_worker", {"cluster": cluster(*map(int, sys.argv[1:])), "task": {"type": "worker", "index": 0}})]
results = []
for name, config in cases:
    os.environ["TF_CONFIG"] = config if isinstance(config, str) else json.dumps(config)
    start = time.monotonic()
    try:
        create_strategy(name, worker_timeout=3)
        results.append(["created", 0])
    except InputError as e:
        results.append([str(e), time.monotonic() - start])
print(json.dumps(results), flush=True)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
@background
def test_create_strategy_checks_tf_config_and_bounds_the_cluster_formation():
    """Worker 0 of two, worker 1 never started: one error naming worker 1's address after --worker_timeout, and
    the process ends (it waited for ever, ignoring SIGTERM). One process: its context forms one cluster."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", _STARTUP, *map(str, ports)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (json_error, _), (one_device, _), (in_use, _), (formation, seconds) = json.loads(done.stdout.splitlines()[-1])
    assert json_error.startswith("TF_CONFIG is not JSON") and "--strategy=one_device: use" in one_device
    assert "is in use on this machine" in in_use
    assert formation.startswith(f"TF_CONFIG worker 0 (127.0.0.1:{ports[0]}): the cluster did not form within 3 s "
                                f"(--worker_timeout): no word from worker 1 (127.0.0.1:{ports[1]}).")
    assert 2.5 < seconds < 30
