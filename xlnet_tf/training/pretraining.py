"""XLNet pretraining: ``pretrain(settings)`` (what run_pretrain.py runs) and its loop ``run_pretraining``:
the loss of an objective of ``xlnet_tf.objectives`` (XLNet's permutation LM, UniLMv2's pseudo-masked LM, MPNet,
or any other registered there), Transformer-XL memory carried between steps (where the objective defines it), any
strategy. The set-up (model, optimizer, checkpoints, restore) and the host loops are ``xlnet_tf.training.setup``'s,
shared with fine-tuning.

Structure (what keeps TPUs busy and makes resuming exact):
* ``iterations`` steps run inside one ``tf.function`` (a "host loop"). The per-replica memory is loop state:
  zeros at the start of every host loop, then each step's ``new_mems`` feed the next step, like the original
  TPU trainer (whose TPUEstimator reset the cache every ``iterations`` steps).
* Checkpoints are written only at host-loop boundaries (a host loop is cut short to end on every multiple of
  ``save_steps``), where memory is zero anyway. A resumed run restores weights, optimizer state and the step, and
  its input pipeline starts at that step's data position: it continues exactly as the uninterrupted run would have.
  Each checkpoint records the settings that position is counted in (``data_order``); a rerun with others is refused.
* The checkpoint records the objective (``model/objective``): resuming with another is an error; fine-tuning from
  it needs nothing (every objective trains the same network).
* ``model_dir`` holds the network's ``xlnet_config.json`` (the release's keys) and ``spiece.model``, as a release
  directory does, so its checkpoints load by the directory alone (``load_network``, the text models'
  ``from_checkpoint``); a rerun with another model config or SentencePiece model is refused.
* SIGTERM (preemption) or SIGINT (Ctrl-C) finishes the current host loop, writes a checkpoint and returns;
  ``iterations`` bounds how long that takes. A non-finite loss stops the run with an error before anything is
  saved, so the last checkpoint on disk is the last good one.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.config import CHECKPOINT_KEYS, XLNetConfig
from xlnet_tf.flops import train_flops_per_sequence
from xlnet_tf.models.xlnet import XLNetPretrainer
from xlnet_tf.objectives import get_objective
from xlnet_tf.training.xla import check_jit_compile
from xlnet_tf.training.optimization import apply_gradients_across_replicas
from xlnet_tf.training.settings import PretrainSettings, SettingsError
from xlnet_tf.training.loop import worker_checkpoint_dir
from xlnet_tf.training.setup import (WORKER_LOST, check_data_order, keep_data_order, load_model_config,
                                    run_scope, setup_training, sum_over_workers, training_lock, update_settings)
from xlnet_tf.errors import InputError, WorkerLostError

# The attention masks (perm_mask, query_perm_mask: [B, L, L], the largest inputs) cross from the host to the
# accelerator as uint8: a quarter of float32, exact for 0/1 (the model only tests ``> 0``, in the step), and a plain
# numeric type of every device's transfers (TPU's supported types list it beside bool; XLA compiles it as u8).
PERM_MASK_WIRE_DTYPE = tf.uint8


def pretrain(settings: PretrainSettings) -> dict:
    """What run_pretrain.py does: checks the settings, the strategy and the data in ``data_dir`` (writing it from
    ``input_glob`` first if it has none), then pretrains; returns the last host loop's metrics."""
    from xlnet_tf.training.pretrain_data import has_pretraining_data

    s = settings.validate()
    has_pretraining_data(s)  # before connecting to the devices (a TPU takes minutes)
    with run_scope(s) as strategy:
        check_jit_compile(strategy, s.jit_compile)  # before any data is written
        with training_lock(strategy, s.model_dir):  # one run at a time in a model_dir
            return _pretrain(s, strategy)


