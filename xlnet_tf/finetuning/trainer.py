"""The fine-tuning loop shared by run_classifier.py and run_squad.py: train, evaluate, predict under any strategy.

``ModelAndLoss`` is what it takes of a task (the model builder, the loss, the head's labels); the loop does the
rest: warm start from a pretrained checkpoint (original TF1 or native), AdamW with warmup/decay
and layer-wise learning rates, global-norm clipping across replicas, ``iterations`` steps per ``tf.function``,
checkpoints with resume, TensorBoard summaries and progress lines.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from xlnet_tf.flops import finetune_flops_per_sequence
from xlnet_tf.training.xla import check_jit_compile
from xlnet_tf.training.optimization import apply_gradients_across_replicas
from xlnet_tf.training.settings import FinetuneSettings
from xlnet_tf.training.setup import keep_data_order, setup_training, update_settings


@dataclasses.dataclass
class ModelAndLoss:
    """What the loop takes of a ``tasks.base.Task`` (the runner builds it from one).

    build_model: () -> keras model (created inside the strategy scope).
    loss_fn: (features, outputs) -> (sum of per-example losses, number of examples), per replica.
    labels: the head's classes in order (classification, tagging), which an HF --init_checkpoint's head must name
    for it to be kept (``checkpoint.warm_start``); None where the task has none.
    sequences_per_example: the network's sequences in one example (RACE: one per option), for tokens/s and MFU.
    """

    build_model: Callable
    loss_fn: Callable
    labels: Optional[list] = None
    sequences_per_example: int = 1


def train(strategy: tf.distribute.Strategy, model_and_loss: ModelAndLoss, settings: FinetuneSettings,
          dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset]):
    """Fine-tunes and returns ``(model, metrics)``; resumes from ``model_dir`` if it holds a checkpoint.

    ``dataset_fn(input_context, start_step)`` returns per-replica training batches (shuffled, repeated) of
    ``settings.train_batch_size // replicas`` sequences of ``settings.max_seq_length``.
    """
    s = settings
    check_jit_compile(strategy, s.jit_compile)
    # Same layout as pretraining (model/xlnet/...), plus the head: a pretraining checkpoint restores the
    # network of any task model, and a fine-tuned checkpoint restores everything.
    training = setup_training(strategy, s, model_and_loss.build_model, checkpoint_name="model",
                              lr_layer_decay_rate=s.lr_layer_decay_rate, warn_from_scratch=True,
                              labels=model_and_loss.labels)
    model, optimizer = training.model, training.optimizer
    if training.finished():
        return model, {"step": training.start_step}
    keep_data_order(training, data_order(s, strategy))

    replica_step = make_replica_step(model, optimizer, model_and_loss.loss_fn, s.clip)
    if s.jit_compile:  # XLA: traced inside, the layers take their plain definitions (xlnet_tf.kernels)
        replica_step = tf.function(replica_step, jit_compile=True, autograph=False)  # (see Training.train)

    n = model_and_loss.sequences_per_example
    flops = n * finetune_flops_per_sequence(model.config, s.max_seq_length,
                                            n * s.train_batch_size // strategy.num_replicas_in_sync,
                                            getattr(model, "last_layer_rows", None))
    return model, training.train(replica_step, dataset_fn, global_batch=s.train_batch_size,
                                 seq_len=n * s.max_seq_length, flops_per_sequence=flops)


def data_order(settings: FinetuneSettings, strategy: tf.distribute.Strategy) -> dict:
    """The flags that decide which training batch a step takes (with the step itself, the data position): the
    order of ``shuffled_epochs`` and the records per step of each input pipeline (``check_data_order``); with them,
    those of the update a resume repeats (``setup.UPDATE_SETTINGS``)."""
    from xlnet_tf.training.distribute import num_hosts

    return {"seed": settings.seed, "shuffle_buffer": settings.shuffle_buffer,
            "train_batch_size": settings.train_batch_size, "input_pipelines": num_hosts(strategy),
            **update_settings(settings)}


def make_replica_step(model, optimizer, loss_fn: Callable, clip: float):
    """One optimizer step of one replica: ``step(features, state) -> (state, loss, grad_norm)``, the loss the
    global-batch mean of ``loss_fn(features, outputs)`` (sum, count). Call inside ``strategy.run``."""

    def replica_step(features, state):
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss_sum, count = loss_fn(features, outputs)
            global_count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
            loss = loss_sum / tf.maximum(global_count, 1.0)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        norm = apply_gradients_across_replicas(optimizer, grads, model.trainable_variables, clip)
        return state, context.all_reduce(tf.distribute.ReduceOp.SUM, loss), norm

    return replica_step


def make_predict_step(model, keep: tuple[str, ...] = (), jit_compile: bool = False):
    """The model in inference mode on one replica's batch: its outputs plus the feature columns ``keep``."""

    def fn(features):
        outputs = dict(model(features, training=False))
        outputs.update({k: features[k] for k in keep})
        return outputs
    return tf.function(fn, jit_compile=True, autograph=False) if jit_compile else fn


