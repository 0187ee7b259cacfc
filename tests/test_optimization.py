"""The optimizer against a NumPy transcription of its documented math: bias-corrected Adam, decoupled weight
decay with the exclusion list, per-variable (and per-slice) learning-rate multipliers, the warmup/decay schedule
and global-norm clipping after the cross-replica sum."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from needs import require_compiler
from xlnet_tf import XLNetConfig, XLNetPretrainer, kernels
from xlnet_tf.training.optimization import (WarmupDecaySchedule, XLNetAdamW, apply_gradients_across_replicas,
                                            create_optimizer, layerwise_lr_multipliers)


def numpy_adamw(params, grads_per_step, lrs, multipliers, decayed, wd, b1=0.9, b2=0.999, eps=1e-8,
                bias_correction=True):
    """Decay ``p -= p * wd * lr_p`` (decayed variables), then Adam with (or without) bias correction at ``lr_p``."""
    params = {k: v.astype(np.float64).copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        for k in params:
            lr_k = lr * multipliers.get(k, 1.0)
            if k in decayed:
                params[k] -= params[k] * wd * lr_k
            g = grads[k].astype(np.float64)
            m[k] += (g - m[k]) * (1 - b1)
            v2[k] += (g * g - v2[k]) * (1 - b2)
            alpha = lr_k * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) if bias_correction else lr_k
            params[k] -= alpha * m[k] / (np.sqrt(v2[k]) + eps)
    return params


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adamw_matches_the_reference_with_decay_exclusions_and_multipliers(bias_correction):
    rng = np.random.default_rng(0)
    init = {"kernel": rng.normal(size=(4, 3)), "bias": rng.normal(size=(3,)),
            "stacked": rng.normal(size=(2, 3)), "scaled": rng.normal(size=(5,))}
    variables = {k: keras.Variable(v.astype(np.float32), name=k) for k, v in init.items()}
    multipliers = {"stacked": np.array([[0.5], [1.0]], np.float32), "scaled": 0.25}
    schedule = WarmupDecaySchedule(1e-2, warmup_steps=2, decay_steps=10)
    opt = XLNetAdamW(learning_rate=schedule, weight_decay=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                     lr_multipliers={variables[k].path: m for k, m in multipliers.items()},
                     adam_bias_correction=bias_correction)
    opt.exclude_from_weight_decay(var_list=[variables["bias"]])
    var_list = list(variables.values())
    opt.build(var_list)
    grads_per_step = [{k: rng.normal(size=v.shape) for k, v in init.items()} for _ in range(4)]
    step = tf.function(lambda grads: opt.apply(grads, var_list))
    lrs = []
    for grads in grads_per_step:
        lrs.append(float(schedule(opt.iterations)))
        step([tf.constant(grads[k], tf.float32) for k in variables])
    expected = numpy_adamw(init, grads_per_step, lrs, {k: np.asarray(m, np.float64) for k, m in multipliers.items()},
                           decayed={"kernel", "stacked", "scaled"}, wd=0.1, bias_correction=bias_correction)
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(5e-3)  # linear warmup from 0
    for k, var in variables.items():
        np.testing.assert_allclose(var.numpy(), expected[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_xlnet_adamw_config_round_trips_and_refuses_a_model_it_does_not_name():
    """create_optimizer's settings (schedule, layer-wise multipliers, decay exclusions) live in the optimizer's
    config by variable path: from_config gives the same optimizer; built for other variables it raises."""
    model = XLNetPretrainer(XLNetConfig(n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=20))
    opt = create_optimizer(model, 1e-3, train_steps=10, warmup_steps=2, weight_decay=0.01, lr_layer_decay_rate=0.5,
                           adam_bias_correction=False)
    config = keras.saving.serialize_keras_object(opt)
    again = keras.saving.deserialize_keras_object(config)
    assert isinstance(again, XLNetAdamW) and again.get_config() == opt.get_config()
    assert again.adam_bias_correction is False
    again.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if again._use_weight_decay(v)}
    assert "transformer/layer_0/rel_attn/q_kernel" in decayed and not any(p.endswith("gamma") for p in decayed)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="name none of the variables it is built for"):
        keras.saving.deserialize_keras_object(config).build(other.trainable_variables)


def test_schedule_warmup_then_poly_or_cosine_to_the_floor():
    poly = WarmupDecaySchedule(1.0, warmup_steps=10, decay_steps=110, min_lr_ratio=0.1)
    cos = WarmupDecaySchedule(1.0, warmup_steps=10, decay_steps=110, min_lr_ratio=0.1, decay_method="cos")
    assert float(poly(5)) == pytest.approx(0.5)
    assert float(poly(10)) == pytest.approx(1.0)
    assert float(poly(60)) == pytest.approx(0.1 + 0.9 * 0.5)
    assert float(poly(500)) == pytest.approx(0.1)
    assert float(cos(60)) == pytest.approx(0.1 + 0.9 * 0.5)
    assert float(cos(35)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)))
    with pytest.raises(ValueError, match="warmup"):
        WarmupDecaySchedule(1.0, warmup_steps=10, decay_steps=10)


def _mirrored():
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def test_clipping_uses_the_norm_of_the_summed_gradients():
    """Two replicas with gradients g1, g2: the update must be that of clip(g1 + g2), not clip(g1) + clip(g2)
    (Adam's first moment after one step is (1 - beta_1) times the clipped gradient)."""
    strategy = _mirrored()
    with strategy.scope():
        var = keras.Variable(np.zeros(2, np.float32), name="w")
        opt = XLNetAdamW(learning_rate=1.0)
        opt.build([var])

    def step(opt):
        def replica_fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            grad = tf.where(tf.equal(rid, 0), tf.constant([3.0, 0.0]), tf.constant([0.0, 4.0]))
            return apply_gradients_across_replicas(opt, [grad], [var], clip_norm=1.0)
        return strategy.run(replica_fn)

    norm = strategy.experimental_local_results(tf.function(step)(opt))[0]
    assert float(norm) == pytest.approx(5.0)
    np.testing.assert_allclose(opt._momentums[0].numpy(), [0.06, 0.08], rtol=1e-5)
    # An optimizer that would sum the summed gradients again is refused.
    with strategy.scope():
        plain_sgd = keras.optimizers.SGD(learning_rate=1.0)
        plain_sgd.build([var])
    with pytest.raises(TypeError, match="needs create_optimizer's XLNetAdamW"):
        tf.function(step)(plain_sgd)


def test_the_clipped_norm_of_an_embedding_gradient_is_that_of_the_gradient():
    """An embedding lookup's gradient holds a row per token: global_norm read the rows of repeated tokens apart
    (sqrt(2^2 + 2^2) for a token seen twice, not 4), so float32 fine-tuning clipped by another norm than
    mixed_float16's, whose loss scaling makes the gradient dense. Both clip by the gradient's norm now."""
    ids = tf.constant([5, 5, 7, 5])
    norms = []
    for loss_scale in (False, True):
        table = keras.Variable(np.ones((10, 2), np.float32), name="table")
        opt = XLNetAdamW(learning_rate=0.1)
        if loss_scale:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        opt.build([table])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, ids))
            loss = opt.scale_loss(loss) if loss_scale else loss
        (grad,) = tape.gradient(loss, [table])
        assert isinstance(grad, tf.IndexedSlices)
        norms.append(float(apply_gradients_across_replicas(opt, [grad], [table], clip_norm=1.0)))
    assert norms == [pytest.approx(np.sqrt(2 * 3.0 ** 2 + 2 * 1.0 ** 2))] * 2  # rows 5 (x3) and 7, two columns


