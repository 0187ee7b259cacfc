"""The fine-tuning loop shared by run_classifier.py and run_squad.py: train, evaluate, predict under any strategy.

``FinetuneTask`` says what is task-specific (the model, its loss, how to turn model outputs into metrics); the
loop does the rest: warm start from a pretrained checkpoint (original TF1 or native), AdamW with warmup/decay
and layer-wise learning rates, global-norm clipping across replicas, ``iterations`` steps per ``tf.function``,
checkpoints with resume, TensorBoard summaries and progress lines.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf.checkpoint import load_pretrained
from xlnet_tf.flops import train_flops_per_sequence
from xlnet_tf.training.optimization import apply_gradients_across_replicas, create_optimizer
from xlnet_tf.training.loop import run_host_loops, worker_checkpoint_dir
from xlnet_tf.training.progress import ProgressReporter, device_peak_flops


@dataclasses.dataclass
class FinetuneSettings:
    model_dir: str
    train_steps: int = 1000
    per_replica_batch_size: int = 8
    seq_len: int = 128
    iterations: int = 100
    save_steps: Optional[int] = None
    max_save: int = 2
    learning_rate: float = 1e-5
    warmup_steps: int = 0
    decay_method: str = "poly"
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-8
    clip: float = 1.0
    lr_layer_decay_rate: float = 1.0
    init_checkpoint: Optional[str] = None

    def __post_init__(self):
        if self.save_steps is None or self.save_steps <= 0:
            self.save_steps = self.train_steps
        self.iterations = max(1, min(self.iterations, self.save_steps))


@dataclasses.dataclass
class FinetuneTask:
    """What differs between tasks.

    build_model: () -> keras model (created inside the strategy scope).
    loss_fn: (features, outputs) -> (sum of per-example losses, number of examples), per replica.
    """

    build_model: Callable
    loss_fn: Callable


def _checkpoint(model, optimizer, global_step):
    # Same layout as pretraining (model/xlnet/...), plus the head: a pretraining checkpoint restores the
    # network of any task model, and a fine-tuned checkpoint restores everything.
    return tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step)


def train(strategy: tf.distribute.Strategy, task: FinetuneTask, settings: FinetuneSettings,
          dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset]):
    """Fine-tunes and returns ``(model, metrics)``; resumes from ``model_dir`` if it holds a checkpoint.

    ``dataset_fn(input_context, start_step)`` returns per-replica training batches (shuffled, repeated).
    """
    s = settings
    with strategy.scope():
        model = task.build_model()
        optimizer = create_optimizer(model, s.learning_rate, s.train_steps, s.warmup_steps, s.decay_method,
                                     s.min_lr_ratio, s.weight_decay, s.adam_epsilon, s.lr_layer_decay_rate,
                                     loss_scale=model.dtype_policy.name == "mixed_float16")
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        checkpoint = _checkpoint(model, optimizer, global_step)
    checkpoint_dir, _ = worker_checkpoint_dir(strategy, s.model_dir)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=s.max_save or None,
                                         checkpoint_name="model")
    latest = tf.train.latest_checkpoint(s.model_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("resumed from %s at step %d", latest, int(global_step.numpy()))
    elif s.init_checkpoint:
        load_pretrained(model, s.init_checkpoint)
        logging.info("initialised the network from %s", s.init_checkpoint)
    else:
        logging.warning("no --init_checkpoint: fine-tuning from random weights")
    start_step = int(global_step.numpy())
    if start_step >= s.train_steps:
        return model, {"step": start_step}

    iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset_fn(ctx, start_step)))

    def replica_step(features):
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss_sum, count = task.loss_fn(features, outputs)
            global_count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
            loss = loss_sum / tf.maximum(global_count, 1.0)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        norm = apply_gradients_across_replicas(optimizer, grads, model.trainable_variables, s.clip)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, loss), norm

    @tf.function
    def host_loop(steps):
        loss_sum, norm = tf.constant(0.0), tf.constant(0.0)
        for _ in tf.range(steps):
            loss, norm = strategy.run(replica_step, args=(next(iterator),))
            loss_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
            norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
        global_step.assign_add(tf.cast(steps, tf.int64))
        return loss_sum / tf.cast(steps, tf.float32), norm

    c = model.config
    replicas = strategy.num_replicas_in_sync
    global_batch = s.per_replica_batch_size * replicas
    flops = global_batch * train_flops_per_sequence(c.n_layer, c.d_model, c.d_inner, s.seq_len, 0, 0, 0)
    peak, _ = device_peak_flops(strategy, model.compute_dtype)
    reporter = ProgressReporter(checkpoint_dir, s.train_steps, global_batch * s.seq_len, flops, peak * replicas,
                                start_step)
    metrics = run_host_loops(host_loop, start_step=start_step, train_steps=s.train_steps, iterations=s.iterations,
                             save_steps=s.save_steps, manager=manager, reporter=reporter, optimizer=optimizer)
    return model, metrics


def restore_for_inference(model, model_dir: str, checkpoint_path: Optional[str] = None) -> str:
    """Restores a fine-tuned model (weights only) from ``checkpoint_path`` or the latest in ``model_dir``."""
    path = checkpoint_path or tf.train.latest_checkpoint(model_dir)
    if not path:
        raise FileNotFoundError(f"{model_dir}: no fine-tuned checkpoint to evaluate or predict with")
    tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
    return path


def predict(strategy: tf.distribute.Strategy, model, dataset: tf.data.Dataset, keep: tuple[str, ...] = ()):
    """Runs ``model`` over ``dataset`` (global batches, finite) and returns numpy arrays, concatenated in order:
    the model's outputs plus the feature columns named in ``keep`` (e.g. example ids)."""
    dist = strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def step(features):
        def fn(f):
            outputs = dict(model(f, training=False))
            outputs.update({k: f[k] for k in keep})
            return outputs
        return strategy.run(fn, args=(features,))

    collected: dict[str, list] = {}
    for features in dist:
        outputs = step(features)
        for name, value in outputs.items():
            parts = strategy.experimental_local_results(value)
            collected.setdefault(name, []).extend(np.asarray(p) for p in parts)
    return {name: np.concatenate(parts) for name, parts in collected.items()}


def write_eval_summaries(model_dir: str, step: int, metrics: dict[str, float], name: str = "eval") -> None:
    writer = tf.summary.create_file_writer(os.path.join(model_dir, name))
    with writer.as_default(step=step):
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                tf.summary.scalar(key, value)
    writer.flush()
