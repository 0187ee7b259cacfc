"""python -m xlnet_tf.cli.launch as users break it (issue 36): workers die with the launcher (even by SIGKILL), a
worker that cannot start stops the others, a failed worker stops the rest after --stop_after, exit statuses are a
shell's (128 + signal), and a host this machine cannot listen on is one line naming --host. The workers are shell
one-liners (no TensorFlow); each test waits boundedly, never on timing luck."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from xlnet_tf.cli import launch
from xlnet_tf.errors import InputError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINUX = sys.platform.startswith("linux")


def _launcher(*args):
    return subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli.launch", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _worker_pids(proc, workers: int) -> dict:
    """{worker: pid} from the workers' first lines ('[worker i] <pid>'), read as they come."""
    pids = {}
    deadline = time.monotonic() + 60
    while len(pids) < workers and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        tag, _, pid = line.partition("] ")
        pids[int(tag.removeprefix("[worker "))] = int(pid)
    assert len(pids) == workers, (pids, proc.stderr.read() if proc.poll() is not None else "")
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, waiting for its reaper
    except FileNotFoundError:
        return False


def _gone(pids, seconds=15.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


SLEEPER = ["--", "sh", "-c", "echo $$; exec sleep 120"]  # prints its pid, then is `sleep` (same pid)


@pytest.mark.skipif(not LINUX, reason="the parent-death signal is Linux's")
def test_sigkill_of_the_launcher_takes_its_workers_with_it():
    proc = _launcher("--workers=2", *SLEEPER)
    try:
        pids = _worker_pids(proc, 2)
        proc.kill()
        proc.wait(timeout=30)
        assert _gone(pids.values()), f"workers {pids} outlived the launcher"
    finally:
        proc.kill()
        for pid in pids.values() if "pids" in locals() else ():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_launcher_stops_the_workers_and_exits_128_plus_it(signum):
    proc = _launcher("--workers=2", *SLEEPER)
    pids = _worker_pids(proc, 2)
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 128 + signum
    assert _gone(pids.values())


def test_a_worker_that_cannot_start_stops_the_others(tmp_path):
    (tmp_path / "s0.sh").write_text("#!/bin/sh\necho $$\nexec sleep 120\n")
    (tmp_path / "s0.sh").chmod(0o755)  # s1.sh does not exist
    proc = _launcher("--workers=2", "--", str(tmp_path / "s{worker}.sh"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert f"error: worker 1: cannot start {tmp_path / 's1.sh'} (No such file or directory)" in err, err
    started = [int(line.partition("] ")[2]) for line in out.splitlines() if line.startswith("[worker 0] ")]
    assert _gone(started)


def test_a_failed_worker_stops_the_others_after_stop_after():
    proc = _launcher("--workers=2", "--stop_after=1", "--", "sh", "-c",
                     'if [ "$0" = 1 ]; then exit 3; fi; echo $$; exec sleep 120', "{worker}")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "stopping worker(s) [0]" in err
    assert "launch: worker 1 failed first (exited 3), the launcher's status; worker 0 ended by SIGTERM, worker 1 " \
           "exited 3" in err, err
    assert _gone([int(line.partition("] ")[2]) for line in out.splitlines() if line.startswith("[worker 0] ")])


def test_workers_stopped_together_by_a_preemption_are_not_a_failure_of_one():
    """SIGTERM to one worker of a multi-worker run: every worker saves at the same step and exits 143 (the tools'
    status for a run to resume). The launcher said "worker 0 failed first (exited 143)"."""
    proc = _launcher("--workers=2", "--", "sh", "-c", "exit 143")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "failed" not in err, err
    assert "launch: every worker stopped on a signal (exited 143: stopped and saved, as a preemption); rerun the " \
           "same command to resume" in err, err


@pytest.mark.parametrize("host", ["not_a_host!!", "192.0.2.1"])  # not a name; an address of another machine
def test_a_host_this_machine_cannot_listen_on_is_one_line_naming_it(host):
    with pytest.raises(InputError, match=rf"^--host={host}: ") as error:
        launch.main(launch.LaunchSettings(workers=2, host=host, command=("true",)))
    assert "\n" not in str(error.value)


def test_exit_status_is_a_shells():
    assert [launch.exit_status(c) for c in (0, 1, -signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL)] == [
        0, 1, 143, 130, 137]