@pytest.mark.parametrize("loss_scale", [False, True])
def test_model_fit_with_xlnet_adamw_sums_gradients_over_replicas(loss_scale):
    """Used as a plain Keras optimizer (model.fit) under two replicas, XLNetAdamW sums the replicas' gradients
    once, as Keras does, inside mixed_float16's LossScaleOptimizer too: the same weights and Adam moments as on
    one device (the moments show a gradient summed twice, Adam's normalised step hardly does)."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 1)).astype(np.float32)
    init = [rng.normal(size=(3, 1)).astype(np.float32), np.zeros(1, np.float32)]

    def fit(strategy):
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
            model.set_weights(init)
            opt = XLNetAdamW(learning_rate=0.1, weight_decay=0.01)
            model.compile(optimizer=keras.optimizers.LossScaleOptimizer(opt) if loss_scale else opt, loss="mse")
        model.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0)
        return model.get_weights() + [m.numpy() for m in opt._momentums]

    for got, want in zip(fit(_mirrored()), fit(tf.distribute.get_strategy())):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_layerwise_multipliers_cover_layers_embeddings_and_stacked_biases():
    config = XLNetConfig(n_layer=3, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=20)
    model = XLNetPretrainer(config)
    multipliers = layerwise_lr_multipliers(model, 0.5)
    net = model.xlnet
    assert multipliers[net.blocks[2].rel_attn.q_kernel.path] == 1.0
    assert multipliers[net.blocks[0].ff.layer_1.kernel.path] == 0.25
    assert multipliers[net.word_embedding.path] == 0.125
    np.testing.assert_allclose(multipliers[net.r_w_bias.path].ravel(), [0.25, 0.5, 1.0])
    assert model.lm_bias.path not in multipliers  # heads train at the base rate
    assert layerwise_lr_multipliers(model, 1.0) == {}
    # The optimizer built from them: LayerNorm and biases are excluded from decay, r_*_bias are not.
    opt = create_optimizer(model, 1e-3, 100, weight_decay=0.01, lr_layer_decay_rate=0.5)
    opt.build(model.trainable_variables)
    assert not opt._use_weight_decay(net.blocks[0].ff.layer_norm.gamma)
    assert not opt._use_weight_decay(net.blocks[0].ff.layer_1.bias)
    assert opt._use_weight_decay(net.r_w_bias)
    assert opt._use_weight_decay(net.blocks[0].rel_attn.q_kernel)


def _train(backend, clip_norm, steps=3, strategy=None, jit_compile=False, loss_scale=False, bias_correction=True):
    """``steps`` of apply_gradients_across_replicas on a few variables (decayed, excluded, scalar and per-slice
    multipliers), through mixed_float16's LossScaleOptimizer if ``loss_scale``; returns (variables, moments, the
    step's op types)."""
    strategy = strategy or tf.distribute.get_strategy()
    rng = np.random.default_rng(1)
    init = {"kernel": rng.normal(size=(64, 33)), "bias": rng.normal(size=(33,)),
            "scaled": rng.normal(size=(7, 5)), "stacked": rng.normal(size=(2, 9))}
    with strategy.scope():
        variables = [keras.Variable(v.astype(np.float32), name=k) for k, v in init.items()]
        inner = XLNetAdamW(learning_rate=WarmupDecaySchedule(1e-2, 1, 10), weight_decay=0.1, epsilon=1e-8,
                           lr_multipliers={variables[2].path: 0.25,
                                           variables[3].path: np.array([[0.5], [1.0]], np.float32)},
                           adam_bias_correction=bias_correction)
        inner.exclude_from_weight_decay(var_list=[variables[1]])
        opt = keras.optimizers.LossScaleOptimizer(inner) if loss_scale else inner
        opt.build(variables)
    grads = [[tf.constant(rng.normal(size=v.shape) * 3, tf.float32) for v in variables] for _ in range(steps)]

    def replica_fn(g):  # each replica's share: the all-reduced sum is g (halving and the power-of-2 scale: exact)
        share = 1.0 / tf.distribute.get_replica_context().num_replicas_in_sync
        if loss_scale:  # the gradient of the scaled loss
            share *= opt.scale_loss(tf.constant(1.0))
        return apply_gradients_across_replicas(opt, [x * share for x in g], variables, clip_norm)

    fn = tf.function(replica_fn, jit_compile=True) if jit_compile else replica_fn
    step = tf.function(lambda g: strategy.run(fn, args=(g,)))
    with kernels.use(backend):
        graph = step.get_concrete_function(grads[0]).graph
    op_types = {op.type for op in graph.get_operations()}
    op_types |= {n.op for f in graph.as_graph_def().library.function for n in f.node_def}
    for g in grads:
        step(g)
    moments = [m.numpy() for m in inner._momentums + inner._velocities]
    return [v.numpy() for v in variables], moments, op_types


