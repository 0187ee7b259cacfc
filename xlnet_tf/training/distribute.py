"""Creating the tf.distribute strategy from the ``--strategy`` flag; everything else is strategy-agnostic."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.training.settings import STRATEGIES


def create_strategy(name: str, tpu: str | None = None) -> tf.distribute.Strategy:
    """``one_device`` (first GPU, else CPU), ``mirrored`` (all local GPUs, else the local CPUs/logical devices),
    ``multi_worker`` (``TF_CONFIG`` cluster), ``tpu`` (``tpu``: name, ``grpc://`` address or ``local``)."""
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
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
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
