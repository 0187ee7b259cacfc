"""Optimisation as the original ``model_utils.get_train_op``, with its known defects fixed.

* Learning rate: linear warmup to ``learning_rate`` over ``warmup_steps``, then linear ("poly") or cosine decay
  to ``learning_rate * min_lr_ratio`` at ``train_steps``.
* AdamW with decoupled weight decay; LayerNorm parameters and biases are excluded, the relative-attention
  biases ``r_w/r_r/r_s_bias`` are decayed (the original's include list). Adam's step is bias-corrected unless
  ``adam_bias_correction`` is False: the original's ``AdamWeightDecayOptimizer`` (its optimizer whenever
  ``weight_decay > 0``) has no bias correction, ``tf.train.AdamOptimizer`` (``weight_decay == 0``) has it.
* Gradients are clipped by their global norm *after* they are summed over replicas (Keras' own clipping runs
  per replica before the all-reduce, which is not the original's semantics).
* The clip scale, decay and Adam of one variable are ``adamw_update`` (a fast path: on CPU one C++ kernel,
  bit-identical to these TensorFlow ops); without bias correction ``adam_weight_decay_update`` (plain ops).
* Layer-wise learning-rate decay as true per-variable learning rates: layer ``l`` of ``L`` trains at
  ``lr * rate^(L-1-l)``, the embeddings at ``lr * rate^L``, heads at ``lr``. The original multiplied the
  *gradients*, which Adam's normalisation almost cancels. Per-layer slices of the stacked ``[n_layer, ...]``
  bias variables get their own rate.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import kernels
from xlnet_tf.kernels import fast

# Variables excluded from weight decay, by name: LayerNorm scale/offset and plain biases (not r_*_bias).
_NO_DECAY = re.compile(r"(^|/)(gamma|beta|bias|lm_bias)$")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class WarmupDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0, then 'poly' (linear) or 'cos' decay to ``peak * min_lr_ratio`` at ``decay_steps``."""

    def __init__(self, peak: float, warmup_steps: int, decay_steps: int, min_lr_ratio: float = 0.0,
                 decay_method: str = "poly"):
        if decay_method not in ("poly", "cos"):
            raise ValueError(f"decay_method must be 'poly' or 'cos', got {decay_method!r}")
        if decay_steps <= warmup_steps:
            raise ValueError(f"train steps ({decay_steps}) must exceed warmup steps ({warmup_steps})")
        self.peak, self.warmup_steps, self.decay_steps = float(peak), int(warmup_steps), int(decay_steps)
        self.min_lr_ratio, self.decay_method = float(min_lr_ratio), decay_method

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = self.peak * step / max(self.warmup_steps, 1)
        progress = tf.clip_by_value((step - self.warmup_steps) / (self.decay_steps - self.warmup_steps), 0.0, 1.0)
        floor = self.peak * self.min_lr_ratio
        if self.decay_method == "poly":
            decayed = floor + (self.peak - floor) * (1.0 - progress)
        else:
            decayed = floor + (self.peak - floor) * 0.5 * (1.0 + tf.cos(math.pi * progress))
        return tf.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return dict(peak=self.peak, warmup_steps=self.warmup_steps, decay_steps=self.decay_steps,
                    min_lr_ratio=self.min_lr_ratio, decay_method=self.decay_method)


@kernels.fast_path(fast=fast.adamw_update)
def adamw_update(var, m, v, grad, lr, beta_1, beta_2, epsilon, step, decay=None, grad_scale=None):
    """One AdamW step on a float variable ``var`` and its moments ``m``, ``v`` (updated in place): the gradient
    times ``grad_scale`` (the clip factor; None: 1), then ``var * decay`` (decoupled weight decay
    ``1 - wd * lr``; None: none), then Adam with the bias-corrected step size
    ``lr * sqrt(1 - beta_2^step) / (1 - beta_1^step)`` and ``m / (sqrt(v) + epsilon)``. Scalars are tensors in
    var's dtype; ``lr`` a scalar (per-variable multiplier applied)."""
    if grad_scale is not None:
        grad = grad * tf.cast(grad_scale, grad.dtype)
    if decay is not None:
        var.assign(var * decay)
    tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(beta_1, step),
                                 beta2_power=tf.pow(beta_2, step), lr=lr, beta1=beta_1, beta2=beta_2,
                                 epsilon=epsilon, grad=tf.cast(grad, var.dtype), use_locking=False)