@pytest.mark.parametrize("clip_norm", [1.0, 0.0])
def test_fused_adamw_kernel_is_bit_identical_to_tensorflows_ops(clip_norm):
    """On CPU the clip scale, decay and Adam run as one custom kernel; the variables and moments after several
    steps must equal TensorFlow's ops (clip multiply, decay assign, ResourceApplyAdam) exactly, with clipping
    active (gradient norm ~ 150) or off, decay exclusions and learning-rate multipliers."""
    require_compiler()
    fused_vars, fused_moments, fused_ops = _train("fast", clip_norm)
    plain_vars, plain_moments, plain_ops = _train("plain", clip_norm)
    assert "XlnetFusedAdamW" in fused_ops and "ResourceApplyAdam" not in fused_ops
    assert "XlnetFusedAdamW" not in plain_ops and "ResourceApplyAdam" in plain_ops
    for a, b in zip(fused_vars + fused_moments, plain_vars + plain_moments):
        np.testing.assert_array_equal(a, b)


def test_fused_adamw_under_mirrored_strategy_and_inside_xla():
    """Two CPU replicas (the update runs in cross-replica context on another thread), and a jit_compiled step
    (XLA cannot run the custom kernel: TensorFlow's ops are used there): the same update as the plain path."""
    require_compiler()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    plain_vars, _, _ = _train("plain", 1.0, strategy=strategy)
    fused_vars, _, fused_ops = _train("fast", 1.0, strategy=strategy)
    assert "XlnetFusedAdamW" in fused_ops
    for a, b in zip(fused_vars, plain_vars):
        np.testing.assert_array_equal(a, b)
    xla_vars, _, _ = _train("fast", 1.0, jit_compile=True)
    reference, _, _ = _train("plain", 1.0)
    for a, b in zip(xla_vars, reference):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_loss_scaled_steps_on_two_replicas_equal_one_device_as_float32_steps_do(bias_correction):
    """mixed_float16 (Keras' LossScaleOptimizer) on two replicas must apply the summed, clipped gradient once, as
    float32 does: Keras applies the inner optimizer on new replica threads, which summed the summed gradients
    again (twice the gradient in Adam's moments, the clip bound exceeded twice over)."""
    reference_vars, reference_moments, _ = _train("fast", 1.0, bias_correction=bias_correction)  # float32, 1 device
    for loss_scale, strategy in ((True, None), (False, _mirrored()), (True, _mirrored())):
        got_vars, got_moments, _ = _train("fast", 1.0, strategy=strategy, loss_scale=loss_scale,
                                          bias_correction=bias_correction)
        run = f"loss_scale={loss_scale}, {2 if strategy else 1} replica(s)"
        for got, want in zip(got_moments, reference_moments):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=f"Adam's moments, {run}")
        for got, want in zip(got_vars, reference_vars):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=f"weights, {run}")


