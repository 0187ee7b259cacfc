"""Creating the tf.distribute strategy from the ``--strategy`` flag; everything else is strategy-agnostic."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from xlnet_tf.errors import TPUStartupError
from xlnet_tf.training.settings import STRATEGIES


def create_strategy(name: str, tpu: Optional[str] = None, *, tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None, tpu_timeout: float = 120) -> tf.distribute.Strategy:
    """``one_device`` (first GPU, else CPU), ``mirrored`` (all local GPUs, else the CPU devices: one, unless the
    program split it into logical devices, as the tests do), ``multi_worker`` (``TF_CONFIG`` cluster), ``tpu``
    (``connect_tpu``)."""
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
        return tf.distribute.MultiWorkerMirroredStrategy()
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
