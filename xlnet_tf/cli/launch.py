"""Runs the workers of one multi-worker job on this machine, for trying ``--strategy=multi_worker`` before a
cluster (or for several processes on one large host):

    python -m xlnet_tf.cli.launch --workers=2 -- python run_pretrain.py --config_file=... --strategy=multi_worker

Worker i gets ``TF_CONFIG={"cluster": {"worker": [HOST:P0, ...]}, "task": {"type": "worker", "index": i}}`` on free
ports of ``--host``; ``{worker}`` in the command becomes i (e.g. a log file per worker). Each output line is
prefixed ``[worker i]``. SIGTERM and SIGINT to the launcher go to every worker; the launcher ends when all have
and exits with the status of the first that failed (0 if none; a worker ended by signal N counts as 128 + N, as
in a shell). Worker 0 is the chief (checkpoints, summaries).

The workers do not outlive the launcher: on Linux each gets SIGTERM when the launcher dies, even by SIGKILL (a
parent-death signal; a worker's own children, e.g. a shell's, are its to stop: ``exec`` the command). A worker
that cannot be started (no such command) stops the ones already started; one that fails gives the others
``--stop_after`` seconds to stop by themselves (a multi-worker run reports its lost worker), then they are
stopped.
On a cluster, start the same command once per host with its own ``TF_CONFIG`` instead (docs/pretraining.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import Settings, setting

# Linux's prctl(PR_SET_PDEATHSIG, ...): the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1
# Seconds a worker gets to end after SIGTERM before it is killed.
_TERM_GRACE = 10.0


@dataclasses.dataclass
class LaunchSettings(Settings):
    workers: int = setting(2, "Worker processes to start.")
    host: str = setting("127.0.0.1", "Address the workers listen on (this machine's).")
    stop_after: float = setting(30.0, "Seconds the other workers get to stop by themselves after one fails, "
                                "before the launcher stops them.")
    command: tuple = setting((), "The command each worker runs (after --).", positional="rest")

    def errors(self) -> list:
        errors = super().errors()
        if self.workers < 1:
            errors.append(f"--workers={self.workers} must be at least 1")
        if self.stop_after < 0:
            errors.append(f"--stop_after={self.stop_after} must be >= 0")
        if not self.command:
            errors.append("no command: give it after --, e.g. -- python run_pretrain.py --strategy=multi_worker ...")
        return errors


def free_ports(host: str, count: int) -> list:
    """``count`` ports free on ``host`` now (each bound and released: another process could take one meanwhile);
    an InputError names ``--host`` if this machine cannot listen there."""
    try:
        family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
        sockets = [socket.socket(family) for _ in range(count)]
    except OSError as error:  # socket.gaierror: not a name or address
        raise InputError(f"--host={host}: not a host name or address this machine resolves "
                         f"({error.strerror or error})") from None
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    except OSError as error:  # an address of another machine, or one this machine does not have
        raise InputError(f"--host={host}: cannot listen there ({error.strerror or error}); give an address of "
                         "this machine") from None
    finally:
        for s in sockets:
            s.close()


def tf_config(cluster: list, index: int) -> str:
    return json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})


def exit_status(code: int) -> int:
    """A shell's exit status for a child's return code: 128 + N for one ended by signal N (Popen's -N)."""
    return 128 - code if code < 0 else code


def _die_with_launcher():
    """A ``preexec_fn`` that gives the worker SIGTERM when the launcher dies (however it dies), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls it
    launcher = os.getpid()

    def preexec():
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:  # the launcher died before the signal was armed
            os._exit(128 + signal.SIGTERM)
    return preexec


def _stop(procs: list, grace: float = _TERM_GRACE) -> None:
    """SIGTERM to every running worker, SIGKILL to those still running ``grace`` seconds later; all reaped."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(s: LaunchSettings) -> int:
    host = f"[{s.host}]" if ":" in s.host else s.host  # an IPv6 address in host:port
    cluster = [f"{host}:{port}" for port in free_ports(s.host, s.workers)]
    preexec = _die_with_launcher()
    procs, pumps, received = [], [], []

    def forward(signum, _frame):
        received.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    # Before the first worker starts: a signal that came between a worker's start and the handler would end the
    # launcher with its workers left to the parent-death signal, and with -N instead of the shell's 128 + N.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    for index in range(s.workers):
        if received:  # stopped while starting: start no more
            break
        command = [part.replace("{worker}", str(index)) for part in s.command]
        try:
            procs.append(subprocess.Popen(command, env=dict(os.environ, TF_CONFIG=tf_config(cluster, index)),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                          preexec_fn=preexec))
        except (OSError, subprocess.SubprocessError) as error:
            _stop(procs)
            reason = getattr(error, "strerror", None) or str(error)
            raise InputError(f"worker {index}: cannot start {command[0]} ({reason}); the {len(procs)} worker(s) "
                             "started were stopped") from None
    for index, proc in enumerate(procs):  # after every fork: a thread running meanwhile could deadlock preexec_fn
        pumps.append(threading.Thread(target=_pump, args=(proc, f"[worker {index}] "), daemon=True))
        pumps[-1].start()

    failed: Optional[float] = None
    first: Optional[subprocess.Popen] = None  # the first worker seen failing: its status is the launcher's
    while None in [proc.poll() for proc in procs]:  # (a list: every worker polled, each time)
        if first is None and any(proc.returncode for proc in procs):
            failed, first = time.monotonic(), next(proc for proc in procs if proc.returncode)
        if failed is not None and time.monotonic() - failed > s.stop_after:
            running = [i for i, proc in enumerate(procs) if proc.poll() is None]
            sys.stderr.write(f"launch: a worker failed; stopping worker(s) {running}, still running after "
                             f"--stop_after={s.stop_after:g} s\n")
            _stop(procs)
            break
        time.sleep(0.1)
    for pump in pumps:
        pump.join(timeout=5)
    first = first or next((proc for proc in procs if proc.returncode), None)
    if received and not procs:  # stopped before any worker started
        return 128 + received[0]
    statuses = {exit_status(proc.returncode) for proc in procs}
    if not received and len(statuses) == 1 and statuses & {128 + signal.SIGTERM, 128 + signal.SIGINT}:
        # Every worker stopped on a signal one of them got (the tools' status for a run saved to be resumed): a
        # preemption, not a failure of the first one seen
        sys.stderr.write(f"launch: every worker stopped on a signal (exited {statuses.pop()}: stopped and saved, "
                         "as a preemption); rerun the same command to resume\n")
    elif first is not None and not received:  # the workers' own lines are interleaved above: say which failed
        ended = ", ".join(f"worker {i} {_ended(proc.returncode)}" for i, proc in enumerate(procs))
        sys.stderr.write(f"launch: worker {procs.index(first)} failed first ({_ended(first.returncode)}), the "
                         f"launcher's status; {ended}\n")
    return exit_status(first.returncode) if first else 0


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"ended by signal {-code}"
    return f"exited {code}"


def _pump(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


if __name__ == "__main__":
    cli.run(LaunchSettings, main, tensorflow=False)