def numpy_adam_weight_decay_optimizer(params, grads_per_step, lrs, decayed, wd, clip, b1=0.9, b2=0.999, eps=1e-6):
    """The original's update when weight_decay > 0, as ``model_utils.get_train_op`` and
    ``AdamWeightDecayOptimizer.apply_gradients`` write it: ``tf.clip_by_global_norm``, then per variable
    ``update = next_m / (sqrt(next_v) + eps)`` (no bias correction), ``+ wd * param`` unless excluded,
    ``param - lr * update``."""
    params = {k: v.astype(np.float64).copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for grads, lr in zip(grads_per_step, lrs):
        norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
        for k, param in params.items():
            grad = grads[k].astype(np.float64) * clip / max(norm, clip)
            next_m = b1 * m[k] + (1.0 - b1) * grad
            next_v = b2 * v[k] + (1.0 - b2) * np.square(grad)
            update = next_m / (np.sqrt(next_v) + eps)
            if k in decayed:
                update += wd * param
            params[k], m[k], v[k] = param - lr * update, next_m, next_v
    return params


def test_without_bias_correction_the_update_is_the_originals_adam_weight_decay_optimizer():
    """With weight decay the original trains with AdamWeightDecayOptimizer, which has no bias correction (its
    early steps several times larger): adam_bias_correction=False reproduces three of its steps (clipped, the
    bias excluded from decay) to float32 round-off; the default keeps the bias-corrected update of earlier runs."""
    rng = np.random.default_rng(5)
    init = {"kernel": rng.normal(size=(4, 3)), "bias": rng.normal(size=(3,))}
    grads = [{k: rng.normal(size=p.shape) * 2 for k, p in init.items()} for _ in range(3)]  # norm ~8: clipped
    lrs = [1e-2 * (1 - t / 10) for t in range(3)]  # no warmup, linear decay to 0 at step 10
    clipped = []
    for g in grads:
        norm = math.sqrt(sum(float(np.sum(x ** 2)) for x in g.values()))
        clipped.append({k: x / max(norm, 1.0) for k, x in g.items()})
    expected = {False: numpy_adam_weight_decay_optimizer(init, grads, lrs, {"kernel"}, wd=0.01, clip=1.0),
                True: numpy_adamw(init, clipped, lrs, {}, {"kernel"}, wd=0.01, eps=1e-6)}
    for bias_correction in (False, True):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.set_weights([init["kernel"].astype(np.float32), init["bias"].astype(np.float32)])
        opt = create_optimizer(model, 1e-2, train_steps=10, weight_decay=0.01, adam_epsilon=1e-6,
                               adam_bias_correction=bias_correction)
        opt.build(model.trainable_variables)
        step = tf.function(lambda g: apply_gradients_across_replicas(opt, g, model.trainable_variables, 1.0))
        for g in grads:
            step([tf.constant(g["kernel"], tf.float32), tf.constant(g["bias"], tf.float32)])
        kernel, bias = model.get_weights()
        for k, got in (("kernel", kernel), ("bias", bias)):
            np.testing.assert_allclose(got, expected[bias_correction][k], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{k}, adam_bias_correction={bias_correction}")


def test_the_adam_bias_correction_setting_reaches_the_runs_optimizer(tmp_path):
    """--adam_bias_correction (on by default: earlier runs' numbers) is the optimizer's of every training tool."""
    from xlnet_tf.training.settings import PretrainSettings
    from xlnet_tf.training.setup import setup_training

    for value in (True, False):
        settings = PretrainSettings(model_dir=str(tmp_path / str(value)), train_steps=10, adam_bias_correction=value)
        training = setup_training(tf.distribute.get_strategy(), settings, checkpoint_name="model",
                                  build_model=lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))
        assert training.optimizer.adam_bias_correction is value
    assert PretrainSettings().adam_bias_correction is True


@pytest.mark.alone
def test_fused_adamw_falls_back_when_the_kernel_cannot_be_built(monkeypatch, tmp_path, caplog):
    """No usable compiler: a warning naming the failure, TensorFlow's ops, the same update; nothing cached."""
    from xlnet_tf import ops

    monkeypatch.setenv("CXX", "/bin/false")
    monkeypatch.setenv("XLNET_TF_OPS_DIR", str(tmp_path))
    ops._library.cache_clear()
    try:
        assert ops.fused_adamw() is None
        with pytest.raises(RuntimeError, match="building xlnet_tf/ops failed"):
            ops.build()
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        with pytest.raises(RuntimeError, match="building xlnet_tf/ops failed.*no-such-compiler"):
            ops.build()
        assert list(tmp_path.iterdir()) == []  # no half-written library left behind
        fallback_vars, _, fallback_ops = _train("fast", 1.0)
        assert "XlnetFusedAdamW" not in fallback_ops
    finally:
        ops._library.cache_clear()
    plain_vars, _, _ = _train("plain", 1.0)
    for a, b in zip(fallback_vars, plain_vars):
        np.testing.assert_array_equal(a, b)


def test_fused_adamw_kernel_rejects_bad_inputs_by_name():
    require_compiler()
    from xlnet_tf import ops

    op = ops.fused_adamw()
    f32 = [tf.Variable(tf.zeros([3])) for _ in range(3)]
    scalars = [tf.constant(x) for x in (1.0, 1.0, 1e-3, 0.9, 0.999, 0.9, 0.999, 1e-8)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have one shape.*\\[3\\].*\\[4\\]"):
        op(*[v.handle for v in f32], tf.zeros([4]), *scalars)
    half = tf.Variable(tf.zeros([3], tf.bfloat16))
    with pytest.raises(tf.errors.InvalidArgumentError, match="input 0 must be a float32 variable, got bfloat16"):
        op(half.handle, f32[1].handle, f32[2].handle, tf.zeros([3]), *scalars)
    op(*[v.handle for v in f32], tf.ones([3]), *scalars)  # a valid call updates in place
    assert float(f32[0][0]) == pytest.approx(-1e-3, rel=1e-4)  # Adam's first step: -lr * sign(g)


@pytest.mark.alone
def test_fused_adamw_library_is_built_once_into_a_shared_cache(monkeypatch, tmp_path):
    """``python -m xlnet_tf.ops`` / first use: one library in $XLNET_TF_OPS_DIR, readable by other users, no
    temporary files left; a second build reuses it, a changed source builds anew. (A one-function source with
    TensorFlow's real flags: the caching is under test here; the kernels' own build is every fast-path test's.)"""
    require_compiler()
    from xlnet_tf import ops

    source = tmp_path / "probe.cc"
    source.write_text("int xlnet_tf_probe() { return 1; }\n")
    monkeypatch.setattr(ops, "_SOURCES", [source])
    monkeypatch.setattr(ops, "_HEADERS", [])
    monkeypatch.setenv("XLNET_TF_OPS_DIR", str(tmp_path / "shared"))
    path = ops.build()
    assert path.parent == tmp_path / "shared" and [p.name for p in path.parent.iterdir()] == [path.name]
    assert path.stat().st_mode & 0o444 == 0o444
    mtime = path.stat().st_mtime_ns
    assert ops.build() == path and path.stat().st_mtime_ns == mtime
    source.write_text(source.read_text() + "int xlnet_tf_probe2() { return 2; }\n")
    changed = ops.build()
    assert changed != path and sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, changed.name])


