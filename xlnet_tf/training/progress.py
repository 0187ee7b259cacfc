"""Progress reporting for long jobs: steps, loss, learning rate, tokens/s, model-FLOPs utilisation, ETA, and the
same numbers as TensorBoard scalars."""

from __future__ import annotations

import os
import time

import tensorflow as tf
from absl import logging
from tensorflow.core.util import event_pb2

from xlnet_tf.progress_lines import format_duration

# Dense peak FLOP/s per device for MFU (bf16/fp16 tensor peak for mixed precision; TF32 / FP32 otherwise).
_ACCELERATOR_PEAKS = {  # name fragment: (half precision, float32 path)
    "H100": (989.4e12, 494.7e12), "H200": (989.4e12, 494.7e12), "A100": (312e12, 156e12),
    "V100": (125e12, 15.7e12), "L4": (121e12, 60e12), "A10": (125e12, 62.5e12), "T4": (65e12, 8.1e12),
}
_TPU_PEAKS = {"v2": 45e12 / 2, "v3": 123e12 / 2, "v4": 275e12 / 2, "v5 lite": 197e12, "v5e": 197e12,
              "v5p": 459e12 / 2, "v6": 918e12}  # per replica (TensorCore)


_cpu_peak_cache: dict[str, float] = {}


def measure_matmul_peak(dtype: str = "float32", size: int = 2048, seconds: float = 0.3) -> float:
    """Achievable matmul FLOP/s on this host's CPU in ``dtype``: the MFU denominator where no published peak
    applies (measured, not a datasheet figure). The fastest of the matmuls run in ``seconds``: a busy moment
    (another process, a data pipeline starting) slows some of them, and an average would make MFU exceed 100%.
    Every CPU run pays ``seconds`` at its start: 0.3 s holds 8 float32 matmuls of 2048 on 2 cores (AMD EPYC), and
    their fastest was within 1% of a 1-s measurement's."""
    if dtype in _cpu_peak_cache:
        return _cpu_peak_cache[dtype]
    with tf.device("/cpu:0"):
        a = tf.random.normal([size, size], dtype=tf.float32)
        a = tf.cast(a, dtype)
        matmul = tf.function(lambda x: tf.linalg.matmul(x, x))
        matmul(a).numpy()
        fastest, start = float("inf"), time.perf_counter()
        while time.perf_counter() - start < seconds:
            began = time.perf_counter()
            matmul(a).numpy()
            fastest = min(fastest, time.perf_counter() - began)
        peak = 2 * size ** 3 / fastest
    _cpu_peak_cache[dtype] = peak
    return peak


