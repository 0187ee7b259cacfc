"""The XLNet pretraining loop: permutation-LM loss, Transformer-XL memory carried between steps, any strategy.

Structure (what keeps TPUs busy and makes resuming exact):
* ``iterations`` steps run inside one ``tf.function`` (a "host loop"). The per-replica memory is loop state:
  zeros at the start of every host loop, then each step's ``new_mems`` feed the next step, like the original
  TPU trainer (whose TPUEstimator reset the cache every ``iterations`` steps).
* Checkpoints are written only at host-loop boundaries (a host loop is cut short to end on every multiple of
  ``save_steps``), where memory is zero anyway. A resumed run restores weights, optimizer state and the step, and its input pipeline
  starts at that step's data position: it continues exactly as the uninterrupted run would have.
* SIGTERM (preemption) finishes the current host loop, writes a checkpoint and returns; ``iterations`` bounds
  how long that takes. A non-finite loss stops the run with an error before anything is saved, so the last
  checkpoint on disk is the last good one.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from xlnet_tf.checkpoint import load_pretrained
from xlnet_tf.config import XLNetConfig
from xlnet_tf.flops import train_flops_per_sequence
from xlnet_tf.models.xlnet import XLNetPretrainer
from xlnet_tf.training.loop import run_host_loops, worker_checkpoint_dir
from xlnet_tf.training.losses import permutation_lm_loss
from xlnet_tf.training.optimization import apply_gradients_across_replicas, create_optimizer
from xlnet_tf.training.progress import ProgressReporter, device_peak_flops

MODEL_INPUTS = ("input_ids", "segment_ids", "perm_mask", "target_mapping")


@dataclasses.dataclass
class PretrainSettings:
    """Run settings of ``run_pretraining`` (the flags of run_pretrain.py)."""

    model_dir: str
    train_steps: int
    per_replica_batch_size: int
    seq_len: int
    num_predict: int
    iterations: int = 1000
    save_steps: Optional[int] = None
    max_save: int = 5
    learning_rate: float = 1e-4
    warmup_steps: int = 0
    decay_method: str = "poly"
    min_lr_ratio: float = 0.001
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-8
    clip: float = 1.0
    grad_accum_steps: int = 1
    dtype: str = "float32"
    jit_compile: bool = False
    init_checkpoint: Optional[str] = None

    def __post_init__(self):
        if self.save_steps is None or self.save_steps <= 0:
            self.save_steps = self.train_steps
        # Checkpoints fall on host-loop boundaries; the loop shortens to reach each save step exactly.
        self.iterations = max(1, min(self.iterations, self.save_steps))
        if self.grad_accum_steps < 1:
            raise ValueError(f"--grad_accum_steps must be >= 1, got {self.grad_accum_steps}")
        if self.dtype not in ("float32", "mixed_bfloat16", "mixed_float16"):
            raise ValueError(f"--dtype must be float32, mixed_bfloat16 or mixed_float16, got {self.dtype!r}")


def run_pretraining(strategy: tf.distribute.Strategy, model_config: XLNetConfig, settings: PretrainSettings,
                    dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset]) -> dict:
    """Trains an ``XLNetPretrainer`` and returns the last host loop's metrics (``step``, ``loss``, ...).

    ``dataset_fn(input_context, start_step)`` returns the per-replica batches of one input pipeline, positioned
    at ``start_step`` (a resumed run's data position), with ``MODEL_INPUTS`` plus ``target`` and
    ``target_mask``.
    """
    s = settings
    if model_config.mem_len and model_config.reuse_len is None:
        raise ValueError("mem_len > 0 needs reuse_len (the part of each segment that becomes memory)")
    with strategy.scope():
        model = XLNetPretrainer(model_config, dtype=s.dtype)
        optimizer = create_optimizer(model, s.learning_rate, s.train_steps, s.warmup_steps, s.decay_method,
                                     s.min_lr_ratio, s.weight_decay, s.adam_epsilon,
                                     loss_scale=s.dtype == "mixed_float16")
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(xlnet=model.xlnet, lm_bias=model.lm_bias),
                                         optimizer=optimizer, global_step=global_step)
    checkpoint_dir, _ = worker_checkpoint_dir(strategy, s.model_dir)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=s.max_save,
                                         checkpoint_name="xlnet_model")
    latest = tf.train.latest_checkpoint(s.model_dir)  # every worker resumes from the chief's checkpoint
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("resumed from %s at step %d", latest, int(global_step.numpy()))
    elif s.init_checkpoint:
        load_pretrained(model, s.init_checkpoint)
        logging.info("initialised from %s", s.init_checkpoint)
    start_step = int(global_step.numpy())
    if start_step >= s.train_steps:
        logging.info("already trained for %d steps (--train_steps=%d): nothing to do", start_step, s.train_steps)
        return {"step": start_step}

    dataset = strategy.distribute_datasets_from_function(lambda ctx: dataset_fn(ctx, start_step))
    iterator = iter(dataset)
    replicas = strategy.num_replicas_in_sync
    c = model_config
    zero_mems = zero_mems_fn(c, s.per_replica_batch_size, model.compute_dtype)

    replica_step = make_replica_step(model, optimizer, s.clip)
    if s.jit_compile:
        replica_step = tf.function(replica_step, jit_compile=True)

    @tf.function
    def host_loop(steps):
        mems = strategy.run(zero_mems)  # memory restarts at every host loop (see the module docstring)
        loss_sum = tf.constant(0.0)
        norm = tf.constant(0.0)
        for _ in tf.range(steps):
            batches = [next(iterator) for _ in range(s.grad_accum_steps)]
            mems, loss, norm = strategy.run(replica_step, args=(batches, mems))
            loss_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
            norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
        global_step.assign_add(tf.cast(steps, tf.int64))
        return loss_sum / tf.cast(steps, tf.float32), norm

    global_batch = s.per_replica_batch_size * replicas * s.grad_accum_steps
    flops = global_batch * train_flops_per_sequence(c.n_layer, c.d_model, c.d_inner, s.seq_len, c.mem_len,
                                                    s.num_predict, c.n_token, s.per_replica_batch_size, c.bi_data)
    peak, peak_source = device_peak_flops(strategy, model.compute_dtype)
    logging.info("training %d -> %d steps: %d replicas x batch %d x accum %d, seq %d, %s; MFU peak %.3g FLOP/s "
                 "per replica (%s)", start_step, s.train_steps, replicas, s.per_replica_batch_size,
                 s.grad_accum_steps, s.seq_len, s.dtype, peak, peak_source)
    reporter = ProgressReporter(checkpoint_dir, s.train_steps, global_batch * s.seq_len, flops, peak * replicas,
                                start_step)
    return run_host_loops(host_loop, start_step=start_step, train_steps=s.train_steps, iterations=s.iterations,
                          save_steps=s.save_steps, manager=manager, reporter=reporter, optimizer=optimizer)


def make_replica_step(model: XLNetPretrainer, optimizer, clip: float):
    """One optimizer step of one replica: ``step(batches, mems) -> (new_mems, loss, grad_norm)``.

    ``batches`` is a list of micro-batches (gradient accumulation; memory flows through them in order). The
    loss is the global-batch mean (normalised by the target count summed over replicas), so any replica split
    gives the same update. Call inside ``strategy.run``; also usable on its own for benchmarks.
    """
    use_memory = bool(model.config.mem_len)

    def replica_step(batches, mems):
        grads_total = None
        loss_total = tf.constant(0.0)
        context = tf.distribute.get_replica_context()
        for batch in batches:
            with tf.GradientTape() as tape:
                inputs = {k: batch[k] for k in MODEL_INPUTS}
                if use_memory:
                    inputs["mems"] = mems
                outputs = model(inputs, training=True)
                loss_sum, count = permutation_lm_loss(outputs["lm_logits"], batch["target"], batch["target_mask"])
                global_count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
                # Each replica's share of the global-batch mean: the all-reduced gradients are those of the mean.
                loss = loss_sum / tf.maximum(global_count, 1.0) / len(batches)
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            grads_total = grads if grads_total is None else [a + b for a, b in zip(grads_total, grads)]
            loss_total += context.all_reduce(tf.distribute.ReduceOp.SUM, loss)
            if use_memory:
                mems = outputs["new_mems"]
        norm = apply_gradients_across_replicas(optimizer, grads_total, model.trainable_variables, clip)
        return mems, loss_total, norm

    return replica_step


def zero_mems_fn(config: XLNetConfig, batch_size: int, dtype: str):
    def zero_mems():
        # Without memory, a scalar placeholder keeps the loop state's structure fixed.
        if not config.mem_len:
            return tf.zeros([], dtype)
        return [tf.zeros([batch_size, config.mem_len, config.d_model], dtype) for _ in range(config.n_layer)]
    return zero_mems