def adam_weight_decay_update(var, m, v, grad, lr, beta_1: float, beta_2: float, epsilon: float,
                             weight_decay: float | None = None, grad_scale=None):
    """One step of the original's ``AdamWeightDecayOptimizer`` (``model_utils.py``), written as it is there:
    ``next_m / (sqrt(next_v) + epsilon)`` with no bias correction, plus ``weight_decay * var`` (None: not
    decayed), times ``lr`` (a scalar, or an array broadcastable to ``var``), subtracted from ``var``; the gradient
    first times ``grad_scale`` (None: 1). Not ``ResourceApplyAdam`` with zero powers: it takes ``1 - beta`` in
    float32 (``1 - float32(0.999)`` is 1.3e-5 off 0.001, an error in v that only the bias correction cancels);
    the betas here are Python floats, ``1 - beta`` is computed in double as the original's is."""
    dtype = var.dtype
    if grad_scale is not None:
        grad = grad * tf.cast(grad_scale, grad.dtype)
    grad = tf.cast(tf.convert_to_tensor(grad), dtype)
    next_m = beta_1 * m + (1.0 - beta_1) * grad
    next_v = beta_2 * v + (1.0 - beta_2) * tf.square(grad)
    update = next_m / (tf.sqrt(next_v) + epsilon)
    if weight_decay is not None:
        update += weight_decay * var
    var.assign(var - lr * update)
    m.assign(next_m)
    v.assign(next_v)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetAdamW(keras.optimizers.AdamW):
    """AdamW with per-variable learning-rate multipliers (scalars, or arrays broadcastable to the variable) applied
    to the update and the weight decay, the decay and Adam done together per variable (``adamw_update``).

    ``lr_multipliers`` and ``no_decay_paths`` (variables without weight decay) name variables by their Keras path,
    so the optimizer's config survives ``model.save`` / ``keras.saving.load_model``. ``build`` raises if none of
    those paths is among the variables it is given (a model whose layers were renamed: the settings would
    silently not apply) and logs the ones missing otherwise (e.g. frozen layers).

    Two ways to use it: ``apply_gradients_across_replicas`` (the training loops here), which sums the gradients
    over replicas and clips them by their global norm first; or as any Keras optimizer (``model.fit``,
    ``apply_gradients``), where Keras sums them over replicas itself. It overrides Keras' update internals, so
    ``pyproject.toml`` pins keras to the minor version the tests cover.
    """

    def __init__(self, lr_multipliers: dict[str, np.ndarray | float] | None = None,
                 no_decay_paths: tuple[str, ...] | list[str] = (), adam_bias_correction: bool = True, **kwargs):
        super().__init__(**kwargs)
        self._lr_multipliers_by_path = dict(lr_multipliers or {})
        self.no_decay_paths = tuple(no_decay_paths)
        self.adam_bias_correction = bool(adam_bias_correction)
        self._multiplier_by_key = {}

    def build(self, variables):
        paths = {var.path for var in variables}
        named = set(self._lr_multipliers_by_path) | set(self.no_decay_paths)
        unknown = sorted(named - paths)
        if unknown and len(unknown) == len(named):
            raise ValueError(f"XLNetAdamW: lr_multipliers / no_decay_paths name none of the variables it is built "
                             f"for (e.g. {unknown[0]!r}; the variables: {', '.join(sorted(paths)[:3])}, ...)")
        if unknown:
            logging.warning("XLNetAdamW: %d paths of lr_multipliers / no_decay_paths name none of the variables it "
                            "trains (e.g. %s); a variable at another path trains at the plain learning rate, with "
                            "weight decay", len(unknown), unknown[0])
        if self.no_decay_paths:
            self.exclude_from_weight_decay(var_list=[var for var in variables if var.path in self.no_decay_paths])
        super().build(variables)
        for var in variables:
            multiplier = self._lr_multipliers_by_path.get(var.path)
            if multiplier is not None and np.any(np.asarray(multiplier) != 1.0):
                self._multiplier_by_key[self._var_key(var)] = np.asarray(multiplier, np.float32)

    def get_config(self):
        config = super().get_config()
        config.update(lr_multipliers={path: np.asarray(m).tolist() for path, m in self._lr_multipliers_by_path.items()},
                      no_decay_paths=list(self.no_decay_paths), adam_bias_correction=self.adam_bias_correction)
        return config

    def apply_summed(self, grads, variables, grad_scale=None):
        """``apply`` for gradients already summed over replicas (Keras must not sum them again), each multiplied
        by ``grad_scale`` (a float32 scalar tensor, e.g. the clip factor; None: 1) inside the update."""
        with _summed_gradients(self, grad_scale):
            self.apply(grads, variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        summed = getattr(_SUMMED, "value", None)
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        grads_and_vars = list(zip(grads, variables))
        grad_scale = None
        if summed is not None and summed[0] is self:
            grad_scale = summed[1]
        else:  # model.fit / apply_gradients: per-replica gradients, summed here as Keras does
            grads_and_vars = self._all_reduce_sum_gradients(grads_and_vars)
        # The scale travels as a merge_call argument: under MirroredStrategy the updates run on another thread.
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_update, self._distribution_strategy, grads_and_vars, learning_rate, grad_scale)

    def _distributed_update(self, distribution, grads_and_vars, learning_rate, grad_scale):
        for grad, var in grads_and_vars:
            distribution.extended.update(var, self._update_variable, args=(grad, learning_rate, grad_scale),
                                         group=False)

    def _apply_weight_decay(self, variables):
        """Nothing: the decay is part of each variable's update (``_update_variable``)."""

    def _update_variable(self, variable, gradient, learning_rate, grad_scale):
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        multiplier = self._multiplier_by_key.get(self._var_key(variable))
        if multiplier is not None:
            lr *= tf.constant(multiplier, dtype)
        decayed = bool(self.weight_decay) and self._use_weight_decay(variable)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        if not self.adam_bias_correction:
            adam_weight_decay_update(variable, m, v, gradient, lr, self.beta_1, self.beta_2, self.epsilon,
                                     self.weight_decay if decayed else None, grad_scale)
            return
        decay = 1.0 - tf.cast(self.weight_decay, dtype) * lr if decayed else None
        if multiplier is not None and multiplier.ndim:  # per-slice rates: Keras' element-wise Adam
            if grad_scale is not None:
                gradient = gradient * tf.cast(grad_scale, gradient.dtype)
            if decay is not None:
                variable.assign(variable * decay)
            super().update_step(gradient, variable, lr)
            return
        adamw_update(variable, m, v, gradient, lr, tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype),
                     tf.cast(self.epsilon, dtype), tf.cast(self.iterations + 1, dtype), decay, grad_scale)