def predict(strategy: tf.distribute.Strategy, model, dataset: tf.data.Dataset, keep: tuple[str, ...] = (),
            jit_compile: bool = False):
    """Runs ``model`` over ``dataset`` (global batches, finite; whole batches for static shapes) and returns numpy
    arrays, concatenated in order: the model's outputs plus the feature columns named in ``keep`` (e.g. example
    ids). ``jit_compile``: the per-replica step compiled with XLA (plain kernels).

    The traced step is kept with ``model`` (``_predict_step``): calling again, e.g. on each checkpoint of
    --eval_all_ckpt restored into the same model, runs it without tracing it again.

    Under ``MultiWorkerMirroredStrategy`` every worker runs the whole of ``dataset`` on its own replicas and gets
    every output: exact, the same on every worker, and with no collective (see ``_local_replica_inputs``)."""
    check_jit_compile(strategy, jit_compile)
    step = _predict_step(strategy, model, tuple(keep), jit_compile)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        batches = dataset  # read whole by every worker (_local_replica_inputs)
    else:
        batches = strategy.experimental_distribute_dataset(dataset)

    collected: dict[str, list] = {}
    for features in batches:
        outputs = step(features)
        for name, value in outputs.items():
            parts = strategy.experimental_local_results(value)
            collected.setdefault(name, []).extend(np.asarray(p) for p in parts)
    return {name: np.concatenate(parts) for name, parts in collected.items()}


# The attribute of a model holding its predict steps: set past Keras' attribute tracking, so that neither its
# checkpoints nor its SavedModel exports see them, and freed with the model (a dict keyed by the model, weakly,
# would never free it: the steps refer to the model).
_PREDICT_STEPS = "_xlnet_tf_predict_steps"


def _predict_step(strategy: tf.distribute.Strategy, model, keep: tuple[str, ...], jit_compile: bool):
    """``predict``'s ``tf.function`` for ``(strategy, keep, jit_compile)``, made once per model: a new one per
    call traced the model again each time (seconds at XLNet-Base size) and its graphs were never freed (4-20 MB a
    call). The traced graphs read the model's variables when run, so weights restored into the model in between
    are the ones used."""
    steps = model.__dict__.get(_PREDICT_STEPS)
    if steps is None:
        steps = {}
        object.__setattr__(model, _PREDICT_STEPS, steps)
    key = (strategy, keep, jit_compile)
    if key not in steps:
        fn = make_predict_step(model, keep, jit_compile)
        multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        # elsewhere the batches come distributed (experimental_distribute_dataset)
        replica_inputs = _local_replica_inputs(strategy) if multi_worker else (lambda features: features)

        @tf.function(autograph=False)  # the model branches on Python values only (see Training.train)
        def step(features):
            return strategy.run(fn, args=(replica_inputs(features),))
        steps[key] = step
    return steps[key]


def _local_replica_inputs(strategy: tf.distribute.Strategy):
    """``predict``'s per-replica inputs on one worker of a multi-worker strategy: the dataset is read whole by this
    worker, each global batch split over its local replicas by the function returned (called in the
    ``tf.function``), their local results concatenated in order being the batch's outputs.

    Not ``experimental_distribute_dataset``: it shards the data by file across the workers (a single cache file
    cannot be), and unsharded, each worker would still collect only its own replicas' share of every batch, so
    metrics would be of part of the data. Its end-of-data check is also an all-reduce, which every worker must
    reach as often as the others; the inference step itself has no collective, so read locally no worker waits
    for another (the runner's chief alone may then run it again, e.g. for --predict_input_glob). Redundant work
    on the other workers, but the evaluation is a small part of a fine-tuning run's time, and gathering shares
    across the workers would be collectives to keep in step, exactly."""
    local = len(strategy.extended.worker_devices)

    def replica_inputs(features):
        first = tf.nest.flatten(features)[0]
        # static where the batches are (whole batches: one XLA compilation); a last, shorter batch of a dataset
        # not padded to whole ones gives the last replicas fewer rows (or none)
        rows = first.shape[0] if first.shape[0] is not None else tf.shape(first)[0]
        per_replica = -(-rows // local)

        def replica_slice(context):
            # this worker's replicas have consecutive ids in the sync group, whatever the worker's index
            start = context.replica_id_in_sync_group % local * per_replica
            return tf.nest.map_structure(lambda v: v[start:start + per_replica], features)
        return strategy.experimental_distribute_values_from_function(replica_slice)
    return replica_inputs


class EvalSummaries:
    """TensorBoard scalars of a run's evaluations, in directories of ``model_dir``: one writer, so one event file,
    per directory for the object's life (a writer per evaluation left one event file per checkpoint of
    --eval_all_ckpt)."""

    def __init__(self, model_dir: str):
        self.model_dir, self._writers = model_dir, {}

    def write(self, name: str, step: int, metrics: dict[str, float]) -> None:
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = tf.summary.create_file_writer(os.path.join(self.model_dir, name))
        with writer.as_default(step=step):
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    tf.summary.scalar(key, value)
        writer.flush()  # readable now: the writer stays open for the next evaluation
