"""Creating the tf.distribute strategy from the ``--strategy`` flag; everything else is strategy-agnostic."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from xlnet_tf.errors import InputError, TPUStartupError
from xlnet_tf.training.settings import STRATEGIES


def create_strategy(name: str, tpu: Optional[str] = None, *, tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None, tpu_timeout: float = 120,
                    worker_timeout: float = 600) -> tf.distribute.Strategy:
    """``one_device`` (first GPU, else CPU), ``mirrored`` (all local GPUs, else the CPU devices: one, unless the
    program split it into logical devices, as the tests do), ``multi_worker`` (``TF_CONFIG`` cluster, checked
    first: ``check_tf_config``; formed within ``worker_timeout`` seconds: ``form_cluster``), ``tpu``
    (``connect_tpu``)."""
    task = check_tf_config(name, os.environ.get("TF_CONFIG"))
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([d.name for d in gpus])
        # CPU replicas: reduce through one device. The default collective implementation occasionally pairs
        # different all-reduces of two CPU replicas ("Shape mismatch in the collective instance").
        return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    if name == "multi_worker":
        return form_cluster(task, worker_timeout)
    if name == "tpu":
        return connect_tpu(tpu or "", zone=tpu_zone, project=gcp_project, timeout=tpu_timeout)
    raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}")


def num_hosts(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines (hosts/workers) of ``strategy``: each reads its own share of the data."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


# What TF_CONFIG looks like, for the messages about a malformed one.
TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host0:port", "host1:port"]}, "task": {"type": "worker", "index": I}} '
                     '(a "chief": ["host:port"] job optional)')
COORDINATED_JOBS = ("chief", "worker")  # what this stack's multi_worker runs (no ps, no evaluator)


@dataclasses.dataclass(frozen=True)
class ClusterTask:
    """This process's place in TF_CONFIG's cluster (``cluster``: ``{job: [address, ...]}``, checked)."""
    cluster: dict
    type: str
    index: int

    def name(self, job: Optional[str] = None, index: Optional[int] = None) -> str:
        """``worker 1 (host:port)``: this task, or another one of the cluster."""
        job, index = (self.type, self.index) if job is None else (job, index)
        return f"{job} {index} ({self.cluster[job][index]})"

    def leader(self) -> tuple:
        """The task every other registers with: TensorFlow's coordination leader (the chief, else worker 0)."""
        return ("chief", 0) if "chief" in self.cluster else ("worker", 0)


def check_tf_config(strategy: str, text: Optional[str]) -> Optional[ClusterTask]:
    """This process's task in ``TF_CONFIG`` (``text``) for ``--strategy=multi_worker``, or None without a cluster (one
    worker, as TensorFlow runs it); else an ``InputError`` naming TF_CONFIG and what is wrong. TensorFlow's own
    errors are a JSONDecodeError, ValueError or KeyError traceback from inside the strategy. The other strategies
    do not read TF_CONFIG, so a cluster of several tasks is refused there: each process would train alone, into the
    same --model_dir."""
    if not (text or "").strip():
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        if strategy != "multi_worker":
            return None
        raise InputError(f"TF_CONFIG is not JSON ({error.msg}, character {error.pos} of {text[:60]!r}): expected "
                         f"{TF_CONFIG_EXAMPLE}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if strategy != "multi_worker":
        tasks = sum(len(a) for a in cluster.values() if isinstance(a, list)) if isinstance(cluster, dict) else 0
        if tasks > 1 and strategy in ("one_device", "mirrored"):
            raise InputError(f"TF_CONFIG names a {tasks}-task cluster but --strategy={strategy}: use "
                             "--strategy=multi_worker (or unset TF_CONFIG)")
        return None
    if not isinstance(config, dict) or not isinstance(cluster, (dict, type(None))):
        raise InputError(f"TF_CONFIG: expected {TF_CONFIG_EXAMPLE}, got {text[:100]!r}")
    if not cluster:
        return None
    owner = {}
    for job, addresses in cluster.items():
        if job not in COORDINATED_JOBS:
            raise InputError(f"TF_CONFIG's cluster has a {job!r} job: this stack's --strategy=multi_worker runs "
                             "workers (and a chief) only")
        if not isinstance(addresses, list) or not addresses or not all(map(_is_address, addresses)):
            raise InputError(f"TF_CONFIG's cluster {job!r}: expected a list of 'host:port' addresses, got "
                             f"{json.dumps(addresses)[:100]}")
        for index, address in enumerate(addresses):
            if address in owner:
                raise InputError(f"TF_CONFIG's cluster gives {address} to {owner[address]} and {job} {index}: each "
                                 "task needs its own address")
            owner[address] = f"{job} {index}"
    if len(cluster.get("chief", [])) > 1:
        raise InputError(f"TF_CONFIG's cluster names {len(cluster['chief'])} chiefs: at most one (the other tasks "
                         "are workers)")
    task = config.get("task")
    job = task.get("type") if isinstance(task, dict) else None
    if job is None:
        raise InputError('TF_CONFIG has a cluster but no task: add "task": {"type": "worker", "index": I}, this '
                         "process's place in the cluster")
    if job not in COORDINATED_JOBS:
        raise InputError(f"TF_CONFIG's task type {job!r}: this stack's --strategy=multi_worker runs workers (and a "
                         "chief) only; give each process \"type\": \"worker\" (or \"chief\")")
    if job not in cluster:
        raise InputError(f"TF_CONFIG's task is {job} {task.get('index')}, but its cluster has no {job!r} job")
    index, count = task.get("index"), len(cluster[job])
    if isinstance(index, str) and index.isdigit():  # TensorFlow reads int(index)
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise InputError(f"TF_CONFIG's task index {json.dumps(index)}: its cluster has {count} {job} "
                         f"address{'es' if count > 1 else ''} (index 0 to {count - 1})")
    return ClusterTask(cluster, job, index)


def _is_address(address) -> bool:
    """``host:port`` (``[v6]:port``), the port within 1..65535."""
    match = isinstance(address, str) and re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/]+):(\d{1,5})", address)
    return bool(match) and 0 < int(match.group(2)) < 65536


