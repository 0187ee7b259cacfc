"""Optimisation as the original ``model_utils.get_train_op``, with its known defects fixed.

* Learning rate: linear warmup to ``learning_rate`` over ``warmup_steps``, then linear ("poly") or cosine decay
  to ``learning_rate * min_lr_ratio`` at ``train_steps``.
* AdamW with decoupled weight decay; LayerNorm parameters and biases are excluded, the relative-attention
  biases ``r_w/r_r/r_s_bias`` are decayed (the original's include list).
* Gradients are clipped by their global norm *after* they are summed over replicas (Keras' own clipping runs
  per replica before the all-reduce, which is not the original's semantics).
* On CPU the whole update of a float32 variable (clip scale, decay, Adam) is one custom kernel
  (``xlnet_tf.ops``), bit-identical to TensorFlow's ops and about twice as fast; elsewhere (GPU, TPU, inside
  XLA, or without a C++ compiler) TensorFlow's ops run.
* Layer-wise learning-rate decay as true per-variable learning rates: layer ``l`` of ``L`` trains at
  ``lr * rate^(L-1-l)``, the embeddings at ``lr * rate^L``, heads at ``lr``. The original multiplied the
  *gradients*, which Adam's normalisation almost cancels. Per-layer slices of the stacked ``[n_layer, ...]``
  bias variables get their own rate.
"""

from __future__ import annotations

import math
import re
import threading

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf import ops

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


class SummedGradients:
    """Mixin for a Keras optimizer whose gradients arrive already summed over replicas (by
    ``apply_gradients_across_replicas``): Keras must not sum them a second time."""

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