def _pretrain(s: PretrainSettings, strategy: tf.distribute.Strategy) -> dict:
    """``pretrain`` once the strategy is up and the training lock held."""
    from xlnet_tf.data.reader import pretrain_dataset
    from xlnet_tf.training.distribute import num_hosts
    from xlnet_tf.training.pretrain_data import data_tokenizer, ensure_pretraining_data, has_pretraining_data

    replicas = strategy.num_replicas_in_sync
    per_replica = s.train_batch_size // replicas
    if s.bi_data and per_replica % 2:
        raise SettingsError(f"--bi_data needs an even batch per replica, got {per_replica}")
    check_data_order(s.model_dir, data_order(s, strategy))  # before the data is written (hours, from raw text)
    hosts = num_hosts(strategy)
    layout = dict(bsz_per_host=s.train_batch_size // hosts, num_core_per_host=s.num_core_per_host or replicas // hosts,
                  min_shards=hosts)
    if hosts > 1 and getattr(strategy, "cluster_resolver", None) is not None and not has_pretraining_data(s):
        # The workers share --data_dir: the chief writes the data, the others wait for it in a collective (which
        # fails, as training's do, if the chief is lost).
        if worker_checkpoint_dir(strategy, s.model_dir)[1]:
            ensure_pretraining_data(s, **layout)
        else:
            logging.info("waiting for the chief to write the pretraining data into --data_dir=%s", s.data_dir)
        all_workers_here(strategy, f"while the chief wrote the pretraining data into --data_dir={s.data_dir}")
    manifest = ensure_pretraining_data(s, **layout)
    s = dataclasses.replace(s, spiece_model_file=data_tokenizer(s, manifest))
    model_config = load_model_config(s, manifest["params"]["vocab_size"], "the data's SentencePiece vocabulary",
                                     mem_len=s.mem_len, reuse_len=s.reuse_len, bi_data=s.bi_data,
                                     same_length=s.same_length)

    def dataset_fn(ctx, start_step):
        batches_per_step = (ctx.num_replicas_in_sync // ctx.num_input_pipelines) * s.grad_accum_steps
        return pretrain_dataset(s.data_dir, per_replica, s.seq_len, s.reuse_len, s.permutation_size, s.num_predict,
                                s.bi_data, input_context=ctx, seed=s.seed, skip_batches=start_step * batches_per_step,
                                objective=get_objective(s.objective), perm_mask_dtype=PERM_MASK_WIRE_DTYPE)

    try:
        return run_pretraining(strategy, model_config, s, dataset_fn)
    except tf.errors.DataLossError as error:  # TensorFlow's message names no file: find the damaged shards
        from xlnet_tf.data.manifest import find_damaged_shards

        damaged = find_damaged_shards([shard["path"] for shard in manifest["shards"]])
        raise InputError(f"{s.data_dir}: damaged pretraining data ({error.message.splitlines()[0]}):\n  "
                         + "\n  ".join(damaged or ["(no shard fails on its own: check the storage)"])
                         + "\nRewrite the damaged shards: delete them and rerun the data writer.") from None


def all_workers_here(strategy: tf.distribute.Strategy, doing: str) -> None:
    """Returns once every worker of ``strategy`` has called it; a worker lost meanwhile is a ``WorkerLostError``
    saying what it was ``doing``."""
    try:
        sum_over_workers(strategy)(1)
    except WORKER_LOST as error:
        raise WorkerLostError(f"another worker stopped {doing} ({type(error).__name__}); its output says why. "
                              "Rerun every worker") from None


def run_pretraining(strategy: tf.distribute.Strategy, model_config: XLNetConfig, settings: PretrainSettings,
                    dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset]) -> dict:
    """Trains an ``XLNetPretrainer`` and returns the last host loop's metrics (``step``, ``loss``, ...).

    ``dataset_fn(input_context, start_step)`` returns the per-replica batches of one input pipeline, positioned
    at ``start_step`` (a resumed run's data position), with the objective's model inputs plus ``target`` and
    ``target_mask``. ``settings.train_batch_size`` is global (all replicas), per micro-batch.
    """
    s, c = settings, model_config
    check_jit_compile(strategy, s.jit_compile)
    objective = get_objective(s.objective)
    if c.mem_len and c.reuse_len is None:
        raise ValueError("mem_len > 0 needs reuse_len (the part of each segment that becomes memory)")
    if c.mem_len and not objective.has_memory:
        raise SettingsError(f"--objective={objective.name} has no Transformer-XL memory: set --mem_len=0")
    recorded = tf.Variable(objective.name, trainable=False, name="objective")  # the resumed run's, once restored
    training = setup_training(
        strategy, s, lambda: XLNetPretrainer(c, dtype=s.dtype), checkpoint_name="xlnet_model",
        saved_model=lambda model: tf.train.Checkpoint(xlnet=model.xlnet, lm_bias=model.lm_bias, objective=recorded))
    if recorded.numpy().decode() != objective.name:
        raise SettingsError(f"--model_dir={s.model_dir} holds a run of --objective={recorded.numpy().decode()}; "
                            f"resuming it with --objective={objective.name} would mix two objectives (start a new "
                            "--model_dir, warm-started from it with --init_checkpoint)")
    if worker_checkpoint_dir(strategy, s.model_dir)[1]:  # the chief's directory
        # Files of a run that saved no checkpoint (it failed, say, on the model's size) describe no weights: a rerun
        # with a corrected model replaces them.
        record_network(s.model_dir, c, s.spiece_model_file, replace=training.resumed is None)
    if training.finished():
        return {"step": training.start_step}
    keep_data_order(training, data_order(s, strategy))
    model = training.model
    if training.start_step == 0 and not s.init_checkpoint and s.data_dir:
        # From scratch: the LM bias starts at the data's log unigram frequencies (why: xlnet_tf/data/unigram.py).
        from xlnet_tf.data.unigram import initialise_lm_bias

        initialise_lm_bias(model, s.data_dir)
    per_replica = s.train_batch_size // strategy.num_replicas_in_sync
    replica_step = make_replica_step(model, training.optimizer, s.clip, objective.name)
    if s.jit_compile:
        replica_step = tf.function(replica_step, jit_compile=True, autograph=False)  # (see Training.train)
    flops = train_flops_per_sequence(c.n_layer, c.d_model, c.d_inner, s.seq_len, c.mem_len, s.num_predict, c.n_token,
                                     per_replica, c.bi_data, objective=objective.name, d_attn=c.n_head * c.d_head)
    # Memory restarts at every host loop (see the module docstring).
    return training.train(replica_step, dataset_fn, global_batch=s.train_batch_size * s.grad_accum_steps,
                          seq_len=s.seq_len, flops_per_sequence=flops, micro_batches=s.grad_accum_steps,
                          initial_state=zero_mems_fn(c, per_replica, model.compute_dtype),
                          ratio_metrics=objective.metric_names)