def form_cluster(task: Optional[ClusterTask], timeout: float = 600) -> tf.distribute.MultiWorkerMirroredStrategy:
    """The ``MultiWorkerMirroredStrategy`` of ``task``'s cluster (``check_tf_config``), or an ``InputError``
    naming this task, and the tasks it waited for, when the cluster has not formed within ``timeout`` seconds.

    Left alone, TensorFlow waits for a task that never starts (or died before the cluster formed) for ever without
    a word, and its preemption notifier swallows SIGTERM. Its coordination service can bound the registration:
    with ``cluster_register_with_barrier`` (no argument of ``configure_coordination_service``, so it is set on the
    config that call leaves; the strategy keeps a configured service) the leader fails every waiting task's
    registration when the time is up, naming the missing ones, and a task that cannot reach the leader fails
    after the same time. This task's port is checked before: gRPC's error says only "Could not start gRPC
    server"."""
    if task is None:
        return tf.distribute.MultiWorkerMirroredStrategy()
    _check_port_free(task)
    from tensorflow.python.eager import context  # the coordination service's settings are not in the public API

    tasks = sum(len(task.cluster[job]) for job in task.cluster)
    if context.context().coordination_service is None:  # one the program configured stands
        leader, _ = task.leader()
        context.context().configure_coordination_service(
            service_type="standalone", service_leader=f"/job:{leader}/replica:0/task:0",
            cluster_register_timeout_in_ms=int(timeout * 1000))
        config = context.context().coordination_service
        config.cluster_register_with_barrier = True
        for job in COORDINATED_JOBS:
            if job in task.cluster:
                config.coordinated_job_list.add(name=job, num_tasks=len(task.cluster[job]))
    logging.info("TF_CONFIG %s: waiting up to %d s (--worker_timeout) for the %d tasks of the cluster", task.name(),
                 timeout, tasks)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except tf.errors.DeadlineExceededError as error:
        raise InputError(_not_formed_message(task, timeout, error)) from None
    except tf.errors.UnknownError as error:
        if "Could not start gRPC server" not in str(error):
            raise
        raise InputError(f"TF_CONFIG {task.name()}: cannot listen at this address ({_first_line(error)}): check "
                         "that its host is this machine and its port free") from None


def _not_formed_message(task: ClusterTask, timeout: float, error: tf.errors.OpError) -> str:
    """The leader's error names the tasks that did not register ("Some timed out task names: /job:worker/..."); a
    task that could not register with the leader knows only that."""
    listed = re.search(r"timed out task names:\s*((?:/job:\S+\s*)+)", error.message or str(error))
    missing = sorted({(job, int(index)) for job, index in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)",
                                                                     listed.group(1) if listed else "")})
    missing = [task.name(job, index) for job, index in missing
               if job in task.cluster and index < len(task.cluster[job])]
    if missing:
        waiting = ", ".join(missing)
    elif (task.type, task.index) == task.leader():
        waiting = "the other tasks"
    else:
        waiting = f"{task.name(*task.leader())}, the leader every task registers with"
    return (f"TF_CONFIG {task.name()}: the cluster did not form within {timeout:g} s (--worker_timeout): no word "
            f"from {waiting}. Check that every task was started with the same TF_CONFIG cluster and its own task, "
            "and that this machine reaches their addresses (host, port, firewall)")


def _check_port_free(task: ClusterTask) -> None:
    """An ``InputError`` if this task's port is taken on this machine (gRPC listens on every interface)."""
    host, port = task.cluster[task.type][task.index].rsplit(":", 1)
    with socket.socket(socket.AF_INET6 if host.startswith("[") else socket.AF_INET) as probe:
        # SO_REUSEADDR, as gRPC's: a port an earlier run left in TIME_WAIT is free to it, a listening one is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", int(port)))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return  # (gRPC's own error, mapped in form_cluster)
            raise InputError(f"TF_CONFIG {task.name()}: port {port} is in use on this machine (another process "
                             f"listens there, an earlier run still alive? `ss -ltnp 'sport = :{port}'`): stop it or "
                             "give this task another port") from None