class XLNetAdamW(SummedGradients, keras.optimizers.AdamW):
    """AdamW whose gradients arrive already summed over replicas (and clipped), with per-variable learning-rate
    multipliers (scalars or arrays broadcastable to the variable) applied to the update and the weight decay.

    Use with ``apply_gradients_across_replicas``, which does the all-reduce and the global-norm clip.
    """

    def __init__(self, lr_multipliers: dict[str, np.ndarray | float] | None = None, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        self._lr_multipliers_by_path = dict(lr_multipliers or {})
        self._multiplier_by_key = {}
        self.fused = fused  # False: always TensorFlow's ops, never the fused CPU kernel

    def build(self, variables):
        super().build(variables)
        for var in variables:
            multiplier = self._lr_multipliers_by_path.get(var.path)
            if multiplier is not None and np.any(np.asarray(multiplier) != 1.0):
                self._multiplier_by_key[self._var_key(var)] = np.asarray(multiplier, np.float32)

    def _scaled_lr(self, variable, learning_rate):
        multiplier = self._multiplier_by_key.get(self._var_key(variable))
        if multiplier is None:
            return learning_rate
        return tf.cast(learning_rate, variable.dtype) * tf.constant(multiplier, variable.dtype)

    def apply_scaled(self, grads, variables, grad_scale=None):
        """``apply([g * grad_scale for g in grads], variables)``; where the fused kernel runs, the scale is
        applied inside it instead of in a pass of its own. ``grad_scale``: a float32 scalar tensor or None."""
        _PENDING_SCALE.value = (self, grad_scale)
        try:
            self.apply(grads, variables)
        finally:
            _PENDING_SCALE.value = None

    def _fuses(self, variable) -> bool:
        """Whether ``variable`` (a per-device component) is updated by the fused CPU kernel."""
        multiplier = self._multiplier_by_key.get(self._var_key(variable))
        return (self.fused and variable.dtype == tf.float32 and (multiplier is None or not multiplier.ndim)
                and tf.DeviceSpec.from_string(variable.device).device_type == "CPU" and not ops.in_xla_context()
                and ops.fused_adamw() is not None)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        pending = getattr(_PENDING_SCALE, "value", None)
        grad_scale = pending[1] if pending is not None and pending[0] is self else None
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        # The scale travels as a merge_call argument: under MirroredStrategy the updates run on another thread.
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_update, self._distribution_strategy, list(zip(grads, variables)), learning_rate,
            grad_scale)

    def _distributed_update(self, distribution, grads_and_vars, learning_rate, grad_scale):
        for grad, var in grads_and_vars:
            distribution.extended.update(var, self._update_variable, args=(grad, learning_rate, grad_scale),
                                         group=False)

    def _update_variable(self, variable, gradient, learning_rate, grad_scale):
        if not self._fuses(variable):
            if grad_scale is not None:
                gradient = gradient * tf.cast(grad_scale, gradient.dtype)
            self.update_step(gradient, variable, learning_rate)
            return
        # One pass: g * grad_scale, var * (1 - wd * lr) (skipped by _apply_weight_decay), Adam.
        adam = self._adam_arguments(variable, learning_rate)
        one = tf.constant(1.0, tf.float32)
        decay = one - tf.cast(self.weight_decay, tf.float32) * adam["lr"] if self._decays(variable) else one
        ops.fused_adamw()(grad=tf.cast(gradient, tf.float32), decay=decay,
                          grad_scale=one if grad_scale is None else tf.cast(grad_scale, tf.float32), **adam)

    def _adam_arguments(self, variable, learning_rate) -> dict:
        """The variable and slot handles and the scalars of ``ResourceApplyAdam`` (also the fused kernel's):
        bias-corrected step size lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), in the variable's dtype."""
        dtype = variable.dtype
        local_step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        return dict(var=variable.handle, m=self._momentums[index].handle, v=self._velocities[index].handle,
                    lr=tf.cast(self._scaled_lr(variable, learning_rate), dtype),
                    beta1_power=tf.pow(beta_1, local_step), beta2_power=tf.pow(beta_2, local_step),
                    beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype))

    def _decays(self, variable) -> bool:
        return bool(self.weight_decay) and self._use_weight_decay(variable)

    def update_step(self, gradient, variable, learning_rate):
        multiplier = self._multiplier_by_key.get(self._var_key(variable))
        if multiplier is not None and multiplier.ndim:  # per-slice rates: Keras' element-wise Adam
            super().update_step(gradient, variable, self._scaled_lr(variable, learning_rate))
            return
        # Keras' Adam in one fused kernel per variable (the same formula: bias-corrected step size
        # lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), m/(sqrt(v) + epsilon)) instead of ~10 element-wise ops, each
        # a full pass over the variable; on CPU that is most of the optimizer's time.
        tf.raw_ops.ResourceApplyAdam(grad=tf.cast(gradient, variable.dtype), use_locking=False,
                                     **self._adam_arguments(variable, learning_rate))

    def _apply_weight_decay(self, variables):
        if not self.weight_decay:
            return

        def decay(distribution, variables):
            learning_rate = self.learning_rate  # the schedule, evaluated once per step
            for variable in variables:
                if not self._use_weight_decay(variable):
                    continue

                def fn(var, variable=variable):
                    if self._fuses(var):  # decayed inside the fused update
                        return
                    lr = self._scaled_lr(variable, learning_rate)
                    # var * (1 - wd * lr): one pass over the variable (Keras: var - var * wd * lr, three).
                    var.assign(var * (1.0 - tf.cast(self.weight_decay, var.dtype) * tf.cast(lr, var.dtype)))

                target = variable.value if isinstance(variable, keras.Variable) else variable
                distribution.extended.update(target, fn, group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(decay, self._distribution_strategy, variables)


_PENDING_SCALE = threading.local()  # (optimizer, grad_scale) during XLNetAdamW.apply_scaled, per replica thread


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
                     adam_epsilon: float = 1e-8, lr_layer_decay_rate: float = 1.0, loss_scale: bool = False):
    """The optimizer for ``model``, with exclusions and multipliers resolved from its variables.

    ``loss_scale`` wraps it in Keras' dynamic ``LossScaleOptimizer`` (needed for mixed_float16).
    Build it inside ``strategy.scope()`` and call ``optimizer.build(model.trainable_variables)`` there.
    """
    schedule = WarmupDecaySchedule(learning_rate, warmup_steps, train_steps, min_lr_ratio, decay_method)
    optimizer = XLNetAdamW(learning_rate=schedule, weight_decay=float(weight_decay), beta_1=0.9, beta_2=0.999,
                           epsilon=adam_epsilon, lr_multipliers=layerwise_lr_multipliers(model, lr_layer_decay_rate))
    optimizer.exclude_from_weight_decay(var_list=[v for v in model.trainable_variables if _NO_DECAY.search(v.path)])
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
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        if not isinstance(getattr(optimizer, "inner_optimizer", optimizer), SummedGradients):
            raise TypeError(f"{type(optimizer).__name__} would sum the already summed gradients again: use an "
                            "optimizer with the SummedGradients mixin (e.g. create_optimizer's XLNetAdamW)")
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    scale = None
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        scale = tf.cast(optimizer.scale_loss(tf.constant(1.0)), tf.float32)
        grads = [tf.cast(g, tf.float32) / scale for g in grads]
    norm = tf.linalg.global_norm(grads)
    if isinstance(optimizer, XLNetAdamW):  # the clip multiply happens inside its (fused) update
        optimizer.apply_scaled(grads, variables, _clip_scale(norm, clip_norm) if clip_norm > 0 else None)
        return norm
    if clip_norm > 0:
        grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
    if scale is not None:  # the LossScaleOptimizer unscales what it is given
        grads = [g * scale for g in grads]
    optimizer.apply(grads, variables)
    return norm


def _clip_scale(norm, clip_norm: float):
    """``tf.clip_by_global_norm``'s factor: ``min(1, clip_norm / norm)``, NaN if ``norm`` is not finite."""
    return clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip_norm) + (norm - norm)