_SUMMED = threading.local()  # (optimizer, grad_scale) while summed gradients are applied, per replica thread


@contextlib.contextmanager
def _summed_gradients(optimizer, grad_scale=None):
    """``optimizer`` (an XLNetAdamW) applies gradients already summed over replicas, times ``grad_scale``."""
    _SUMMED.value = (optimizer, grad_scale)
    try:
        yield
    finally:
        _SUMMED.value = None


def layerwise_lr_multipliers(model, rate: float) -> dict[str, np.ndarray | float]:
    """Per-variable learning-rate multipliers for layer-wise decay ``rate`` (1.0 = off), keyed by variable path.

    ``model`` is an XLNet task model (with ``.xlnet``) or the network itself. Layer ``l`` gets
    ``rate^(n_layer-1-l)``; the word embedding and ``mask_emb`` get ``rate^n_layer``; the stacked per-layer
    ``r_*_bias``/``seg_embed`` variables get the per-layer factors along their first axis; everything outside
    the network (task heads) keeps 1.
    """
    if rate == 1.0:
        return {}
    network = getattr(model, "xlnet", model)
    n_layer = network.config.n_layer
    per_layer = np.array([rate ** (n_layer - 1 - i) for i in range(n_layer)], np.float32)
    multipliers = {}
    for i, block in enumerate(network.blocks):
        for var in block.weights:
            multipliers[var.path] = float(per_layer[i])
    for var in (network.word_embedding, network.mask_emb):
        multipliers[var.path] = float(rate ** n_layer)
    stacked = [network.seg_embed] + ([network.r_w_bias, network.r_r_bias, network.r_s_bias]
                                     if network.config.untie_r else [])
    for var in stacked:
        multipliers[var.path] = per_layer.reshape((-1,) + (1,) * (len(var.shape) - 1))
    if not network.config.untie_r:  # shared biases: treat them like the embeddings (below every layer)
        for var in (network.r_w_bias, network.r_r_bias, network.r_s_bias):
            multipliers[var.path] = float(rate ** n_layer)
    return multipliers