def device_peak_flops(strategy: tf.distribute.Strategy, compute_dtype: str) -> tuple[float, str]:
    """Peak FLOP/s of one replica for ``compute_dtype`` and where the figure comes from."""
    half = compute_dtype in ("bfloat16", "float16")
    tpus = tf.config.list_logical_devices("TPU")
    if tpus:
        kind = ""
        try:
            kind = tf.config.experimental.get_device_details(tf.config.list_physical_devices("TPU")[0]).get(
                "device_kind", "")
        except Exception:  # noqa: BLE001 - details are best effort
            pass
        for fragment, peak in _TPU_PEAKS.items():
            if fragment in kind.lower():
                return peak, f"TPU {kind} datasheet"
        return _TPU_PEAKS["v3"], "TPU (assumed v3)"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
        for fragment, (half_peak, fp32_peak) in _ACCELERATOR_PEAKS.items():
            if fragment in name:
                return (half_peak if half else fp32_peak), f"{name} datasheet"
        return 0.0, f"{name} (unknown peak)"
    # The CPU replicas of one host share its cores: its measured peak is divided among them (not among all the
    # workers' replicas: each worker is a host of its own).
    from xlnet_tf.training.distribute import num_hosts

    local_replicas = max(strategy.num_replicas_in_sync // num_hosts(strategy), 1)
    return measure_matmul_peak(compute_dtype) / local_replicas, "measured CPU matmul"


class ProgressReporter:
    """Logs one line per host loop and writes TensorBoard scalars to ``<model_dir>/train``.

    The first report of a run (or of a resumed run) covers tracing and compilation: it gives its time, not a rate,
    an MFU or an ETA. Later lines give the rate of their own host loop (``restart_clock()`` leaves out what ran
    between loops, e.g. a checkpoint's save), and an ETA from the mean wall-clock step time since that first report.
    ``peak_flops`` is the whole job's (every replica of every worker); a measured peak (``peak_measured``, CPUs) is
    raised to the achieved rate if a loop ever beats it, with a warning.

    Every run starts its summaries with a restart marker (``SessionLog.START`` at ``start_step + 1``): TensorBoard
    then drops what a killed run wrote after the checkpoint this run resumed from, rather than showing those steps
    twice with diverging values."""

    def __init__(self, model_dir: str, total_steps: int, tokens_per_step: int, flops_per_step: float,
                 peak_flops: float, start_step: int = 0, *, peak_measured: bool = False):
        self.total_steps, self.tokens_per_step = total_steps, tokens_per_step
        self.flops_per_step, self.peak_flops, self.peak_measured = flops_per_step, peak_flops, peak_measured
        self.writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
        self._write_restart_marker(start_step + 1)
        self._last_time, self._last_step = time.perf_counter(), start_step
        self._steady_since = None  # (time, step) of the first report

    def _write_restart_marker(self, first_step: int):
        # TensorBoard's Python loader (tensorboard --load_fast=false, EventMultiplexer) purges orphaned points of a
        # TF2 event file only at a SessionLog.START, every point with a step >= the marker's, and takes the first
        # START it reads as the run's beginning rather than a restart: so every run writes one, fresh runs too.
        # At start_step + 1, not start_step: the killed run's point at the checkpoint's own step is this run's
        # history (it is never written again). The Rust data server drops them anyway, on the step going back.
        # tf.summary has no call for a raw Event; import_event writes one into this writer's file, before any of
        # this run's summaries (a second events file could sort either side of the writer's by name).
        from tensorflow.python.ops import summary_ops_v2

        marker = event_pb2.Event(wall_time=time.time(), step=first_step,
                                 session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
        with self.writer.as_default():
            summary_ops_v2.import_event(tf.constant(marker.SerializeToString()))
        self.writer.flush()

    def restart_clock(self):
        """The next report's rate counts from now: what ran since the last report (a checkpoint's save) is no
        part of the host loop's speed. The ETA still counts it: more saves are ahead."""
        self._last_time = time.perf_counter()

    def report(self, step: int, scalars: dict[str, float]) -> dict[str, float]:
        now = time.perf_counter()
        seconds = now - self._last_time
        seconds_per_step = seconds / max(step - self._last_step, 1)
        self._last_time, self._last_step = now, step
        scalars = dict(scalars)
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{k} {v:.4g}" for k, v in scalars.items()]
        if self._steady_since is None:
            self._steady_since = (now, step)
            parts.append(f"first {format_duration(seconds)} incl. tracing and compiling")
        else:
            scalars["tokens_per_sec"] = self.tokens_per_step / seconds_per_step
            scalars["steps_per_sec"] = 1.0 / seconds_per_step
            parts.append(f"{scalars['tokens_per_sec']:.0f} tok/s")
            if self.peak_flops > 0:
                achieved = self.flops_per_step / seconds_per_step
                if achieved > self.peak_flops and self.peak_measured:
                    logging.warning("achieved %.3g FLOP/s, above the measured peak %.3g: MFU is against the "
                                    "achieved rate from now on", achieved, self.peak_flops)
                    self.peak_flops = achieved
                scalars["mfu"] = achieved / self.peak_flops
                # Its own series: a measured CPU peak is a momentary figure, raised mid-run when beaten, so the mfu
                # series changes denominator; mfu * peak_flops (the achieved FLOP/s) re-normalises it to any peak.
                scalars["peak_flops"] = self.peak_flops
                parts.append(f"MFU {100 * scalars['mfu']:.1f}%")
            # The rate and MFU are the host loop's own (the model's speed, comparable across lines), while the ETA
            # is wall-clock time left, so it divides the time since the first report, saves included.
            since, since_step = self._steady_since
            left = (self.total_steps - step) * (now - since) / max(step - since_step, 1)
            parts.append(f"ETA {format_duration(left)}")
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self.writer.flush()
        logging.info("%s", " | ".join(parts))
        return scalars
