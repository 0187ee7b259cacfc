"""Runs the workers of one multi-worker job on this machine, for trying ``--strategy=multi_worker`` before a
cluster (or for several processes on one large host):

    python -m xlnet_tf.cli.launch --workers=2 -- python run_pretrain.py --config_file=... --strategy=multi_worker

Worker i gets ``TF_CONFIG={"cluster": {"worker": [HOST:P0, ...]}, "task": {"type": "worker", "index": i}}`` on free
ports of ``--host``; ``{worker}`` in the command becomes i (e.g. a log file per worker). Each output line is
prefixed ``[worker i]``. SIGTERM and SIGINT to the launcher go to every worker; the launcher ends when all have
and exits with the first non-zero status among them (0 if none). Worker 0 is the chief (checkpoints, summaries).
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

from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Settings, setting


@dataclasses.dataclass
class LaunchSettings(Settings):
    workers: int = setting(2, "Worker processes to start.")
    host: str = setting("127.0.0.1", "Address the workers listen on (this machine's).")
    command: tuple = setting((), "The command each worker runs (after --).", positional="rest")

    def errors(self) -> list:
        errors = super().errors()
        if self.workers < 1:
            errors.append(f"--workers={self.workers} must be at least 1")
        if not self.command:
            errors.append("no command: give it after --, e.g. -- python run_pretrain.py --strategy=multi_worker ...")
        return errors


def free_ports(host: str, count: int) -> list:
    """``count`` ports free on ``host`` now (each bound and released: another process could take one meanwhile)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(cluster: list, index: int) -> str:
    return json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})


def main(s: LaunchSettings) -> int:
    cluster = [f"{s.host}:{port}" for port in free_ports(s.host, s.workers)]
    procs, pumps = [], []
    for index in range(s.workers):
        command = [part.replace("{worker}", str(index)) for part in s.command]
        procs.append(subprocess.Popen(command, env=dict(os.environ, TF_CONFIG=tf_config(cluster, index)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1))
        pumps.append(threading.Thread(target=_pump, args=(procs[-1], f"[worker {index}] "), daemon=True))
        pumps[-1].start()

    def forward(signum, _frame):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    codes = [proc.wait() for proc in procs]
    for pump in pumps:
        pump.join(timeout=5)
    return next((code for code in codes if code), 0)


def _pump(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


if __name__ == "__main__":
    cli.run(LaunchSettings, main)