def create_optimizer(model, learning_rate: float, train_steps: int, warmup_steps: int = 0,
                     decay_method: str = "poly", min_lr_ratio: float = 0.0, weight_decay: float = 0.0,
                     adam_epsilon: float = 1e-8, lr_layer_decay_rate: float = 1.0, loss_scale: bool = False,
                     adam_bias_correction: bool = True):
    """The optimizer for ``model``, with exclusions and multipliers resolved from its variables.

    ``loss_scale`` wraps it in Keras' dynamic ``LossScaleOptimizer`` (needed for mixed_float16).
    ``adam_bias_correction`` False: the original's ``AdamWeightDecayOptimizer`` update (no ``1 - beta^t``).
    Build it inside ``strategy.scope()`` and call ``optimizer.build(model.trainable_variables)`` there.
    """
    schedule = WarmupDecaySchedule(learning_rate, warmup_steps, train_steps, min_lr_ratio, decay_method)
    optimizer = XLNetAdamW(learning_rate=schedule, weight_decay=float(weight_decay), beta_1=0.9, beta_2=0.999,
                           epsilon=adam_epsilon, lr_multipliers=layerwise_lr_multipliers(model, lr_layer_decay_rate),
                           no_decay_paths=[v.path for v in model.trainable_variables if _NO_DECAY.search(v.path)],
                           adam_bias_correction=adam_bias_correction)
    if loss_scale:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def apply_gradients_across_replicas(optimizer, grads, variables, clip_norm: float):
    """Sums ``grads`` over replicas, clips them to global norm ``clip_norm`` (<= 0: no clipping) and applies them.

    Call in replica context (inside ``strategy.run``). Returns the global gradient norm before clipping.
    With a ``LossScaleOptimizer`` the gradients are those of the scaled loss; they are unscaled for the norm
    and the clip, and the optimizer skips the step (and lowers the scale) if they are not finite.
    """
    # Variables outside this loss (e.g. mask_emb when fine-tuning without the query stream) get no update.
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not isinstance(inner, XLNetAdamW):
        raise TypeError(f"apply_gradients_across_replicas needs create_optimizer's XLNetAdamW (which takes summed "
                        f"gradients), got {type(inner).__name__}")
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    scale = None
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        scale = tf.cast(optimizer.scale_loss(tf.constant(1.0)), tf.float32)
        grads = [tf.cast(g, tf.float32) / scale for g in grads]
    norm = tf.linalg.global_norm([_summed_rows(g) if isinstance(g, tf.IndexedSlices) else g for g in grads])
    clip_scale = _clip_scale(norm, clip_norm) if clip_norm > 0 else None
    if scale is None:  # the clip multiply happens inside the update
        optimizer.apply_summed(grads, variables, clip_scale)
        return norm
    # The LossScaleOptimizer checks the scaled gradients, then unscales what it is given.
    if clip_scale is not None:
        grads = [g * clip_scale for g in grads]
    _apply_loss_scaled(optimizer, [g * scale for g in grads], variables)
    return norm


def _apply_loss_scaled(optimizer, grads, variables):
    """``optimizer.apply`` (a LossScaleOptimizer around an XLNetAdamW) for gradients already summed over replicas:
    Keras' own finite check, skip and loss-scale update, with the inner optimizer told that they are summed on
    the thread where it applies them. Keras' ``apply`` calls the inner optimizer from ``call_for_each_replica``
    inside a ``merge_call``, i.e. on new replica threads that do not see ``_SUMMED`` set on this one: it summed
    the summed gradients again (n replicas applied n times the gradient)."""
    inner = optimizer.inner_optimizer
    if not optimizer.built:
        optimizer.build(variables)

    def finite_step(grads, variables):
        with _summed_gradients(inner):
            optimizer._stateful_handle_finite_grads(grads, variables)

    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.cond(optimizer.check_finite(grads), lambda: finite_step(grads, variables),
                optimizer._stateful_handle_non_finite_grads)
        return

    # A cond whose branch calls merge_call (the inner optimizer's update) must be built in cross-replica context.
    def cross_replica(distribution, grads, variables):
        # Summed gradients: every replica finds the same, the first one's answer is all of them.
        finite = distribution.experimental_local_results(
            distribution.extended.call_for_each_replica(optimizer.check_finite, args=(grads,)))[0]
        tf.cond(finite, lambda: distribution.extended.call_for_each_replica(finite_step, args=(grads, variables)),
                optimizer._stateful_handle_non_finite_grads)

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(grads, variables))


def _summed_rows(grad: tf.IndexedSlices) -> tf.Tensor:
    """The rows of an embedding lookup's gradient (a row per token) with those of one index summed, for its norm:
    ``global_norm`` reads an IndexedSlices' rows as they are, repeated tokens apart, a norm that is not the
    gradient's (a loss-scaled gradient, made dense, was clipped by the other). Sorted and numbered rather than
    ``tf.unique`` (whose output has a dynamic shape, which XLA cannot compile statically) or made dense (the
    whole table, not the batch's rows)."""
    order = tf.argsort(grad.indices)
    indices = tf.gather(grad.indices, order)
    first = tf.not_equal(indices, tf.roll(indices, 1, axis=0)) | tf.equal(tf.range(tf.size(indices)), 0)
    return tf.math.unsorted_segment_sum(tf.gather(grad.values, order), tf.cumsum(tf.cast(first, tf.int32)) - 1,
                                        tf.shape(indices)[0])


def _clip_scale(norm, clip_norm: float):
    """``tf.clip_by_global_norm``'s factor: ``min(1, clip_norm / norm)``, NaN if ``norm`` is not finite."""
    return clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip_norm) + (norm - norm)
