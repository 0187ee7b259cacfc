"""One writer per directory: a training run holds its checkpoint directory, a batch prediction its output directory
(``io_utils.directory_lock``); a second one is refused, naming the first, and a crashed one's lock is taken over."""

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from classifier_helpers import FIXTURES, REPO, SPIECE, make_flags
from xlnet_tf import io_utils, runner
from xlnet_tf.errors import InputError
from xlnet_tf.training.pretraining import pretrain as pretrain_main
from xlnet_tf.training.settings import PretrainSettings
from xlnet_tf.training.setup import TRAIN_LOCK

BROWN = os.path.join(REPO, "data", "corpus", "brown_sample.txt")


def refusal(holder, path):
    return f"held by pid {holder.get('pid')} on {holder.get('host')} ({path})"


def gone_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.mark.parametrize("where", ["local", "ram"])
def test_a_second_holder_is_refused_and_a_lost_holders_lock_is_taken_over(tmp_path, where):
    directory = str(tmp_path) if where == "local" else f"ram://locks-{uuid.uuid4().hex}"
    io_utils.makedirs(directory)
    path = io_utils.join(directory, ".lock")
    with io_utils.directory_lock(directory, ".lock", refusal):
        holder = json.loads(io_utils.read_text(path))
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        with pytest.raises(InputError, match=rf"held by pid {os.getpid()} on {socket.gethostname()} \({path}\)"):
            with io_utils.directory_lock(directory, ".lock", refusal):
                pass
    assert not io_utils.exists(path)  # released

    now = time.time()
    lost = [dict(host=socket.gethostname(), pid=gone_pid(), started="earlier", renewed=now),  # gone from this host
            dict(host="elsewhere", pid=1, started="earlier", renewed=now - io_utils.LOCK_EXPIRES_S - 1)]  # not renewed
    for holder in lost:
        io_utils.write_text_atomic(path, json.dumps(holder))
        with io_utils.directory_lock(directory, ".lock", refusal):
            assert json.loads(io_utils.read_text(path))["pid"] == os.getpid()
        assert not io_utils.exists(path)
    # Held elsewhere and renewed lately: watched. Renewed again meanwhile (alive): refused, the lock left as it was;
    # not renewed until it expires (a crashed run, a scheduler's rerun elsewhere): taken over. (A clock and a sleep
    # of the test's: 100 s a wait.)
    for renewing in (True, False):
        clock = [now]

        def sleep(seconds, renewing=renewing, clock=clock):
            clock[0] += 100
            if renewing:
                io_utils.write_text_atomic(path, json.dumps(dict(host="elsewhere", pid=1, started="earlier",
                                                                 renewed=clock[0])))
        io_utils.write_text_atomic(path, json.dumps(dict(host="elsewhere", pid=1, started="earlier", renewed=now)))
        lock = io_utils.directory_lock(directory, ".lock", refusal, clock=lambda clock=clock: clock[0], sleep=sleep)
        if renewing:
            with pytest.raises(InputError, match=r"held by pid 1 on elsewhere"):
                with lock:
                    pass
            assert json.loads(io_utils.read_text(path))["pid"] == 1
        else:
            with lock:
                assert json.loads(io_utils.read_text(path))["pid"] == os.getpid()
                assert clock[0] - now > io_utils.LOCK_EXPIRES_S
    # Written by a version that never renews: refused at once.
    holder = dict(host="elsewhere", pid=1, started="earlier")
    io_utils.write_text_atomic(path, json.dumps(holder))
    with pytest.raises(InputError, match=r"held by pid 1 on elsewhere"):
        with io_utils.directory_lock(directory, ".lock", refusal, sleep=lambda s: pytest.fail("waited")):
            pass
    assert json.loads(io_utils.read_text(path)) == holder


def test_of_two_runs_taking_over_one_lost_lock_at_once_one_holds_it(tmp_path, monkeypatch):
    """A scheduler restarting a crashed job twice: both runs find the lost lock; the first takes it over while the
    second is about to. The second used to remove the first's new lock and take one too: both wrote."""
    path = tmp_path / ".lock"
    path.write_text(json.dumps(dict(host=socket.gethostname(), pid=gone_pid(), started="earlier", renewed=0)))
    first = dict(host=socket.gethostname(), pid=os.getpid(), started="first", renewed=time.time())
    judged = io_utils._lock_lost

    def judged_while_the_first_takes_it(holder, host, now):
        if holder.get("started") == "earlier":  # the lost lock, read by the second run: the first takes it now
            path.unlink()
            path.write_text(json.dumps(first))
        return judged(holder, host, now)

    monkeypatch.setattr(io_utils, "_lock_lost", judged_while_the_first_takes_it)
    with pytest.raises(InputError, match=f"held by pid {os.getpid()}"):
        with io_utils.directory_lock(str(tmp_path), ".lock", refusal):
            pass
    assert json.loads(path.read_text()) == first and os.listdir(tmp_path) == [".lock"]


def test_a_holder_renews_its_lock(tmp_path, monkeypatch):
    """The renewal (every LOCK_RENEW_S) is what tells a lock of a live holder elsewhere from a lost one's."""
    monkeypatch.setattr(io_utils, "LOCK_RENEW_S", 0.01)
    ticks = iter(range(1000, 10**6))
    with io_utils.directory_lock(str(tmp_path), ".lock", refusal, clock=lambda: float(next(ticks))):
        path = tmp_path / ".lock"
        first = json.loads(path.read_text())["renewed"]
        deadline = time.monotonic() + 30
        while json.loads(path.read_text() or "{}").get("renewed", first) == first:
            assert time.monotonic() < deadline, "the lock was not renewed"
            time.sleep(0.01)
    assert not path.exists()


def test_a_second_training_run_in_a_model_dir_is_refused(tmp_path):
    """Two runs training into one --model_dir would interleave their checkpoints: the second is refused before any
    work, naming the first. (Evaluating, predicting or exporting from it meanwhile is allowed.)"""
    finetune = make_flags(tmp_path, task_name="sst-2", do_train=True, data_dir=os.path.join(FIXTURES, "glue", "SST-2"))
    pretrain = PretrainSettings(model_dir=finetune.model_dir, model_config_path=finetune.model_config_path,
                                spiece_model_file=SPIECE, input_glob=BROWN, data_dir=str(tmp_path / "data"),
                                train_batch_size=4, seq_len=32, reuse_len=16, perm_size=16, num_predict=6,
                                train_steps=2)
    os.makedirs(finetune.model_dir)
    with open(os.path.join(finetune.model_dir, TRAIN_LOCK), "w") as f:  # a live run: this process
        json.dump(dict(host=socket.gethostname(), pid=os.getpid(), started="2026-11-30 05:00:00",
                       renewed=time.time()), f)
    for run, settings in ((runner.run, finetune), (pretrain_main, pretrain)):
        with pytest.raises(InputError, match=rf"--model_dir={finetune.model_dir}: another run is training there "
                                             rf"\(pid {os.getpid()} on .*, since 2026-11-30 05:00:00\)"):
            run(settings)
    assert sorted(os.listdir(finetune.model_dir)) == [TRAIN_LOCK] and not os.path.exists(tmp_path / "data")