def _probe_library(monkeypatch, tmp_path, text="int xlnet_tf_probe() { return 1; }\n"):
    """xlnet_tf.ops set to build a one-function source into tmp_path/shared (the caching under test, not the
    kernels)."""
    from xlnet_tf import ops

    source = tmp_path / "probe.cc"
    source.write_text(text)
    monkeypatch.setattr(ops, "_SOURCES", [source])
    monkeypatch.setattr(ops, "_HEADERS", [])
    monkeypatch.setenv("XLNET_TF_OPS_DIR", str(tmp_path / "shared"))
    return ops


@pytest.mark.alone
def test_one_kernel_library_serves_every_install_path_of_a_tensorflow(monkeypatch, tmp_path):
    """The same TensorFlow reached through another path (another checkout's virtual environment, a symlink) uses
    the library built before instead of compiling its own: where TensorFlow is installed does not change the
    binary. Its flags do (another flag builds anew). A build is logged before it starts, naming where it goes."""
    require_compiler()
    ops = _probe_library(monkeypatch, tmp_path)
    logged = []
    monkeypatch.setattr(ops.logging, "info", lambda message, *args: logged.append(message % args))
    path = ops.build()
    assert len(logged) == 1 and str(path) in logged[0] and "once per TensorFlow version" in logged[0]

    installed = tf.sysconfig.get_lib()
    other = tmp_path / "other-venv" / "tensorflow"
    other.parent.mkdir()
    other.symlink_to(installed)
    for name in ("get_compile_flags", "get_link_flags"):
        flags = getattr(tf.sysconfig, name)()
        assert any(installed in flag for flag in flags), flags
        monkeypatch.setattr(tf.sysconfig, name, lambda flags=flags: [f.replace(installed, str(other)) for f in flags])
    monkeypatch.setattr(tf.sysconfig, "get_lib", lambda: str(other))
    assert ops.build() == path and len(logged) == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]

    compile_flags = tf.sysconfig.get_compile_flags()
    monkeypatch.setattr(tf.sysconfig, "get_compile_flags", lambda: compile_flags + ["-DXLNET_TF_PROBE=1"])
    assert ops.build() != path and len(logged) == 2