def data_order(settings: PretrainSettings, strategy: tf.distribute.Strategy) -> dict:
    """The settings that decide which batches a step takes (``check_data_order``): a resumed run skips the batches
    its steps so far took, counted in micro-batches of its own settings (``dataset_fn``'s ``skip_batches``), and
    each input pipeline reads its own shards; with them, those of the update a resume repeats
    (``setup.UPDATE_SETTINGS``)."""
    from xlnet_tf.training.distribute import num_hosts

    return {"seed": settings.seed, "train_batch_size": settings.train_batch_size,
            "grad_accum_steps": settings.grad_accum_steps, "input_pipelines": num_hosts(strategy),
            **update_settings(settings)}


def record_network(model_dir: str, config: XLNetConfig, spiece_model_file=None, replace: bool = False) -> None:
    """Writes ``<model_dir>/xlnet_config.json`` (the release's keys of ``config``) and ``spiece.model`` (a copy of
    ``spiece_model_file``) where they are not yet (``replace``: or are others); a SettingsError if ``model_dir``
    holds others: a rerun of another network whose weights happen to fit, or of another vocabulary of the same
    size, would otherwise train on."""
    network = {key: config.to_dict()[key] for key in CHECKPOINT_KEYS}
    _record(model_dir, "xlnet_config.json", "--model_config_path", network, io_utils.read_json,
            io_utils.write_json_atomic, lambda there: ", ".join(
                f"{k}={there.get(k)!r} there, {v!r} now" for k, v in network.items() if there.get(k) != v), replace)
    if spiece_model_file:
        _record(model_dir, "spiece.model", "--spiece_model_file", io_utils.read_bytes(spiece_model_file),
                io_utils.read_bytes, io_utils.write_bytes_atomic, lambda there: "another file", replace)