def connect_tpu(tpu: str, *, zone: Optional[str] = None, project: Optional[str] = None,
                timeout: float = 120) -> tf.distribute.TPUStrategy:
    """The ``TPUStrategy`` of ``tpu`` (a Cloud TPU name, ``grpc://HOST:PORT`` or ``local``), or a
    ``TPUStartupError`` within ``timeout`` seconds that says which step failed and what to check.

    TensorFlow's own calls wait without a word: a name is looked up through the VM's metadata server, and gRPC
    retries an address where nothing listens (or something that is not a TPU server) for ever. So the steps are
    bounded one by one: the lookup and the TPU's initialisation run in a daemon thread given the time left (a
    thread still blocked when the time is up is abandoned: the command-line tools end the process), and a
    ``grpc://`` address is probed with a plain TCP connection first, which tells "nothing listens" apart from
    "no answer"."""
    deadline = time.monotonic() + timeout
    flag = f"--tpu={tpu}"
    logging.info("connecting to the TPU %s (up to %d s, --tpu_timeout)", tpu, timeout)

    def lookup():
        return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu, zone=zone, project=project)

    try:
        resolver = _bounded(lookup, deadline, f"{flag}: looking the TPU up took over {timeout:g} s (--tpu_timeout): "
                            "the metadata server or the Cloud TPU API does not answer; give the TPU's address, "
                            "--tpu=grpc://HOST:8470")
    except TPUStartupError:
        raise
    except Exception as error:  # urllib's URLError without a metadata server, the API's HttpError, ValueError
        raise TPUStartupError(
            f"{flag}: cannot look up this TPU ({_first_line(error)}). Outside Google Cloud give its address, "
            "--tpu=grpc://HOST:8470; on a Cloud VM check the name, --tpu_zone and --gcp_project "
            "(`gcloud compute tpus list --zone=ZONE`)") from None
    master = resolver.master() or ""
    if master.startswith("grpc://"):
        _probe(flag, master, deadline)

    def initialise():
        tf.config.experimental_connect_to_cluster(resolver)
        return tf.tpu.experimental.initialize_tpu_system(resolver)

    where = f" at {master[len('grpc://'):]}" if master else ""
    try:
        _bounded(initialise, deadline,
                 f"{flag}: the TPU{where} did not initialise within {timeout:g} s (--tpu_timeout): check that it is "
                 "a TPU server, healthy (`gcloud compute tpus describe`), not held by another job, and runs this "
                 f"TensorFlow version ({tf.__version__})")
    except tf.errors.OpError as error:
        hint = ("this machine has no TPU chips: run on a TPU VM, or give a TPU's name or address" if tpu == "local"
                else "check the TPU's health and TensorFlow version")
        raise TPUStartupError(f"{flag}: initialising the TPU failed ({_first_line(error)}): {hint}") from None
    devices = tf.config.list_logical_devices("TPU")
    if not devices:
        raise TPUStartupError(f"{flag}: connected{where}, but no TPU devices are visible: check that the address is "
                              "the TPU's, not another server's")
    logging.info("TPU ready: %d cores in %.1f s", len(devices), timeout - (deadline - time.monotonic()))
    return tf.distribute.TPUStrategy(resolver)


def _bounded(fn: Callable, deadline: float, timeout_message: str):
    """``fn()`` in a daemon thread, waited for until ``deadline`` (``time.monotonic``); its exception is raised
    here, and ``TPUStartupError(timeout_message)`` if it is still running then."""
    result = {}

    def work():
        try:
            result["value"] = fn()
        except BaseException as error:  # handed to the caller's thread
            result["error"] = error

    thread = threading.Thread(target=work, name="tpu-startup", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise TPUStartupError(timeout_message)
    if "error" in result:
        raise result["error"]
    return result.get("value")


def _probe(flag: str, master: str, deadline: float) -> None:
    """A TCP connection to ``master``'s host and port (closed at once), or a ``TPUStartupError`` saying why not."""
    address = urllib.parse.urlsplit(master)
    host, port = address.hostname, address.port or 8470
    try:
        with socket.create_connection((host, port), timeout=max(0.1, min(10.0, deadline - time.monotonic()))):
            pass
    except ConnectionRefusedError:
        raise TPUStartupError(f"{flag}: nothing listens at {host}:{port}: check the address and that the TPU is "
                              "up (`gcloud compute tpus list`)") from None
    except socket.gaierror as error:
        raise TPUStartupError(f"{flag}: unknown host {host!r} ({error.strerror})") from None
    except OSError as error:  # timeout, no route
        raise TPUStartupError(f"{flag}: {host}:{port} does not answer ({error.strerror or 'timed out'}): check the "
                              "network path (firewall, VPC) from this machine to the TPU") from None


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "message", None) or error).strip()
    return (text.splitlines() or [type(error).__name__])[0][:300]