@pytest.mark.alone
def test_a_kernel_build_removes_what_killed_builds_left_and_not_a_running_ones(monkeypatch, tmp_path):
    """A build killed with SIGKILL leaves its temporary file behind; the next build removes it (this host's
    whose process is gone, or any over an hour old), and leaves the file of a build still running (this host's
    live process, or another host's recent one) to that build."""
    import os
    import socket
    import subprocess
    import sys
    import time

    require_compiler()
    ops = _probe_library(monkeypatch, tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    host, key = socket.gethostname(), "xlnet_tf_ops-0123456789abcdef.so"
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    removed = [f"{key}.{host}.{gone}.k1ll3d.tmp", f"{key}.elsewhere.example.7.k1ll3d.tmp", f"{key}.a1b2c3.tmp"]
    kept = [f"{key}.{host}.{os.getpid()}.bu1ld.tmp", f"{key}.elsewhere.example.8.bu1ld.tmp"]
    for name in removed + kept:
        (shared / name).write_bytes(b"half a library")
    two_hours_ago = time.time() - 7200
    for name in removed[1:]:  # another host's and an unnamed one: only their age tells
        os.utime(shared / name, (two_hours_ago, two_hours_ago))
    path = ops.build()
    assert sorted(p.name for p in shared.iterdir()) == sorted([path.name, *kept])
