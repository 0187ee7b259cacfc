"""MultiWorkerMirroredStrategy with two local worker processes (TF_CONFIG on 127.0.0.1 ports)."""

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.multiprocess
def test_two_workers_train_in_lockstep(tmp_path):
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        model_dir = str(tmp_path / "model")  # shared: worker 1 saves into model/.worker-1 (TF's convention)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "multiworker_main.py"), model_dir,
                                       str(tmp_path / f"out{index}.json")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out)
        assert p.returncode == 0, out[-3000:]
    results = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert [r["step"] for r in results] == [3, 3]
    assert [r["replicas"] for r in results] == [2, 2]
    assert abs(results[0]["loss"] - results[1]["loss"]) < 1e-6
    assert os.path.exists(tmp_path / "model" / "checkpoint")
    assert os.path.exists(tmp_path / "model" / ".worker-1" / "checkpoint")
