"""What every run sets up the same way, pretraining and fine-tuning alike.

* ``run_scope`` / ``start_run``: the strategy (global batch sizes checked against its replicas) and the seed; the
  scope ends --deterministic's op determinism with the run.
* ``load_model_config``: the model shape with the run's dropout and clamping, checked against the vocabulary.
* ``setup_training``: model, optimizer and checkpoint under the strategy, the checkpoint manager, and the restore
  (resume from ``model_dir`` > warm start from ``init_checkpoint`` > random weights); ``Training.train`` then
  runs the host loops with progress lines, TensorBoard scalars, checkpoints and preemption handling.
* ``training_lock``: one training run at a time in a checkpoint directory.
* ``check_data_order`` / ``keep_data_order``: a resumed run takes the batches the interrupted one would have.
* ``checkpoint_step`` for evaluation, prediction and export (which restore through ``xlnet_tf.checkpoint``:
  every model-from-checkpoint read is there; this module resumes a run's whole training state).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
from typing import Callable, Iterator, Optional

import keras
import tensorflow as tf
from absl import logging
from tensorflow.python.framework import config as tf_config

from xlnet_tf import io_utils
from xlnet_tf.checkpoint import checkpoint_reader, warm_start
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import WorkerLostError
from xlnet_tf.layers.dropout import seed_states
from xlnet_tf.training.distribute import create_strategy, num_hosts
from xlnet_tf.training.loop import run_host_loops, worker_checkpoint_dir
from xlnet_tf.training.optimization import create_optimizer
from xlnet_tf.training.progress import ProgressReporter, device_peak_flops
from xlnet_tf.training.settings import RunSettings, SettingsError
from xlnet_tf.errors import InputError


@contextlib.contextmanager
def run_scope(settings: RunSettings) -> Iterator[tf.distribute.Strategy]:
    """``start_run``'s strategy for the length of a run: the op determinism --deterministic turned on ends with it.
    Why: a library caller's process goes on after the run, and under op determinism Keras silently compiles nothing
    with XLA (it drops ``jit_compile=True``) and ops without a deterministic kernel raise."""
    # (TensorFlow's public API can turn op determinism on, not read it or turn it off)
    was_on = tf_config.is_op_determinism_enabled()
    try:
        yield start_run(settings)
    finally:
        if not was_on and tf_config.is_op_determinism_enabled():
            tf_config.disable_op_determinism()


def start_run(settings: RunSettings) -> tf.distribute.Strategy:
    """The run's strategy, after checking that its global batch sizes split over the replicas; seeds Keras. The
    model config is read first: a bad file fails before the devices are connected (a TPU takes minutes). Runs use
    it through ``run_scope``."""
    XLNetConfig.from_json(settings.model_config_path)
    if settings.deterministic:
        _make_deterministic()
    strategy = create_strategy(settings.strategy, settings.tpu, tpu_zone=settings.tpu_zone,
                               gcp_project=settings.gcp_project, tpu_timeout=settings.tpu_timeout,
                               worker_timeout=settings.worker_timeout)
    replicas = strategy.num_replicas_in_sync
    for name in settings.BATCH_SIZES:
        if getattr(settings, name) % replicas:
            raise SettingsError(f"--{name}={getattr(settings, name)} is not divisible by the {replicas} replicas of "
                                f"--strategy={settings.strategy} (batch sizes are global)")
    check_workers_agree(strategy, settings)
    keras.utils.set_random_seed(settings.seed)
    return strategy


def check_workers_agree(strategy: tf.distribute.Strategy, settings: RunSettings) -> None:
    """A SettingsError on every worker of a multi-worker job whose workers were started with other settings, naming
    them (this worker's values): nothing else compares them, and workers of other learning rates or step counts
    train apart without a word, or wait for ever in a collective that another never enters. Each setting's value
    is hashed (two 15-bit digests); two all-reduces tell whether all replicas hold the same ones."""
    if num_hosts(strategy) < 2 or isinstance(strategy, tf.distribute.TPUStrategy):  # a pod runs one program
        return
    names = [f.name for f in dataclasses.fields(settings)]
    digests = []
    for name in names:
        digest = hashlib.sha256(json.dumps(getattr(settings, name), sort_keys=True, default=str).encode()).digest()
        digests += [int.from_bytes(digest[:2], "big") >> 1, int.from_bytes(digest[2:4], "big") >> 1]
    mine, summed = tf.constant(digests, tf.int32), _summed(strategy)
    total = summed(mine)
    # All equal iff every replica's n * value is the sum: then each |n * value - sum| is 0, and so is theirs
    spread = summed(tf.abs(strategy.num_replicas_in_sync * mine - total)).numpy()
    differ = [name for k, name in enumerate(names) if spread[2 * k] or spread[2 * k + 1]]
    if differ:
        worker = getattr(strategy.cluster_resolver, "task_id", "?")
        raise SettingsError(f"the workers of this multi-worker job were started with other settings: "
                            f"{' '.join(f'--{n}={getattr(settings, n)}' for n in differ)} on worker {worker} "
                            "(see the other workers' lines): start every worker with the same flags")


def _summed(strategy: tf.distribute.Strategy) -> Callable:
    """A function summing a tensor over every replica of ``strategy`` (a collective: it returns once all have
    called it; ``WORKER_LOST`` if a worker is lost meanwhile)."""
    return tf.function(lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM,
                                                     strategy.run(tf.identity, args=(value,)), axis=None))


TRAIN_LOCK = ".train.lock"


def training_lock(strategy: tf.distribute.Strategy, model_dir: str):
    """Holds this worker's checkpoint directory (``worker_checkpoint_dir``) while a run trains into it: a second
    run there would interleave its checkpoints and summaries with the first's, so it is refused, naming the first
    (``io_utils.directory_lock``: a crashed run's lock is taken over by the rerun)."""
    if isinstance(strategy, tf.distribute.TPUStrategy) and num_hosts(strategy) > 1:
        # Every host of a pod slice runs the program and writes model_dir together (not run here): no lock.
        return contextlib.nullcontext()
    directory, _ = worker_checkpoint_dir(strategy, model_dir)
    io_utils.makedirs(directory)

    def refusal(holder: dict, path: str) -> str:
        return (f"--model_dir={model_dir}: another run is training there (pid {holder.get('pid')} on "
                f"{holder.get('host')}, since {holder.get('started')}); wait for it, or train in another --model_dir "
                f"(if that run is gone, its lock expires {io_utils.LOCK_EXPIRES_S:.0f} s after its last renewal, "
                f"or delete {path})")
    return io_utils.directory_lock(directory, TRAIN_LOCK, refusal)


def _make_deterministic() -> None:
    """--deterministic: TensorFlow's op determinism, in a process that loaded TensorFlow with oneDNN off (the
    command-line tools set TF_ENABLE_ONEDNN_OPTS=0 before it loads). Measured on 2 cores (AMD EPYC), 40 calls of
    one training step in each of 6 processes: with oneDNN a gradient differed from the first call's in 5 of them (by
    ulps, which training then spreads); with it off, in none."""
    from tensorflow.python.util import _pywrap_util_port  # whether this TensorFlow loaded with oneDNN

    if _pywrap_util_port.IsMklEnabled():
        raise SettingsError("--deterministic: TensorFlow was loaded with oneDNN on in this process, whose matmuls "
                            "are not reproducible run to run; set TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow is "
                            "imported (the command-line tools do)")
    tf.config.experimental.enable_op_determinism()


def load_model_config(settings: RunSettings, vocab_size: Optional[int] = None, vocab_source: str = "",
                      **overrides) -> XLNetConfig:
    """``--model_config_path`` with the run's dropout, attention dropout and clamping (and ``overrides``);
    a SettingsError if its vocabulary is not ``vocab_size`` (from ``vocab_source``)."""
    config = XLNetConfig.from_json(settings.model_config_path, dropout=settings.dropout, dropatt=settings.dropatt,
                                   clamp_len=settings.clamp_len, **overrides)
    if vocab_size is not None and config.n_token != vocab_size:
        raise SettingsError(f"--model_config_path n_token={config.n_token} but {vocab_source} has {vocab_size} "
                            "pieces")
    return config


@dataclasses.dataclass
class Training:
    """A model and its optimizer under a strategy, restored to ``start_step`` (see ``setup_training``)."""

    strategy: tf.distribute.Strategy
    settings: RunSettings
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    global_step: tf.Variable
    manager: tf.train.CheckpointManager
    checkpoint_dir: str
    start_step: int
    resumed: Optional[str] = None  # the checkpoint restored, if any

    def finished(self) -> bool:
        """Whether ``start_step`` already reached ``train_steps`` (logged)."""
        if self.start_step >= self.settings.train_steps:
            logging.info("already trained for %d steps (--train_steps=%d): nothing to do", self.start_step,
                         self.settings.train_steps)
            return True
        return False

    def train(self, replica_step: Callable, dataset_fn: Callable, *, global_batch: int, seq_len: int,
              flops_per_sequence: float, micro_batches: Optional[int] = None,
              initial_state: Callable = lambda: tf.zeros([]), ratio_metrics: tuple = ()) -> dict:
        """Trains from ``start_step`` to ``train_steps`` and returns the last host loop's metrics.

        ``dataset_fn(input_context, start_step)`` gives the per-replica batches of one input pipeline, positioned
        at ``start_step``. An optimizer step runs ``replica_step(inputs, state) -> (state, loss, grad_norm)`` on
        every replica, with ``inputs`` one batch, or a list of ``micro_batches`` batches if that is given (gradient
        accumulation; ``global_batch`` counts them all). ``seq_len`` and ``flops_per_sequence``: one example's
        tokens and model FLOPs (one sequence; RACE's four options together). ``state`` (the pretraining memory; a
        placeholder otherwise) starts as ``initial_state()`` on each replica at every host loop
        (``run_host_loops``). With ``ratio_metrics`` (names), ``replica_step`` returns a fourth value,
        ``{name: (numerator, denominator)}``; each is reported as its numerators over its denominators, summed over
        replicas and the host loop's steps (e.g. the accuracy over all targets).
        """
        s, strategy = self.settings, self.strategy
        # Autograph rewrites all the host loop calls unless told not to. The step (model, loss, optimizer) branches
        # on Python values only: left as written, as Keras leaves its own steps, it traces faster
        # (bench/reports/performance.md, "Time to the first step").
        replica_step = tf.autograph.experimental.do_not_convert(replica_step)
        iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset_fn(ctx, self.start_step)))

        def next_inputs():
            return next(iterator) if micro_batches is None else [next(iterator) for _ in range(micro_batches)]

        def total(value):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

        loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)

        @tf.function
        def host_loop(steps, state):
            loss_sum, norm = tf.constant(0.0), tf.constant(0.0)
            ratios = {name: (tf.constant(0.0), tf.constant(0.0)) for name in ratio_metrics}
            for _ in tf.range(steps):
                state, loss, step_norm, *metrics = strategy.run(replica_step, args=(next_inputs(), state))
                loss_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
                step_norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, step_norm, axis=None)
                # Without loss scaling, a non-finite gradient was applied (NaN weights, perhaps with finite losses
                # until the loop ends): its norm is kept for run_host_loops to see. With it, the step was skipped.
                norm = step_norm if loss_scaled else tf.where(tf.math.is_finite(norm), step_norm, norm)
                if ratio_metrics:
                    ratios = {name: (num + total(metrics[0][name][0]), den + total(metrics[0][name][1]))
                              for name, (num, den) in ratios.items()}
            self.global_step.assign_add(tf.cast(steps, tf.int64))
            return (state, loss_sum / tf.cast(steps, tf.float32), norm,
                    {name: num / tf.maximum(den, 1.0) for name, (num, den) in ratios.items()})

        initial = tf.function(lambda: strategy.run(initial_state))
        # A host loop returns the state on its caller's device (its while loop's outputs), not on the replicas'
        # where initial() makes it. Carried into the next call as it is (the first host loop's split), inputs on
        # other devices than initial()'s made the runtime instantiate the whole loop again (two CPU replicas,
        # tiny config: 1.7 s of a run's 8). Put back on each replica, the next call is the one instantiated.
        carry = tf.function(lambda state: strategy.run(lambda s: tf.nest.map_structure(tf.identity, s),
                                                        args=(state,)))
        replicas = strategy.num_replicas_in_sync
        peak, peak_source = device_peak_flops(strategy, self.model.compute_dtype)
        logging.info("training %d -> %d steps: %d replicas, global batch %d (%d micro-batches), %d tokens each, %s; "
                     "MFU peak %.3g FLOP/s per replica (%s)", self.start_step, s.train_steps, replicas, global_batch,
                     micro_batches or 1, seq_len, s.dtype, peak, peak_source)
        reporter = ProgressReporter(self.checkpoint_dir, s.train_steps, global_batch * seq_len,
                                    global_batch * flops_per_sequence, peak * replicas, self.start_step,
                                    peak_measured=peak_source.startswith("measured"))
        agree = None
        if num_hosts(strategy) > 1:
            # A signal reaches one worker; every worker must save at the same step and stop (a worker that stopped
            # alone would leave the others waiting in a collective). One all-reduce of the flags per host loop.
            workers_asking = sum_over_workers(strategy)

            def agree(requested: bool) -> bool:
                return workers_asking(int(requested)) > 0
        try:
            return run_host_loops(host_loop, initial_state=initial, start_step=self.start_step,
                                  train_steps=s.train_steps, iterations=s.steps_per_loop,
                                  save_steps=s.checkpoint_every, manager=self.manager, reporter=reporter,
                                  optimizer=self.optimizer, agree=agree, carry_state=carry)
        except WORKER_LOST as error:
            if num_hosts(strategy) < 2:
                raise
            # A rerun resumes from the chief's checkpoints in model_dir (another worker's own are private copies)
            raise WorkerLostError(lost_worker_message(error, tf.train.latest_checkpoint(s.model_dir))) from None