def _record(model_dir: str, name: str, flag: str, value, read, write, difference, replace: bool) -> None:
    """``value`` written to ``<model_dir>/<name>`` if absent (or ``replace``), else compared with what is there
    (``read``)."""
    path = io_utils.join(model_dir, name)
    if not io_utils.exists(path):
        write(path, value)
        return
    there = read(path)
    if there != value and replace:
        logging.info("%s: replaced by this run's (%s), as no checkpoint was written with it", path, flag)
        write(path, value)
    elif there != value:
        raise SettingsError(f"--model_dir={model_dir} holds a run of another model: {path} differs from {flag} "
                            f"({difference(there)}); start a new --model_dir (warm-started from this one with "
                            "--init_checkpoint)")


def make_replica_step(model: XLNetPretrainer, optimizer, clip: float, objective: str = "plm"):
    """One optimizer step of one replica: ``step(batches, mems) -> (new_mems, loss, grad_norm, metrics)``.

    ``batches`` is a list of micro-batches (gradient accumulation; memory flows through them in order). The
    loss is the sum over the objective's terms (``Objective.loss``) of each term's mean over the whole step (its
    loss sums divided by its target count summed over micro-batches and replicas), so any replica split and any
    accumulation give the large batch's update. ``metrics``:
    this replica's ``{name: (numerator, denominator)}`` of ``Objective.metrics`` (summed over replicas and steps
    by the host loop). Call inside ``strategy.run``; also usable on its own for benchmarks.
    """
    spec = get_objective(objective)
    use_memory = bool(model.config.mem_len)

    def replica_step(batches, mems):
        grads_total = None
        loss_local = tf.constant(0.0)
        sums = {}  # term -> (loss sum, correct, count) over the micro-batches
        context = tf.distribute.get_replica_context()
        step_counts = None
        if len(batches) > 1:
            # Every micro-batch's gradient must be that of its share of the step's mean, so the step's counts are
            # needed before the first one: read from the masks, all micro-batches in one all-reduce (static shape).
            per_batch = [spec.target_counts(batch) for batch in batches]
            counts = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                        tf.stack([tf.stack([c[term] for term in spec.loss_terms]) for c in per_batch]))
            step_counts = dict(zip(spec.loss_terms, tf.unstack(tf.maximum(tf.reduce_sum(counts, axis=0), 1.0))))
        for batch in batches:
            with tf.GradientTape() as tape:
                inputs = {k: batch[k] for k in spec.model_inputs}
                if use_memory:
                    inputs["mems"] = mems
                outputs = model(inputs, training=True)
                terms = spec.loss(outputs, batch)
                loss = tf.constant(0.0)
                for term, (loss_sum, _, count) in terms.items():
                    if step_counts is None:
                        count = tf.maximum(context.all_reduce(tf.distribute.ReduceOp.SUM, count), 1.0)
                    # Each replica's share of the step's mean: the all-reduced gradients are those of the mean.
                    loss += loss_sum / (count if step_counts is None else step_counts[term])
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            grads_total = grads if grads_total is None else [a + b for a, b in zip(grads_total, grads)]
            loss_local += loss
            sums = {term: tuple(a + b for a, b in zip(sums.get(term, (0.0, 0.0, 0.0)), values))
                    for term, values in terms.items()}
            if use_memory:
                mems = outputs["new_mems"]
        loss_total = context.all_reduce(tf.distribute.ReduceOp.SUM, loss_local)
        norm = apply_gradients_across_replicas(optimizer, grads_total, model.trainable_variables, clip)
        return mems, loss_total, norm, spec.metrics(sums)

    return replica_step


def zero_mems_fn(config: XLNetConfig, batch_size: int, dtype: str):
    def zero_mems():
        # Without memory, a scalar placeholder keeps the loop state's structure fixed.
        if not config.mem_len:
            return tf.zeros([], dtype)
        return [tf.zeros([batch_size, config.mem_len, config.d_model], dtype) for _ in range(config.n_layer)]
    return zero_mems
