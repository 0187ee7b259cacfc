"""What XLA (``--jit_compile``) can compile where: checked right after the strategy starts, before any work."""

from __future__ import annotations

import tensorflow as tf


def check_jit_compile(strategy: tf.distribute.Strategy, jit_compile: bool) -> None:
    """``--jit_compile`` with several CPU replicas in one process is refused (a ``SettingsError``): TensorFlow
    places an XLA-compiled step of the second CPU device's replica on the first one, which cannot reach that
    replica's variables (XLA's known issue "tf.Variable on a different device"). GPU and TPU replicas, and one CPU
    replica per worker, compile."""
    from xlnet_tf.training.settings import SettingsError

    devices = strategy.extended.worker_devices
    if jit_compile and len(devices) > 1 and any("CPU" in tf.DeviceSpec.from_string(d).device_type.upper()
                                                for d in devices):
        raise SettingsError(f"--jit_compile with --strategy=mirrored over {len(devices)} CPU devices: XLA cannot run "
                            "a replica's step on another CPU device's variables; use one CPU replica per process "
                            "(--strategy=one_device or multi_worker) or leave out --jit_compile")