# What a collective raises when a peer of a multi-worker job stopped answering.
WORKER_LOST = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.DeadlineExceededError)


def sum_over_workers(strategy: tf.distribute.Strategy) -> Callable[[int], int]:
    """A function summing an int over every replica of ``strategy`` (``_summed``), for flags a worker raises."""
    total = _summed(strategy)
    return lambda value: int(total(tf.constant(value)).numpy())


def lost_worker_message(error: tf.errors.OpError, checkpoint: Optional[str]) -> str:
    """One line for a collective that failed because a peer stopped answering: which task(s), and from which step
    a rerun of every worker resumes. TensorFlow names the tasks (``/job:worker/replica:0/task:1``) after "unhealthy"
    when the coordination service noticed the missing heartbeats."""
    text = error.message or str(error)
    tail = text[text.find("unhealthy"):] if "unhealthy" in text else text
    tasks = sorted(set(re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", tail)))
    who = ", ".join(f"{job} {task}" for job, task in tasks) if tasks else "another worker"
    resume = (f"step {checkpoint_step(checkpoint)} ({checkpoint})" if checkpoint else
              "the start (no checkpoint was written yet)")
    return (f"lost {who} of the multi-worker job ({type(error).__name__}); the others stop too. Rerun every worker "
            f"with the same flags to resume from {resume}")


def setup_training(strategy: tf.distribute.Strategy, settings: RunSettings, build_model: Callable[[], keras.Model],
                   *, checkpoint_name: str, saved_model: Callable = lambda model: model,
                   lr_layer_decay_rate: float = 1.0, warn_from_scratch: bool = False,
                   labels: Optional[list] = None) -> Training:
    """Builds the model (``build_model()``), its optimizer and a global step under ``strategy``, a checkpoint
    manager writing ``<model_dir>/<checkpoint_name>-<step>`` (``saved_model(model)`` saved as ``model``), and
    restores: the latest checkpoint in ``model_dir`` (weights, optimizer, step), else the network from
    ``init_checkpoint`` (original TF1 or native), else nothing (a warning if ``warn_from_scratch``)."""
    s = settings
    check_workers_agree(strategy, s)  # (start_run checked the command-line tools' runs; a library caller's too)
    with strategy.scope():
        model = build_model()
        optimizer = create_optimizer(model, s.learning_rate, s.train_steps, s.warmup_steps, s.decay_method,
                                     s.min_lr_ratio, s.weight_decay, s.adam_epsilon, lr_layer_decay_rate,
                                     loss_scale=model.dtype_policy.name == "mixed_float16",
                                     adam_bias_correction=s.adam_bias_correction)
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # The dropout layers' seed states too: a resumed run draws the masks an uninterrupted one would.
        checkpoint = tf.train.Checkpoint(weights=named_weights(model), model=saved_model(model),
                                         optimizer=optimizer, global_step=global_step,
                                         dropout_seeds=seed_states(model))
    checkpoint_dir, _ = worker_checkpoint_dir(strategy, s.model_dir)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=s.max_save or None,
                                         checkpoint_name=checkpoint_name)
    resumed = _resume(checkpoint, s.model_dir, s.dtype)  # every worker resumes from the chief's checkpoints
    if resumed:
        logging.info("resumed from %s at step %d", resumed, int(global_step.numpy()))
    elif s.init_checkpoint:  # the network; an HF checkpoint's head too where it fits the task (``labels``)
        warm_start(model, s.init_checkpoint, labels)
    else:
        logging.log(logging.WARNING if warn_from_scratch else logging.INFO,
                    "no --init_checkpoint: training from random weights")
    return Training(strategy, s, model, optimizer, global_step, manager, checkpoint_dir, int(global_step.numpy()),
                    resumed)


DATA_ORDER_KEY = "data_order/.ATTRIBUTES/VARIABLE_VALUE"
# Recorded with the data order: settings of the update that a resumed run must repeat, with the value a checkpoint
# recording the data order but not them was trained with. The base and large recipes changed Adam's update
# (adam_bias_correction: false), which a run started before would otherwise take from its resume on, unsaid.
UPDATE_SETTINGS = {"adam_bias_correction": True}


def update_settings(settings: RunSettings) -> dict:
    """``settings``' values of ``UPDATE_SETTINGS``, for a run's ``data_order``."""
    return {name: getattr(settings, name) for name in UPDATE_SETTINGS}


def check_data_order(model_dir: str, order: dict) -> None:
    """Before anything is written or encoded: if ``model_dir`` holds a checkpoint to resume from, a SettingsError
    names the settings of ``order`` ({flag: value}; ``input_pipelines``: the strategy's hosts) whose values differ
    from those it was trained with (``keep_data_order``), which would change the training batches of the steps to
    come: the data position a run resumes at is counted in batches of its own settings. A checkpoint of an older
    xlnet_tf, which recorded none, resumes with a warning."""
    for path in _resume_candidates(model_dir):
        try:  # the newest readable one: the run resumes from it unless it cannot restore it (keep_data_order)
            recorded = _recorded_order(path)
        except (tf.errors.OpError, IndexError, ValueError):  # IndexError: a data file cut short
            continue
        _compare_order(model_dir, path, recorded, order)
        return


def keep_data_order(training: Training, order: dict) -> None:
    """Records ``order`` in every checkpoint ``training`` writes from now on, after comparing it with the
    checkpoint resumed from (``check_data_order`` compared the newest readable one, which ``setup_training`` skips
    if it cannot restore it)."""
    if training.resumed:
        _compare_order(training.settings.model_dir, training.resumed, _recorded_order(training.resumed), order)
    training.manager.checkpoint.data_order = tf.Variable(json.dumps(order, sort_keys=True), trainable=False,
                                                         name="data_order")


def _recorded_order(path: str) -> Optional[dict]:
    """The data order the checkpoint ``path`` records; None if it records none (an older xlnet_tf's)."""
    reader = checkpoint_reader(path)
    return json.loads(reader.get_tensor(DATA_ORDER_KEY)) if reader.has_tensor(DATA_ORDER_KEY) else None


def _compare_order(model_dir: str, resumed: str, recorded: Optional[dict], order: dict) -> None:
    if recorded is None:
        logging.warning("%s was written by an older xlnet_tf, which recorded neither its data order nor its update "
                        "settings: from its step on, this version may take other batches than that one would have "
                        "(not the uninterrupted run's; for a run of this version throughout, start a new --model_dir "
                        "with --init_checkpoint=%s)", resumed, resumed)
    recorded = {**UPDATE_SETTINGS, **(recorded or {})}  # one recording none of them trained with these values
    changed = [k for k in order if k in recorded and recorded[k] != order[k]]
    if changed:
        def flags(values):
            return " ".join(f"--{k}={values[k]}" if k != "input_pipelines" else
                            f"{values[k]} input pipelines (hosts/workers of --strategy)" for k in changed)
        effects = [effect for effect, keys in (("the training batches", set(changed) - set(UPDATE_SETTINGS)),
                                               ("the optimizer's update", set(changed) & set(UPDATE_SETTINGS))) if keys]
        raise SettingsError(
            f"--model_dir={model_dir}: {resumed} was trained with {flags(recorded)}; resuming with "
            f"{flags(order)} would change {' and '.join(effects)} from step {checkpoint_step(resumed)} on: rerun "
            "with the recorded values, or start a new --model_dir (warm-started from this one with "
            "--init_checkpoint)")


def _resume_candidates(model_dir: str) -> list:
    """The checkpoints a run in ``model_dir`` may resume from, newest first."""
    state = tf.train.get_checkpoint_state(model_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return paths[::-1]


def named_weights(model) -> dict:
    """``model``'s weights by their Keras paths ('/' written as '-'), for the top of a training checkpoint: the
    shortest path to a variable names it there, and Keras 3's optimizer lists every weight two levels down
    (``optimizer/_trainable_variables/N``), so without this ``tf.train.list_variables`` shows the layers' weights
    only by index."""
    named = {weight.path.replace("/", "-"): weight for weight in model.weights}
    if len(named) != len(model.weights):
        raise ValueError(f"{type(model).__name__} has weights with the same path")
    return named


def _resume(checkpoint: tf.train.Checkpoint, model_dir: str, dtype: str) -> Optional[str]:
    """Restores the newest intact checkpoint of ``model_dir`` into ``checkpoint``; returns its path (None: there
    is none). A damaged newer one (a half-copied file, a crash while writing outside TensorFlow) is skipped with
    a warning; if every one is damaged, a ValueError names them. One trained with or without loss scaling where
    ``dtype`` (``--dtype``) is the other is a SettingsError naming the flag: its optimizer state has another
    structure (it would read as damaged)."""
    failures = []
    for path in _resume_candidates(model_dir):
        _check_loss_scaling(model_dir, path, dtype)
        try:
            checkpoint.restore(path).assert_existing_objects_matched()
        except (tf.errors.OpError, IndexError, ValueError, AssertionError) as error:
            hint = (" (a checkpoint of another model, or of an older xlnet_tf: start a new --model_dir, warm-"
                    "started from it with --init_checkpoint)" if isinstance(error, AssertionError) else "")
            failures.append(f"{path}: {str(error).strip().splitlines()[0] if str(error).strip() else error!r}"
                            f"{hint}")
            logging.warning("cannot resume from %s; trying the previous checkpoint", failures[-1])
            continue
        return path
    if failures:
        raise InputError(f"{model_dir}: no intact checkpoint to resume from:\n  " + "\n  ".join(failures))
    return None


def _check_loss_scaling(model_dir: str, path: str, dtype: str) -> None:
    """A SettingsError if the training checkpoint ``path`` has a loss-scaled optimizer (``--dtype=mixed_float16``)
    and ``dtype`` has none, or the reverse; nothing if it cannot be read (``_resume`` reports that)."""
    try:
        scaled = checkpoint_reader(path).has_tensor("optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE")
    except (tf.errors.OpError, ValueError):
        return
    if scaled != (dtype == "mixed_float16"):
        trained = "--dtype=mixed_float16" if scaled else "--dtype=float32 or mixed_bfloat16"
        raise SettingsError(f"--model_dir={model_dir}: {path} was trained with {trained} (its optimizer state "
                            f"{'has a' if scaled else 'has no'} loss scale), which --dtype={dtype} cannot resume: "
                            f"rerun with {trained}, or start a new --model_dir (warm-started from this one with "
                            "--init_checkpoint)")


def checkpoint_step(path: Optional[str]) -> int:
    """The global step saved in a checkpoint (0 for none, or a checkpoint without one, e.g. a TF1 release)."""
    if not path:
        return 0
    try:
        return int(checkpoint_reader(path).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError):
        return 0
