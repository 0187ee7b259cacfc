"""The host-loop driver shared by pretraining and fine-tuning: checkpoints, preemption, NaN stop, progress."""

from __future__ import annotations

import math
import os
import signal

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf.errors import DivergedError


class _StopSignals:
    """SIGTERM (a preemption) and SIGINT (Ctrl-C) turned into a request to stop, checked between host loops: the run
    saves a checkpoint there and returns. Python runs a signal's handler once the host loop in progress returns
    (TensorFlow holds the main thread until then), so more signals add nothing (a terminal's Ctrl-C reaches a
    launcher's workers twice, directly and forwarded); SIGKILL stops at once, without a checkpoint. SIGINT is taken
    only where Python's own handler has it (an ignored SIGINT stays ignored). The previous handlers are restored on
    exit."""

    def __init__(self):
        self.received = None  # the first signal's number
        self._previous = {}

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signum == signal.SIGINT and signal.getsignal(signum) is not signal.default_int_handler:
                continue
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: stopping is the caller's business
                break
        return self

    def _handle(self, signum, frame):
        del frame
        if self.received is None:
            self.received = signum
            logging.warning("%s: checkpointing after the current host loop, then stopping",
                            "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name)

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def run_host_loops(host_loop, *, initial_state, start_step: int, train_steps: int, iterations: int,
                   save_steps: int, manager: tf.train.CheckpointManager, reporter, optimizer,
                   agree=None, carry_state=lambda state: state) -> dict:
    """Runs ``host_loop(steps, state) -> (state, mean loss, grad norm, {name: metric})`` until ``train_steps``
    (the grad norm: the last step's, or without loss scaling a non-finite one of any step; the metrics are
    reported with the loss), in host loops of
    at most ``iterations`` steps that end on every multiple of ``save_steps``, where a checkpoint is written.
    ``state`` (the pretraining memory) starts as ``initial_state()`` at every host loop.

    The first host loop of a run reports after its first step too (split into 1 + the rest, the state carried over
    as ``carry_state(state)``), so the starting loss is seen at once. SIGTERM or SIGINT finishes the current host
    loop, checkpoints and returns (``preempted``: True; ``stopped_by``: the signal's name, or ``another worker``);
    ``agree(requested)`` (None: one process) makes that decision common to every worker of a multi-worker job (any
    worker's signal stops all of them at the same step, each saving). A non-finite loss, or without loss scaling a
    non-finite gradient norm (its update made the weights NaN), raises ``DivergedError`` before anything is saved,
    so the last checkpoint is the last good one. With loss scaling, a step whose gradient is not finite is skipped
    (the weights and the schedule stay) and counted: ``skipped_steps``, since the run began. Returns the last
    report's metrics.
    """
    metrics = {"step": start_step}
    step = start_step
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def run(steps, state):
        nonlocal metrics, step
        state, loss, norm, more = host_loop(tf.constant(steps), state)
        step += steps
        loss, norm = float(loss.numpy()), float(norm.numpy())
        diverged = None
        if not math.isfinite(loss):
            diverged = f"loss is {loss}"
        elif not (loss_scaled or math.isfinite(norm)):
            diverged = f"gradient norm is {norm} (the loss is finite)"
        if diverged:
            raise DivergedError(
                f"{diverged} in the steps up to {step}; stopping without saving. The last good checkpoint "
                f"is {manager.latest_checkpoint or '(none yet)'}; lower --learning_rate or check the data.")
        # The optimizer counts the steps it applied (not the skipped ones), and its schedule follows that count.
        applied = int(optimizer.iterations.numpy())
        scalars = {"loss": loss, **{k: float(v.numpy()) for k, v in more.items()},
                   # The rate of the last step applied (the optimizer reads its schedule before counting the step);
                   # with none applied yet, the one the first will take.
                   "learning_rate": learning_rate_at(optimizer, max(applied - 1, 0)), "grad_norm": norm}
        if loss_scaled:
            scalars["skipped_steps"] = step - applied
        metrics = dict(step=step, **reporter.report(step, scalars))
        return state

    with _StopSignals() as stop:
        while step < train_steps:
            next_save = (step // save_steps + 1) * save_steps
            steps = min(iterations, next_save - step, train_steps - step)
            state = initial_state()
            if step == start_step and steps > 1:
                state = carry_state(run(1, state))
                steps -= 1
            run(steps, state)
            requested = stop.received is not None
            preempted = agree(requested) if agree else requested
            if step % save_steps == 0 or step == train_steps or preempted:
                logging.info("saved %s", manager.save(checkpoint_number=step))
                reporter.restart_clock()
            if preempted:
                by = signal.Signals(stop.received).name if stop.received else "another worker"
                logging.warning("stopped by %s at step %d of %d; rerun the same command%s to resume", by, step,
                                train_steps, " on every worker" if agree else "")
                metrics.update(preempted=True, stopped_by=by)
                break
    return metrics


def worker_checkpoint_dir(strategy: tf.distribute.Strategy, model_dir: str) -> tuple[str, bool]:
    """Where this worker writes checkpoints and summaries: ``model_dir`` for the chief; a private subdirectory
    for the other workers of a multi-worker job (they must take part in saving, but not overwrite the chief)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is None or not task_type:
        return model_dir, True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    chief = task_type == "chief" or (task_type == "worker" and resolver.task_id == 0 and not has_chief)
    return (model_dir, True) if chief else (os.path.join(model_dir, f".worker-{resolver.task_id}"), False)


def learning_rate_at(optimizer, step: int) -> float:
    schedule = getattr(optimizer, "inner_optimizer", optimizer)._learning_rate
    return float(schedule(np.int64(step))) if callable(schedule) else float(schedule)
