"""XLNetModel / XLNetPretrainer: exactness against the original's math, and the properties users rely on."""

import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from reference_xlnet import random_weights, reference_forward
from xlnet_tf import XLNetConfig, XLNetModel, XLNetPretrainer, kernels, ops
from xlnet_tf.layers.attention import (POSITION_CHUNK, RelativeAttention, attention_probs, gather_relative,
                                       rel_shift, shifted_position_scores)
from xlnet_tf.layers.position import RelativePositionEncoding

TINY = dict(n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=20, ff_activation="gelu", untie_r=True,
            mem_len=0, reuse_len=None, clamp_len=-1, same_length=False, bi_data=False, attn_type="bi")
HIDDEN_TOL, LOGIT_TOL = 2e-5, 1e-4


def make_model(weights, cfg, cls=XLNetPretrainer, dtype=None):
    model = cls(XLNetConfig(**cfg, dropout=0.0, dropatt=0.0), dtype=dtype)
    for name, var in model.tf1_variables().items():
        var.assign(weights[name].astype(np.float32))
    return model


def model_inputs(**arrays):
    out = {}
    for key, value in arrays.items():
        if value is None:
            continue
        if key == "mems":
            out[key] = [tf.constant(np.asarray(m, np.float32)) for m in value]
        elif key in ("input_ids", "segment_ids"):
            out[key] = tf.constant(value, tf.int32)
        else:
            out[key] = tf.constant(np.asarray(value, np.float32))
    return out


def random_batch(rng, batch=2, qlen=7, num_predict=3, left_pad=2, n_token=20):
    ids = rng.integers(0, n_token, (batch, qlen))
    seg = rng.integers(0, 2, (batch, qlen))
    pad = np.ones((batch, qlen))
    pad[-1, :left_pad] = 0  # left padding, as XLNet's fine-tuning inputs
    perm = (rng.random((batch, qlen, qlen)) < 0.4).astype(np.float32)
    tm = np.zeros((batch, num_predict, qlen), np.float32)
    for b in range(batch):
        for p, pos in enumerate(rng.choice(qlen, num_predict, replace=False)):
            tm[b, p, pos] = 1
    tm[-1, -1] = 0  # a padded target row, as in pretraining batches with fewer real targets
    return dict(input_ids=ids, segment_ids=seg, padding_mask=pad, perm_mask=perm, target_mapping=tm)


def assert_matches(ref, out):
    for key in ("sequence_output", "query_output"):
        if key in ref:
            np.testing.assert_allclose(out[key].numpy(), ref[key], atol=HIDDEN_TOL, rtol=0, err_msg=key)
        else:
            assert key not in out
    np.testing.assert_allclose(out["lm_logits"].numpy(), ref["lm_logits"], atol=LOGIT_TOL, rtol=0)
    if "new_mems" in ref:
        assert len(out["new_mems"]) == len(ref["new_mems"])
        for got, want in zip(out["new_mems"], ref["new_mems"]):
            np.testing.assert_allclose(got.numpy(), want, atol=HIDDEN_TOL, rtol=0, err_msg="new_mems")


# ----------------------------------------------------------------------------------------------------------
# Golden values derived by hand from the formulas.

def test_sinusoid_encoding_values():
    enc = RelativePositionEncoding(d_model=4)(qlen=2, klen=3).numpy()
    assert enc.shape == (1, 5, 4)  # distances 3, 2, 1, 0, -1
    for row, dist in enumerate([3, 2, 1, 0, -1]):
        # inv_freq = [1, 10000^-0.5 = 0.01]
        expected = [math.sin(dist), math.sin(dist * 0.01), math.cos(dist), math.cos(dist * 0.01)]
        np.testing.assert_allclose(enc[0, row], expected, atol=1e-6)


def test_sinusoid_clamp_and_bi_data():
    enc = RelativePositionEncoding(d_model=4, bi_data=True, clamp_len=1)(qlen=2, klen=3).numpy()
    assert enc.shape == (2, 5, 4)
    for row, dist in enumerate([1, 1, 1, 0, -1]):  # forward, clamped to [-1, 1]
        np.testing.assert_allclose(enc[0, row, 0], math.sin(dist), atol=1e-6)
        np.testing.assert_allclose(enc[1, row, 0], math.sin(-dist), atol=1e-6)  # backward = negated


def test_rel_shift_is_the_transformer_xl_skew():
    qlen, klen = 3, 5
    rlen = klen + qlen
    x = np.arange(2 * qlen * rlen, dtype=np.float32).reshape(1, 2, qlen, rlen)  # head-major [N, B, Q, R]
    out = rel_shift(tf.constant(x), klen).numpy()
    assert out.shape == (1, 2, qlen, klen)
    for i in range(qlen):
        for j in range(klen):
            # key j is at distance (klen - qlen + i) - j from query i; encoding row r has distance klen - r
            assert out[0, 1, i, j] == x[0, 1, i, qlen - i + j]
    # the gather form picks the same entries for queries placed at key coordinates klen - qlen + i
    mlen = klen - qlen
    pos = np.tile(mlen + np.arange(qlen), (2, 1))
    np.testing.assert_array_equal(gather_relative(tf.constant(x), tf.constant(pos, tf.int32), klen).numpy(), out)


def test_position_scores_chunk_by_chunk_are_the_skew():
    """``shifted_position_scores`` (the content stream's position term under XLA and on GPUs) is the skew of the
    scores against every encoding row, computed a chunk of queries at a time: the same values and gradients (the
    queries', the encoding's), with bi_data's two tables, inside XLA and outside; ``attention_probs`` reads it
    aligned as it reads the unshifted scores."""
    rng = np.random.default_rng(3)
    n, b, h, mlen, qlen, chunk = 2, 4, 8, 5, 12, 4
    klen = mlen + qlen
    for x in (1, 2):
        q = tf.constant(rng.normal(size=(n, b, qlen, h)), tf.float32)
        k_r = tf.constant(rng.normal(size=(n, x, klen + qlen, h)), tf.float32)
        d_out = tf.constant(rng.normal(size=(n, b, qlen, klen)), tf.float32)

        def step(q, k_r, chunked):
            with tf.GradientTape() as tape:
                tape.watch([q, k_r])
                if chunked:
                    out = shifted_position_scores(q, k_r, chunk)
                else:  # every row's scores against every encoding row (its table by batch half), then the skew
                    tables = tf.repeat(k_r, b // x, axis=1)  # [N, B, R, H]
                    out = rel_shift(tf.matmul(q, tables, transpose_b=True), klen)
                loss = tf.reduce_sum(out * d_out)
            return [out] + tape.gradient(loss, [q, k_r])

        for jit in (False, True):
            run = tf.function(step, jit_compile=jit)
            for name, a, c in zip(["scores", "d_q", "d_k_r"], run(q, k_r, True), run(q, k_r, False)):
                np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6, atol=1e-6 * np.abs(c).max(),
                                           err_msg=f"{name}, bi_data {x == 2}, jit {jit}")
    ac, bd = (tf.constant(rng.normal(size=(n, b, qlen, width)), tf.float32) for width in (klen, klen + qlen))
    with kernels.use("plain"):
        np.testing.assert_array_equal(attention_probs(ac, rel_shift(bd, klen), None, None, None, None, aligned=True),
                                      attention_probs(ac, bd, None, None, None, None))


@pytest.mark.parametrize("policy,tpu", [("float32", False), ("mixed_bfloat16", False), ("mixed_bfloat16", True)])
def test_content_stream_under_xla_computes_its_position_term_in_chunks(policy, tpu):
    """A content stream long enough for chunks (three of ``POSITION_CHUNK`` queries), with memory, bi_data's two
    tables, masks and segments, under XLA (chunked: the dot of each chunk against its window is in the
    module; for a TPU not chunked) and outside it on this CPU (every encoding row, then the skew): the same outputs
    and gradients."""
    rng = np.random.default_rng(13)
    b, m, length, d, n, h = 2, 8, 3 * POSITION_CHUNK, 16, 2, 8
    klen = m + length
    layer = RelativeAttention(d, n, h, dtype=policy)
    layer.build()

    def normal(*shape):
        return tf.constant(rng.normal(size=shape), tf.float32)

    content, memory = normal(b, length, d), normal(b, m, d)
    position = RelativePositionEncoding(d_model=d, bi_data=True)(qlen=length, klen=klen)
    biases = {"r_w": normal(n, h), "r_r": normal(n, h), "r_s": normal(n, h), "seg_embed": normal(2, n, h)}
    mask = tf.constant(np.where(rng.random((1, length, klen)) < 0.2, -1e30, 0.0).astype(np.float32))
    segment_diff = tf.constant(rng.random((b, length, klen)) < 0.5)
    d_h = normal(b, length, d)

    def step(content):
        with tf.GradientTape() as tape:
            tape.watch(content)
            h_out, _ = layer(content, position, biases, memory=memory, content_mask=mask, segment_diff=segment_diff,
                             training=True)
            loss = tf.reduce_sum(tf.cast(h_out, tf.float32) * d_h)
        return [h_out] + tape.gradient(loss, [content] + layer.trainable_variables)

    with kernels.use("plain"):
        outside = [np.asarray(t, np.float32) for t in tf.function(step)(content)]
        compiled = tf.function(step, jit_compile=True)
        with ops.building_for_tpu(tpu):
            inside = [np.asarray(t, np.float32) for t in compiled(content)]
            hlo = compiled.experimental_get_compiler_ir(content)(stage="hlo")
    # [N, X, chunks, B/X * chunk, K + chunk]: each chunk's queries against its window of the encoding
    dtype = "f32" if policy == "float32" else "bf16"
    assert bool(re.search(rf"= {dtype}\[{n},2,3,{POSITION_CHUNK},{klen + POSITION_CHUNK}\]\S* dot\(", hlo)) != tpu
    tolerance = 2e-5 if policy == "float32" else 2 ** -6
    for i, (a, c) in enumerate(zip(inside, outside)):
        np.testing.assert_allclose(a, c, rtol=tolerance, atol=tolerance * np.abs(c).max(), err_msg=str(i))


def _identity_layer_weights(cfg):
    """One layer whose attention scores are all zero (q kernel and biases zero), v and o the identity and the
    feed-forward zero: the layer computes LN(LN(x + mean of visible x_j))."""
    d = cfg["d_model"]
    w = {k: np.zeros_like(v) for k, v in random_weights(cfg, 0).items()}
    eye = np.eye(d).reshape(d, cfg["n_head"], cfg["d_head"])
    w["model/transformer/layer_0/rel_attn/v/kernel"] = eye
    w["model/transformer/layer_0/rel_attn/o/kernel"] = eye
    for ln in ("rel_attn", "ff"):
        w[f"model/transformer/layer_0/{ln}/LayerNorm/gamma"] = np.ones(d)
    w["model/transformer/word_embedding/lookup_table"] = np.random.default_rng(3).normal(size=(cfg["n_token"], d))
    return w


def _layer_norm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12)


def test_hand_derived_uniform_attention_with_padding():
    cfg = dict(TINY, n_layer=1)
    w = _identity_layer_weights(cfg)
    model = make_model(w, cfg, cls=XLNetModel)
    ids = np.array([[5, 6, 7, 8]])
    pad = np.array([[0, 0, 1, 1]])  # two left pads
    out = model(model_inputs(input_ids=ids, padding_mask=pad))["sequence_output"].numpy()[0]
    x = w["model/transformer/word_embedding/lookup_table"][ids[0]]
    for i in range(4):
        visible = [2, 3] + ([i] if i < 2 else [])  # real tokens, plus a pad's own position
        expected = _layer_norm(_layer_norm(x[i] + x[visible].mean(0)))
        np.testing.assert_allclose(out[i], expected, atol=1e-5)


def test_hand_derived_segment_term():
    """With r_s_bias = e_0 and seg_embed[same] = 0, seg_embed[diff] = c e_0 (q zero), the score of a key in the
    other segment is c/sqrt(d_head) and 0 otherwise: softmax weights follow in closed form."""
    cfg = dict(TINY, n_layer=1, n_head=1, d_head=8)
    w = _identity_layer_weights(cfg)
    c = 2.0
    w["model/transformer/r_s_bias"][0, 0, 0] = 1.0
    w["model/transformer/seg_embed"][0, 1, 0, 0] = c
    model = make_model(w, cfg, cls=XLNetModel)
    ids, seg = np.array([[1, 2, 3]]), np.array([[0, 0, 1]])
    out = model(model_inputs(input_ids=ids, segment_ids=seg))["sequence_output"].numpy()[0]
    x = w["model/transformer/word_embedding/lookup_table"][ids[0]]
    s = c / math.sqrt(8)
    for i in range(3):
        logits = np.array([s if seg[0, j] != seg[0, i] else 0.0 for j in range(3)])
        p = np.exp(logits) / np.exp(logits).sum()
        expected = _layer_norm(_layer_norm(x[i] + p @ x))
        np.testing.assert_allclose(out[i], expected, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# Parity with a literal transcription of the original code (tests/reference_xlnet.py), every mode.

@pytest.mark.parametrize("untie_r,activation", [(True, "gelu"), (False, "relu")])
def test_parity_bidirectional_segments_and_left_padding(untie_r, activation):
    cfg = dict(TINY, untie_r=untie_r, ff_activation=activation)
    w = random_weights(cfg, seed=1)
    batch = random_batch(np.random.default_rng(0))
    inputs = dict(input_ids=batch["input_ids"], segment_ids=batch["segment_ids"], padding_mask=batch["padding_mask"])
    assert_matches(reference_forward(w, cfg, **inputs), make_model(w, cfg)(model_inputs(**inputs)))


def test_parity_two_stream():
    cfg = dict(TINY)
    w = random_weights(cfg, seed=2)
    batch = random_batch(np.random.default_rng(1))
    ref = reference_forward(w, cfg, **batch)
    out = make_model(w, cfg)(model_inputs(**batch))
    assert out["query_output"].shape == (2, 3, 8) and out["lm_logits"].shape == (2, 3, 20)
    assert_matches(ref, out)


def test_parity_two_stream_without_padding_or_segments():
    cfg = dict(TINY)
    w = random_weights(cfg, seed=3)
    batch = random_batch(np.random.default_rng(2))
    inputs = dict(input_ids=batch["input_ids"], target_mapping=batch["target_mapping"])
    assert_matches(reference_forward(w, cfg, **inputs), make_model(w, cfg)(model_inputs(**inputs)))


def test_no_prediction_slots_give_empty_logits_like_the_original():
    """A target_mapping of 0 rows (a batch with nothing to predict): XLNetModel took it, the LM head's reshape had
    nothing to infer its -1 from and raised."""
    cfg = dict(TINY)
    batch = random_batch(np.random.default_rng(1))
    batch["target_mapping"] = batch["target_mapping"][:, :0]
    out = make_model(random_weights(cfg, seed=2), cfg)(model_inputs(**batch))
    assert out["query_output"].shape == (2, 0, 8) and out["lm_logits"].shape == (2, 0, 20)


def test_a_target_mapping_that_is_not_one_hot_is_refused_not_computed_otherwise():
    """The query stream takes a row's argmax and sum, the original multiplies by the row: a 0.5/0.5 row gave logits
    0.7 away from the original's, without a word. Refused where its values are known (eager calls)."""
    cfg = dict(TINY)
    batch = random_batch(np.random.default_rng(1))
    model = make_model(random_weights(cfg, seed=2), cfg)
    soft = batch["target_mapping"].astype(np.float32)
    soft[0, 0] = 0.0
    soft[0, 0, :2] = 0.5
    with pytest.raises(ValueError, match="target_mapping's rows must be one-hot"):
        model(model_inputs(**dict(batch, target_mapping=soft)))
    twice = batch["target_mapping"].astype(np.float32)
    twice[0, 0, :2] = 1.0
    with pytest.raises(ValueError, match="target_mapping's rows must be one-hot"):
        model(model_inputs(**dict(batch, target_mapping=twice)))


@pytest.mark.parametrize("reuse_len", [None, 4])
def test_parity_memory_over_two_segments(reuse_len):
    cfg = dict(TINY, mem_len=5, reuse_len=reuse_len)
    w = random_weights(cfg, seed=4)
    model = make_model(w, cfg)
    rng = np.random.default_rng(3)
    ref_mems = None
    out_mems = None
    for _ in range(2):
        batch = random_batch(rng)
        ref = reference_forward(w, cfg, mems=ref_mems, **batch)
        inputs = model_inputs(**batch)
        if out_mems is not None:
            inputs["mems"] = out_mems
        out = model(inputs)
        assert_matches(ref, out)
        ref_mems, out_mems = ref["new_mems"], out["new_mems"]
    assert out_mems[0].shape == (2, 5, 8)


@pytest.mark.parametrize("clamp_len", [1, 3])
def test_parity_clamp_len(clamp_len):
    cfg = dict(TINY, clamp_len=clamp_len, mem_len=3)
    w = random_weights(cfg, seed=5)
    rng = np.random.default_rng(4)
    batch = random_batch(rng)
    mems = [rng.normal(size=(2, 3, 8)) for _ in range(2)]
    assert_matches(reference_forward(w, cfg, mems=mems, **batch), make_model(w, cfg)(model_inputs(mems=mems, **batch)))


def test_parity_bi_data():
    cfg = dict(TINY, bi_data=True, mem_len=4, reuse_len=3, clamp_len=5)
    w = random_weights(cfg, seed=6)
    rng = np.random.default_rng(5)
    batch = random_batch(rng, batch=4)
    mems = [rng.normal(size=(4, 4, 8)) for _ in range(2)]
    assert_matches(reference_forward(w, cfg, mems=mems, **batch), make_model(w, cfg)(model_inputs(mems=mems, **batch)))


@pytest.mark.parametrize("same_length", [False, True])
def test_parity_unidirectional(same_length):
    cfg = dict(TINY, attn_type="uni", same_length=same_length, mem_len=4)
    w = random_weights(cfg, seed=7)
    rng = np.random.default_rng(6)
    batch = random_batch(rng)
    mems = [rng.normal(size=(2, 4, 8)) for _ in range(2)]
    assert_matches(reference_forward(w, cfg, mems=mems, **batch), make_model(w, cfg)(model_inputs(mems=mems, **batch)))


def test_parity_larger_config_and_batch():
    cfg = dict(TINY, n_layer=3, d_model=32, n_head=4, d_head=8, d_inner=64, n_token=50, mem_len=6, reuse_len=5)
    w = random_weights(cfg, seed=8, scale=0.2)
    rng = np.random.default_rng(7)
    batch = random_batch(rng, batch=3, qlen=10, num_predict=4, n_token=50)
    mems = [rng.normal(size=(3, 6, 32)) for _ in range(3)]
    assert_matches(reference_forward(w, cfg, mems=mems, **batch), make_model(w, cfg)(model_inputs(mems=mems, **batch)))


@pytest.mark.parametrize("backend", ["fast", "plain"])
@pytest.mark.parametrize("mode", ["bi", "uni_memory", "bi_data"])
def test_output_rows_are_those_rows_of_the_full_output(backend, mode):
    """``output_rows`` (what a classifier's head asks for: the last layer at its <cls> row only) gives the
    reference's final states at those rows, as the full output does: padding, segments, memory, every attention
    mode, both backends; and the gradients it sends back are the full model's at those rows."""
    cfg = dict(TINY, **{"bi": {}, "uni_memory": dict(attn_type="uni", mem_len=3),
                        "bi_data": dict(bi_data=True, mem_len=3)}[mode])
    w = random_weights(cfg, seed=30)
    rng = np.random.default_rng(30)
    batch = random_batch(rng, batch=4)
    inputs = dict(input_ids=batch["input_ids"], segment_ids=batch["segment_ids"], padding_mask=batch["padding_mask"])
    if cfg["mem_len"]:
        inputs["mems"] = [rng.normal(size=(4, 3, 8)) for _ in range(2)]
    ref = reference_forward(w, cfg, **inputs)["sequence_output"]
    model = make_model(w, cfg, cls=XLNetModel)
    x = model_inputs(**inputs)
    with kernels.use(backend):
        for rows in ([6], [0, 3, 6]):
            out = tf.function(lambda x, r: model(x, output_rows=r))(x, tf.constant(rows))["sequence_output"]
            assert out.shape == (4, len(rows), 8)
            np.testing.assert_allclose(out.numpy(), ref[:, rows], atol=HIDDEN_TOL, rtol=0)

        def grads(rows):
            with tf.GradientTape() as tape:
                out = model(x, training=True, output_rows=rows)["sequence_output"]
                loss = tf.reduce_sum(out[:, -1] * tf.range(1.0, 9.0))
            return tape.gradient(loss, model.trainable_variables)

        for full, part, var in zip(grads(None), grads([6]), model.trainable_variables):
            assert (full is None) == (part is None), var.path  # mask_emb: no query stream, no gradient
            if full is None:
                continue
            full, part = tf.convert_to_tensor(full).numpy(), tf.convert_to_tensor(part).numpy()
            np.testing.assert_allclose(part, full, rtol=1e-4, atol=1e-6 * max(np.abs(full).max(), 1.0),
                                       err_msg=var.path)
    with pytest.raises(ValueError, match="output_rows cannot be combined with target_mapping"):
        model(model_inputs(**batch), output_rows=[6])


# ----------------------------------------------------------------------------------------------------------
# Properties.

def _factorization_masks(order, targets, qlen):
    """perm_mask from a factorization order (XLNet's rule): non-targets see all non-targets; a target sees
    the non-targets and the targets before it in the order (the content stream also sees itself)."""
    rank = np.empty(qlen, int)
    rank[order] = np.arange(qlen)
    perm = np.zeros((qlen, qlen), np.float32)
    for i in range(qlen):
        for j in targets:
            if rank[j] >= rank[i] or i not in targets:
                perm[i, j] = 1
    return perm


def test_query_stream_ignores_own_and_later_tokens():
    cfg = dict(TINY)
    model = make_model(random_weights(cfg, seed=9), cfg)
    rng = np.random.default_rng(8)
    qlen = 8
    for trial in range(5):
        order = rng.permutation(qlen)
        targets = list(order[-3:])  # the last three in the order are predicted
        perm = _factorization_masks(order, targets, qlen)[None]
        tm = np.zeros((1, 3, qlen), np.float32)
        tm[0, np.arange(3), targets] = 1
        ids = rng.integers(0, 20, (1, qlen))
        base = model(model_inputs(input_ids=ids, perm_mask=perm, target_mapping=tm))["query_output"].numpy()
        rank = {pos: r for r, pos in enumerate(order)}
        for m, target in enumerate(targets):
            later = [pos for pos in targets if rank[pos] >= rank[target]]
            changed = ids.copy()
            changed[0, later] = (changed[0, later] + 1 + rng.integers(0, 18, len(later))) % 20
            out = model(model_inputs(input_ids=changed, perm_mask=perm, target_mapping=tm))["query_output"]
            np.testing.assert_allclose(out.numpy()[0, m], base[0, m], atol=1e-6)
            earlier = [pos for pos in targets if rank[pos] < rank[target]]
            nontargets = [pos for pos in range(qlen) if pos not in targets]
            visible = changed.copy()
            visible[0, nontargets[0]] = (visible[0, nontargets[0]] + 1) % 20
            out = model(model_inputs(input_ids=visible, perm_mask=perm, target_mapping=tm))["query_output"]
            assert np.abs(out.numpy()[0, m] - base[0, m]).max() > 1e-4, "a visible token must matter"
            del earlier


def test_content_stream_ignores_padding():
    cfg = dict(TINY)
    model = make_model(random_weights(cfg, seed=10), cfg, cls=XLNetModel)
    rng = np.random.default_rng(9)
    real = rng.integers(0, 20, (1, 5))
    seg = np.zeros((1, 8), int)
    padded = np.concatenate([rng.integers(0, 20, (1, 3)), real], axis=1)
    pad = np.array([[0, 0, 0, 1, 1, 1, 1, 1]])
    out = model(model_inputs(input_ids=padded, segment_ids=seg, padding_mask=pad))["sequence_output"].numpy()
    other = padded.copy()
    other[0, :3] = (other[0, :3] + 7) % 20
    out2 = model(model_inputs(input_ids=other, segment_ids=seg, padding_mask=pad))["sequence_output"].numpy()
    np.testing.assert_allclose(out[:, 3:], out2[:, 3:], atol=1e-6)
    # relative attention: left padding is invisible, so real tokens match an unpadded run
    alone = model(model_inputs(input_ids=real, segment_ids=seg[:, :5]))["sequence_output"].numpy()
    np.testing.assert_allclose(out[:, 3:], alone, atol=1e-5)


@pytest.mark.parametrize("cls", [XLNetModel, XLNetPretrainer])
def test_a_mask_under_another_name_is_refused_not_ignored(cls):
    """HF's attention_mask (our padding_mask) or the original's input_mask, passed as they are, would otherwise be
    ignored: every padding token visible, no error. They are refused, saying what they are called here."""
    model = cls(XLNetConfig(**TINY))
    ids = np.ones((1, 4), np.int32)
    for key, hint in (("attention_mask", "padding_mask here \\(the same"), ("token_type_ids", "are segment_ids"),
                      ("input_mask", "1 - padding_mask")):
        with pytest.raises(ValueError, match=f"does not read {key}; .*{hint}"):
            model({"input_ids": ids, key: np.ones((1, 4), np.float32)})
    with pytest.raises(ValueError, match="takes a dict with input_ids .* got EagerTensor"):
        model(tf.constant(ids))
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, length\], got shape \[4\]"):
        model({"input_ids": ids[0]})
    model({"input_ids": ids, "target": ids})  # a batch dict with its labels, as the data reader yields it


def test_inputs_of_other_shapes_than_input_ids_are_refused_by_name():
    """A target_mapping over other positions than input_ids' would pick wrong rows without an error; the other
    mismatches would fail deep in the attention with the kernels' shapes. Each is one line naming the input."""
    model = XLNetModel(XLNetConfig(**dict(TINY, mem_len=3)))
    d, ids = TINY["d_model"], np.ones((2, 4), np.int32)
    mems = [np.zeros((2, 3, d), np.float32)] * TINY["n_layer"]
    for name, value, expected in [
            ("segment_ids", np.zeros((2, 5), np.int32), r"segment_ids must be \[batch, length\] = \[2, 4\] for "
                                                        r"input_ids \[2, 4\], got \[2, 5\]"),
            ("padding_mask", np.ones((3, 4), np.float32), r"padding_mask must be .* got \[3, 4\]"),
            ("perm_mask", np.zeros((2, 4, 5), np.float32), r"perm_mask must be \[batch, length, length\]"),
            ("target_mapping", np.eye(5, dtype=np.float32)[None, :2].repeat(2, 0),
             r"target_mapping must be \[batch, predicted, length\] = \[2, None, 4\] .* got \[2, 2, 5\]"),
            ("mems", [np.zeros((2, 3, d + 1), np.float32)] * TINY["n_layer"], r"mems\[0\] must be \[batch, memory, "
                                                                             rf"d_model\] = \[2, None, {d}\]"),
            ("mems_padding_mask", np.ones((2, 2), np.float32), r"mems_padding_mask must be \[batch, memory\] = "
                                                               r"\[2, 3\]")]:
        inputs = {"input_ids": ids, name: value}
        if name == "mems_padding_mask":
            inputs["mems"] = mems
        with pytest.raises(ValueError, match=expected):
            model(inputs)
    mapping = np.eye(4, dtype=np.float32)[None, :2].repeat(2, 0)  # 2 predicted rows
    for name, value, expected in [
            ("query_ids", np.ones((2, 3), np.int32), r"query_ids must be \[batch, predicted\] = \[2, 2\]"),
            ("query_perm_mask", np.zeros((2, 2, 5), np.float32), r"query_perm_mask must be \[batch, predicted, "
                                                                  r"length \[\+ predicted\]\] = \[2, 2, 4\]")]:
        with pytest.raises(ValueError, match=expected):
            model({"input_ids": ids, "target_mapping": mapping, name: value})
    model({"input_ids": ids, "mems": mems, "mems_padding_mask": np.ones((2, 3), np.float32),
           "target_mapping": mapping, "query_ids": np.ones((2, 2), np.int32)})  # as they should be
    # lm_positions past the rows picked none (the logits were the LM bias): refused where their values are known.
    pretrainer = XLNetPretrainer(XLNetConfig(**TINY))
    with pytest.raises(ValueError, match=r"lm_positions must be in \[0, 4\) \(the content rows\), got 1\.\.4"):
        pretrainer({"input_ids": ids, "lm_positions": np.array([[1, 4], [2, 3]])})
    logits = pretrainer({"input_ids": ids, "lm_positions": np.array([[0, 3]] * 2)})["lm_logits"]
    assert logits.shape == (2, 2, TINY["n_token"])
    # Python lists, as HF's users pass them (Keras took only tensors and arrays in the dict), mems per layer.
    listed = model({"input_ids": ids.tolist(), "mems": mems, "target_mapping": mapping.tolist()})
    arrays = model({"input_ids": ids, "mems": mems, "target_mapping": mapping})
    np.testing.assert_array_equal(listed["sequence_output"], arrays["sequence_output"])
    for keys in (4, 6):  # the query rows' mask over the content, or over the content and the query rows
        model({"input_ids": ids, "target_mapping": mapping, "query_perm_mask": np.zeros((2, 2, keys), np.float32)})


def traced_inputs(batch=2, length=5, predict=2, n_token=20):
    """Valid inputs of every kind a traced call checks, and the signature of each with unknown dimensions."""
    mapping = np.zeros((batch, predict, length), np.float32)
    mapping[:, 0, 1] = mapping[:, 1, 3] = 1
    inputs = {"input_ids": np.arange(batch * length).reshape(batch, length) % n_token,
              "segment_ids": np.zeros((batch, length), np.int32), "padding_mask": np.ones((batch, length), np.float32),
              "perm_mask": np.zeros((batch, length, length), np.float32), "target_mapping": mapping,
              "position_ids": np.tile(np.arange(length)[::-1], (batch, 1)), "lm_positions": np.array([[0, 6]] * batch)}
    inputs = {k: tf.constant(v, tf.int32 if v.dtype.kind == "i" else tf.float32) for k, v in inputs.items()}
    return inputs, {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in inputs.items()}


def test_traced_calls_check_the_values_and_the_dimensions_eager_calls_check():
    """predict, fit, tf.function and every serving signature trace the model: there the eager checks did not run,
    and with unknown dimensions neither did the shape checks. An out-of-range lm_positions read the LM bias alone,
    a two-hot target_mapping row or a target past L computed other numbers, a padding_mask of batch 1 was every
    example's, ids past the vocabulary read zeros on a GPU, position ids past the length were clamped: all without
    a word. Each now stops the call naming the input and its rule."""
    model = XLNetPretrainer(XLNetConfig(**TINY, dropout=0.0, dropatt=0.0))
    good, signature = traced_inputs()
    traced = tf.function(lambda x: model(x)["lm_logits"], input_signature=[signature])
    np.testing.assert_array_equal(traced(good).numpy(), model(good)["lm_logits"].numpy())
    two_hot = good["target_mapping"].numpy()
    two_hot[0, 0, 2] = 1
    past_length = np.zeros((2, 2, 7), np.float32)
    past_length[:, :, 6] = 1
    ids = good["input_ids"].numpy()
    for name, value, rule in [
            ("lm_positions", [[0, 7]] * 2, r"lm_positions must be in \[0, the content rows, then the query rows\)"),
            ("target_mapping", two_hot, "target_mapping rows must be one-hot"),
            ("target_mapping", past_length, "target_mapping must have the batch at axis 0, length at axis 2 of "
                                            "input_ids"),
            ("input_ids", ids + 20, r"input_ids must be in \[0, n_token\)"),
            ("input_ids", ids - 1, r"input_ids must be in \[0, n_token\)"),
            ("padding_mask", np.ones((1, 5)), "padding_mask must have the batch at axis 0"),
            ("segment_ids", np.zeros((1, 5)), "segment_ids must have the batch"),
            ("perm_mask", np.zeros((1, 5, 5)), "perm_mask must have the batch"),
            ("position_ids", [[0, 2, 4, 6, 8]] * 2, r"position_ids must be in \[0, the length\)")]:
        bad = dict(good, **{name: tf.constant(value, good[name].dtype)})
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"inputs of (XLNetModel|xlnet_pretrainer): {rule}"):
            traced(bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"lm_positions must be in"):
        model.predict(dict(good, lm_positions=tf.constant([[0, 7]] * 2)), verbose=0)
    network = model.xlnet
    rows = tf.function(lambda x, r: network(x, output_rows=r)["sequence_output"],
                       input_signature=[{"input_ids": signature["input_ids"]}, tf.TensorSpec([None], tf.int32)])
    rows({"input_ids": good["input_ids"]}, tf.constant([4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"output_rows must be in \[0, the length\)"):
        rows({"input_ids": good["input_ids"]}, tf.constant([5]))
    floats = tf.function(lambda x: network({"input_ids": x})["sequence_output"],
                         input_signature=[tf.TensorSpec([None, None], tf.float32)])  # as Keras' SavedModel's
    floats(tf.cast(good["input_ids"], tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_ids must be integers, got float values"):
        floats(tf.cast(good["input_ids"], tf.float32) + 0.5)


def test_eager_calls_name_ids_positions_and_rows_out_of_range_and_floats():
    """Eager: ids past the vocabulary and rows past the length were TensorFlow's GatherV2 error, float ids and
    positions were truncated (1.7 read as 1), mems as one stacked tensor was numpy's 'truth value of an array is
    ambiguous'."""
    model = XLNetModel(XLNetConfig(**TINY))
    ids = np.ones((2, 5), np.int32)
    for inputs, kwargs, expected in [
            ({"input_ids": ids + 20}, {}, r"input_ids must be in \[0, 20\) \(n_token\), got 21..21"),
            ({"input_ids": ids, "position_ids": [[0, 1, 2, 3, 9]] * 2}, {}, r"position_ids must be in \[0, 5\)"),
            ({"input_ids": ids}, {"output_rows": tf.constant([5])}, r"output_rows must be in \[0, 5\)"),
            ({"input_ids": ids}, {"output_rows": tf.constant([[1]] * 3)}, r"output_rows \[batch, rows\] must have "
                                                                          r"input_ids' batch 2, got \[3, 1\]"),
            ({"input_ids": ids + 0.7}, {}, "input_ids must be integers, got float32 values with fractions"),
            ({"input_ids": ids.astype(str)}, {}, "input_ids must be integers, got dtype string"),
            ({"input_ids": ids}, {"output_rows": tf.constant([1.5])}, "output_rows must be integers"),
            ({"input_ids": ids, "mems": tf.zeros((2, 2, 3, 8))}, {}, "mems must be a list of n_layer tensors")]:
        with pytest.raises(ValueError, match=expected):
            model(inputs, **kwargs)
    pretrainer = XLNetPretrainer(XLNetConfig(**TINY))
    with pytest.raises(ValueError, match="lm_positions must be integers"):
        pretrainer({"input_ids": ids, "lm_positions": np.array([[1.7]] * 2)})
    np.testing.assert_array_equal(model({"input_ids": ids.astype(np.float32)})["sequence_output"],
                                  model({"input_ids": ids})["sequence_output"])  # as Keras' SavedModel traces them
    with pytest.raises(ValueError, match=r"lm_positions must be \[batch, predictions\] = \[2, None\]"):
        pretrainer({"input_ids": ids, "lm_positions": np.array([[1]] * 3)})


def test_relative_attention_refuses_a_table_of_other_keys_and_names_missing_arguments():
    """A table built for other keys (klen or memory) was read from its first columns: other position terms, no
    error. A missing bias was KeyError: r_r; content of another width a reshape error."""
    model = XLNetModel(XLNetConfig(**TINY))
    attention, encoding = model.blocks[0].rel_attn, model.position_encoding
    content, biases = tf.zeros((2, 5, 8)), model._layer_biases(0, False)
    attention(content, encoding(tf.constant(5), tf.constant(5)), biases)
    with pytest.raises(ValueError, match=r"position must have 10 rows \('bi'\) or 6 \('uni'\), the encoding of 5 "
                                         r"queries and 5 keys \(0 of memory\), got 13"):
        attention(content, encoding(tf.constant(5), tf.constant(8)), biases)
    with pytest.raises(ValueError, match=r"15 rows .* 10 keys \(5 of memory\), got 10"):
        attention(content, encoding(tf.constant(5), tf.constant(5)), biases, memory=tf.zeros((2, 5, 8)))
    with pytest.raises(ValueError, match=r"biases lack r_r"):
        attention(content, encoding(tf.constant(5), tf.constant(5)), {"r_w": biases["r_w"]})
    with pytest.raises(ValueError, match=r"content must end in d_model = 8, got shape \[2, 5, 12\]"):
        attention(tf.zeros((2, 5, 12)), encoding(tf.constant(5), tf.constant(5)), biases)
    traced = tf.function(lambda h, p: attention(h, p, biases)[0],
                         input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec([1, None, 8])])
    traced(content, encoding(tf.constant(5), tf.constant(5)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="position must have keys \\+ queries rows"):
        traced(content, encoding(tf.constant(5), tf.constant(8)))


def test_unidirectional_memory_equals_one_pass():
    cfg = dict(TINY, attn_type="uni", mem_len=6, reuse_len=6)
    model = make_model(random_weights(cfg, seed=11), cfg, cls=XLNetModel)
    ids = np.random.default_rng(10).integers(0, 20, (2, 12))
    seg = np.zeros_like(ids)
    whole = model(model_inputs(input_ids=ids, segment_ids=seg))["sequence_output"].numpy()
    first = model(model_inputs(input_ids=ids[:, :6], segment_ids=seg[:, :6]))
    second = model(dict(model_inputs(input_ids=ids[:, 6:], segment_ids=seg[:, 6:]), mems=first["new_mems"]))
    np.testing.assert_allclose(first["sequence_output"].numpy(), whole[:, :6], atol=1e-5)
    np.testing.assert_allclose(second["sequence_output"].numpy(), whole[:, 6:], atol=1e-5)


def test_save_restore_round_trip(tmp_path):
    cfg = dict(TINY, mem_len=4)
    model = make_model(random_weights(cfg, seed=12), cfg)
    batch = model_inputs(**random_batch(np.random.default_rng(11)))
    expected = model(batch)["lm_logits"].numpy()

    model.save_weights(str(tmp_path / "w.weights.h5"))
    fresh = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.0, dropatt=0.0))
    assert np.abs(fresh(batch)["lm_logits"].numpy() - expected).max() > 1e-3
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    np.testing.assert_allclose(fresh(batch)["lm_logits"].numpy(), expected, atol=1e-6)

    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    fresh = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.0, dropatt=0.0))
    tf.train.Checkpoint(model=fresh).read(path).assert_consumed()
    np.testing.assert_allclose(fresh(batch)["lm_logits"].numpy(), expected, atol=1e-6)

    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    np.testing.assert_allclose(loaded(batch)["lm_logits"].numpy(), expected, atol=1e-6)


def test_a_frozen_network_stays_frozen_through_a_keras_file(tmp_path):
    """get_config wrote config, name and dtype only: a frozen network came back trainable from a .keras file, and a
    fit after loading trained the weights the user froze."""
    for cls in (XLNetModel, XLNetPretrainer):
        net = cls(XLNetConfig(**TINY))
        net.trainable = False
        net.save(str(tmp_path / "net.keras"))
        loaded = keras.models.load_model(str(tmp_path / "net.keras"))
        assert not loaded.trainable and loaded.trainable_weights == [], cls.__name__
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    net = XLNetModel(XLNetConfig(**TINY))
    model = keras.Model({"input_ids": ids}, keras.layers.Dense(3)(net({"input_ids": ids})["sequence_output"][:, -1]))
    net.trainable = False
    model.save(str(tmp_path / "m.keras"))
    assert len(keras.models.load_model(str(tmp_path / "m.keras")).trainable_weights) == 2  # the Dense's alone


def test_a_functional_model_of_the_block_and_the_summary_saves_and_loads(tmp_path):
    """XLNetBlock and SequenceSummary were registered serializable without a get_config: Keras refused to save a
    model holding them."""
    from xlnet_tf.models.heads import SequenceSummary
    from xlnet_tf.models.xlnet import XLNetBlock

    config = XLNetConfig(**TINY, dropout=0.0, dropatt=0.0)
    block = XLNetBlock(config, name="block")
    assert XLNetBlock.from_config(block.get_config()).config == config
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    summary = SequenceSummary(config, "first", trainable=False)
    model = keras.Model({"input_ids": ids}, summary(XLNetModel(config)({"input_ids": ids})["sequence_output"]))
    batch = {"input_ids": np.array([[1, 2, 3], [4, 5, 6]], np.int32)}
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_array_equal(loaded(batch).numpy(), model(batch).numpy())
    restored = loaded.layers[-1]
    assert (restored.summary_type, restored.config, restored.trainable) == ("first", config, False)


def test_gradients_are_finite_and_reach_every_weight():
    cfg = dict(TINY, mem_len=4)
    model = XLNetPretrainer(XLNetConfig(**cfg))
    batch = model_inputs(**random_batch(np.random.default_rng(12)))
    batch["segment_ids"] = tf.constant(np.array([[0] * 4 + [1] * 3] * 2), tf.int32)
    with tf.GradientTape() as tape:
        logits = model(batch, training=True)["lm_logits"]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.zeros(logits.shape[:2], tf.int32),
                                                                              logits))
    grads = tape.gradient(loss, model.trainable_variables)
    for var, grad in zip(model.trainable_variables, grads):
        assert grad is not None, var.path
        assert np.isfinite(tf.convert_to_tensor(grad).numpy()).all(), var.path


def _loss_gradients(model, inputs, training, backend="fast"):
    """Gradients of a loss over the logits and the content stream, w.r.t. every trainable variable."""
    with kernels.use(backend), tf.GradientTape() as tape:
        out = model(inputs, training=training)
        loss = tf.reduce_sum(out["lm_logits"] * tf.sin(tf.range(20, dtype=tf.float32))) + tf.reduce_sum(
            out["sequence_output"] ** 2)
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_training_path_matches_the_reference_and_its_gradients_match_autodiff(activation):
    """training=True with the fast backend (C++ kernels with hand-written backward passes on CPU); with dropout
    off it must give the reference's outputs, and the gradients of TF's autodiff through the plain ops."""
    cfg = dict(TINY, mem_len=5, reuse_len=4, ff_activation=activation)
    w = random_weights(cfg, seed=21)
    model = make_model(w, cfg)
    rng = np.random.default_rng(21)
    batch = random_batch(rng)
    mems = [rng.normal(size=(2, 5, 8)) for _ in range(2)]
    ref = reference_forward(w, cfg, mems=mems, **batch)
    inputs = model_inputs(mems=mems, **batch)
    assert_matches(ref, model(inputs, training=True))

    for var, fast, plain in zip(model.trainable_variables, _loss_gradients(model, inputs, True),
                                 _loss_gradients(model, inputs, True, "plain")):
        fast, plain = tf.convert_to_tensor(fast).numpy(), tf.convert_to_tensor(plain).numpy()
        np.testing.assert_allclose(fast, plain, rtol=1e-4, atol=1e-5 * np.abs(plain).max(), err_msg=var.path)


@pytest.mark.parametrize("mode", ["uni", "uni_same_length", "bi_data"])
def test_training_path_in_every_attention_mode(mode):
    """The training kernels (on CPU: the C++ attention kernel's shift, including the clamped columns of 'uni'
    attention's shorter position table, bi_data's two tables, memory) against the reference, and their gradients
    against TF's autodiff through the plain ops, with dropout off."""
    cfg = dict(TINY, mem_len=4)
    batch_size = 2
    if mode == "bi_data":
        cfg.update(bi_data=True, reuse_len=3, clamp_len=5)
        batch_size = 4
    else:
        cfg.update(attn_type="uni", same_length=mode == "uni_same_length")
    w = random_weights(cfg, seed=22)
    model = make_model(w, cfg)
    rng = np.random.default_rng(22)
    batch = random_batch(rng, batch=batch_size)
    mems = [rng.normal(size=(batch_size, 4, 8)) for _ in range(2)]
    inputs = model_inputs(mems=mems, **batch)
    assert_matches(reference_forward(w, cfg, mems=mems, **batch), model(inputs, training=True))

    for var, fast, plain in zip(model.trainable_variables, _loss_gradients(model, inputs, True),
                                 _loss_gradients(model, inputs, True, "plain")):
        fast, plain = tf.convert_to_tensor(fast).numpy(), tf.convert_to_tensor(plain).numpy()
        np.testing.assert_allclose(fast, plain, rtol=1e-4, atol=1e-5 * np.abs(plain).max(), err_msg=var.path)


def test_fast_backend_at_inference_matches_the_plain_ops():
    """Inference traces the fast backend too (C++ kernels on CPU), with the plain ops' values; a trace under
    kernels.use("plain") (as SavedModel exports are made) holds stock TensorFlow ops only."""
    cfg = dict(TINY, mem_len=4)
    model = make_model(random_weights(cfg, seed=23), cfg)
    inputs = model_inputs(**random_batch(np.random.default_rng(23)))
    traces = {}
    for backend in ("fast", "plain"):
        with kernels.use(backend):
            traces[backend] = tf.function(lambda x: model(x, training=False)).get_concrete_function(inputs)
    op_types = {backend: {op.type for op in t.graph.get_operations()} for backend, t in traces.items()}
    assert "XlnetAttentionProbs" in op_types["fast"]
    assert not [t for t in op_types["plain"] if t.startswith("Xlnet")]
    for key in ("sequence_output", "lm_logits"):
        np.testing.assert_allclose(traces["fast"](inputs)[key].numpy(), traces["plain"](inputs)[key].numpy(),
                                   atol=2e-5, err_msg=key)


def test_plain_backend_training_without_dropout_is_inference():
    """With the plain ops, training=True differs from inference only by dropout: bit-for-bit equal at rate 0,
    and the blocks' dropouts apply when they are on."""
    cfg = dict(TINY)
    model = make_model(random_weights(cfg, seed=22), cfg)
    inputs = model_inputs(**random_batch(np.random.default_rng(22)))
    with kernels.use("plain"):
        np.testing.assert_array_equal(model(inputs, training=True)["lm_logits"].numpy(),
                                      model(inputs, training=False)["lm_logits"].numpy())
        model = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.5, dropatt=0.0))
        for layer in (model.xlnet._embedding_dropout, model.xlnet._output_dropout,
                      model.xlnet.position_encoding._dropout):
            layer.rate = 0.0
        assert not np.allclose(model(inputs, training=True)["lm_logits"].numpy(),
                               model(inputs, training=False)["lm_logits"].numpy())


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_probabilities_under_xla_equal_those_outside(dtype):
    """Under XLA (``jit_compile``, TPUs, the exported GPU step) the plain attention probabilities in bfloat16 are
    kept behind an optimisation barrier for their backward, which XLA would otherwise recompute from the scores in
    each reader: the same probabilities and score gradients as outside XLA (float32 to round-off, bfloat16 to a
    rounding), with the mask, the segment term and dropout."""
    rng = np.random.default_rng(7)
    n, b, q, klen = 2, 3, 6, 10
    ac = tf.constant(rng.normal(size=(n, b, q, klen)) * 3, dtype)
    bd = tf.constant(rng.normal(size=(n, b, q, klen + q)) * 3, dtype)
    ef = tf.constant(rng.normal(size=(n, b, q, 1)), dtype)
    segment_diff = tf.constant(rng.random((b, q, klen)) < 0.5)
    mask = tf.constant(np.where(rng.random((1, q, klen)) < 0.3, -1e30, 0.0).astype(np.float32))
    d_out = tf.constant(rng.normal(size=(n, b, q, klen)), dtype)

    def step(ac, bd, ef):
        with tf.GradientTape() as tape:
            tape.watch([ac, bd, ef])
            prob = attention_probs(ac, bd, ef, segment_diff, mask, None, 0.1, tf.constant([5, 6]))
            loss = tf.reduce_sum(tf.cast(prob, tf.float32) * tf.cast(d_out, tf.float32))
        return [prob] + tape.gradient(loss, [ac, bd, ef])

    with kernels.use("plain"):
        outside = [t.numpy().astype(np.float32) for t in tf.function(step)(ac, bd, ef)]
        compiled = tf.function(step, jit_compile=True)
        inside = [t.numpy().astype(np.float32) for t in compiled(ac, bd, ef)]
        hlo = compiled.experimental_get_compiler_ir(ac, bd, ef)(stage="hlo")
    # bfloat16: the branch under test is the one XLA compiles, the probabilities (not only dropout's counters)
    # kept; float32 leaves XLA its choice
    assert bool(re.search(r"= bf16\[2,3,6,10\]\S* opt-barrier\(", hlo)) == (dtype == tf.bfloat16), hlo
    tolerance = 1e-6 if dtype == tf.float32 else 2 ** -7
    for name, a, b in zip(["prob", "d_ac", "d_bd", "d_ef"], inside, outside):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max(), err_msg=name)
    assert 0.05 < (outside[0] == 0).mean() and ((inside[0] == 0) == (outside[0] == 0)).all()  # one mask


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_vectors_back_propagate_like_probabilities_times_values(dtype):
    """``attention_probs(..., values=v)`` back-propagates with the attention vector's row sum (``d_out . out``)
    where the probabilities' gradient takes ``sum(p * d_p)`` over the keys: the same vectors and gradients (scores,
    values) as the probabilities times the values, under XLA and outside it, with masks, segments, dropout, a fully
    masked row and the query stream's gathered positions."""
    rng = np.random.default_rng(17)
    n, b, q, klen, h = 2, 3, 6, 10, 4
    ac = tf.constant(rng.normal(size=(n, b, q, klen)) * 3, dtype)
    values = tf.constant(rng.normal(size=(n, b, klen, h)), dtype)
    ef = tf.constant(rng.normal(size=(n, b, q, 1)), dtype)
    segment_diff = tf.constant(rng.random((b, q, klen)) < 0.5)
    blocked = rng.random((1, q, klen)) < 0.3
    blocked[0, 2] = True
    mask = tf.constant(np.where(blocked, -1e30, 0.0).astype(np.float32))
    d_out = tf.constant(rng.normal(size=(n, b, q, h)), dtype)
    seed = tf.constant([5, 6])
    for query_pos, rlen in ((None, klen + q), (tf.constant(rng.integers(0, klen, size=(b, q)), tf.int32), klen + 1)):
        bd = tf.constant(rng.normal(size=(n, b, q, rlen)) * 3, dtype)

        def step(ac, bd, ef, values, fused):
            with tf.GradientTape() as tape:
                tape.watch([ac, bd, ef, values])
                if fused:
                    out = attention_probs(ac, bd, ef, segment_diff, mask, query_pos, 0.2, seed, values=values)
                else:
                    out = tf.matmul(attention_probs(ac, bd, ef, segment_diff, mask, query_pos, 0.2, seed), values)
                loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(d_out, tf.float32))
            return [out] + tape.gradient(loss, [ac, bd, ef, values])

        with kernels.use("plain"):
            for jit in (False, True):
                run = tf.function(step, jit_compile=jit)
                fused, apart = ([t.numpy().astype(np.float32) for t in run(ac, bd, ef, values, f)]
                                for f in (True, False))
                tolerance = 1e-5 if dtype == tf.float32 else 2 ** -6
                for name, a, b_ in zip(["out", "d_ac", "d_bd", "d_ef", "d_values"], fused, apart):
                    np.testing.assert_allclose(a, b_, rtol=tolerance, atol=tolerance * np.abs(b_).max(),
                                               err_msg=f"{name}, jit {jit}, query_pos {query_pos is not None}")


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_two_stream_attention_under_xla_equals_outside(policy):
    """Both streams of one attention layer with memory, masks and segments, under XLA and outside it: the same
    outputs and gradients (inputs and weights). Under XLA with 16-bit activations the query stream reads the
    content's keys and values behind a barrier that keeps XLA from merging the two streams' matmuls (identity
    values and gradient)."""
    rng = np.random.default_rng(11)
    b, m, length, p, d, n, h = 2, 3, 5, 2, 16, 2, 8
    klen = m + length
    layer = RelativeAttention(d, n, h, dtype=policy)
    layer.build()

    def normal(*shape):
        return tf.constant(rng.normal(size=shape), tf.float32)

    content, memory, query = normal(b, length, d), normal(b, m, d), normal(b, p, d)
    position = RelativePositionEncoding(d_model=d)(qlen=length, klen=klen)
    biases = {"r_w": normal(n, h), "r_r": normal(n, h), "r_s": normal(n, h), "seg_embed": normal(2, n, h)}
    content_mask = tf.constant(np.where(rng.random((1, length, klen)) < 0.2, -1e30, 0.0).astype(np.float32))
    query_mask = tf.constant(np.where(rng.random((b, p, klen)) < 0.3, -1e30, 0.0).astype(np.float32))
    segment_diff = tf.constant(rng.random((b, length, klen)) < 0.5)
    query_segment_diff = tf.constant(rng.random((b, p, klen)) < 0.5)
    query_pos = tf.constant(m + rng.integers(0, length, size=(b, p)), tf.int32)
    d_h, d_g = normal(b, length, d), normal(b, p, d)  # the outputs' gradients (a sum of squares of a LayerNorm's
    # output would be constant, its gradient round-off)

    def step(content, query):
        with tf.GradientTape() as tape:
            tape.watch([content, query])
            h_out, g_out = layer(content, position, biases, memory=memory, content_mask=content_mask,
                                 segment_diff=segment_diff, query=query, query_pos=query_pos, query_mask=query_mask,
                                 query_segment_diff=query_segment_diff, training=True)
            loss = tf.reduce_sum(tf.cast(h_out, tf.float32) * d_h) + tf.reduce_sum(tf.cast(g_out, tf.float32) * d_g)
        return [h_out, g_out] + tape.gradient(loss, [content, query] + layer.trainable_variables)

    with kernels.use("plain"):
        outside = [np.asarray(t, np.float32) for t in tf.function(step)(content, query)]
        compiled = tf.function(step, jit_compile=True)
        inside = [np.asarray(t, np.float32) for t in compiled(content, query)]
        hlo = compiled.experimental_get_compiler_ir(content, query)(stage="hlo")
    # with 16-bit activations, the branch under test is the one XLA compiles: keys and values behind a barrier
    kept = re.search(rf"= \(bf16\[{n},{b},{klen},{h}\]\S*, bf16\[{n},{b},{klen},{h}\]\S*\) opt-barrier\(", hlo)
    assert bool(kept) == (policy == "mixed_bfloat16")
    tolerance = 2e-5 if policy == "float32" else 2 ** -6
    for i, (a, c) in enumerate(zip(inside, outside)):
        np.testing.assert_allclose(a, c, rtol=tolerance, atol=tolerance * np.abs(c).max(), err_msg=str(i))


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
def test_feed_forward_bias_gradient_sums_the_gradient_the_matmuls_read(dtype):
    """The feed-forward bias's gradient is the sum over rows of h's gradient as the matmuls read it: in 16 bits
    with 16-bit activations (a bf16 layer's bias gradient; under XLA the float32 gradient is then not written
    between its two readers, bench/reports/gpu.md), inside XLA and outside."""
    from xlnet_tf.layers.feedforward import bias_activation_dropout

    rng = np.random.default_rng(5)
    h = tf.constant(rng.normal(size=(3, 40, 48)) * 2, dtype)
    bias = tf.constant(rng.normal(size=48), tf.float32)  # the layer's variable stays float32
    dy = tf.constant(rng.normal(size=(3, 40, 48)), tf.float32)

    def grads(h, bias, dy):
        with tf.GradientTape() as tape:
            tape.watch([h, bias])
            y = bias_activation_dropout(h, bias, "gelu", 0.1, tf.constant([3, 4]))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
        return tape.gradient(loss, [h, bias])

    with kernels.use("plain"):
        results = [grads(h, bias, dy), tf.function(grads, jit_compile=True)(h, bias, dy)]
    for d_h, d_bias in results:
        assert d_h.dtype == dtype and d_bias.dtype == tf.float32
        rows = tf.cast(d_h, tf.float32).numpy().reshape(-1, 48)
        np.testing.assert_allclose(d_bias.numpy(), rows.sum(0), rtol=1e-5, atol=1e-5 * np.abs(rows).sum(0).max())
    np.testing.assert_allclose(*[tf.cast(r[0], tf.float32).numpy() for r in results],
                               rtol=2 ** -7 if dtype == tf.bfloat16 else 2e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["fast", "plain"])
def test_dropout_inside_the_block_functions(backend):
    """The feed-forward bias is added before dropout, as the original's ``dropout(dense(x))`` (with zero
    pre-activations the dropped values are exactly 0 or bias / keep, never the bias itself); the attention
    probabilities keep 1 - rate, scaled by 1 / keep, and back-propagate through the same mask; the residual
    LayerNorm drops entries of ``out + bias`` before the sum."""
    from xlnet_tf.kernels.dropout_mask import keep_probability
    from xlnet_tf.layers.feedforward import bias_activation_dropout
    from xlnet_tf.layers.normalization import residual_layer_norm

    keep = keep_probability(0.5)
    seed = tf.constant([3, 4])
    bias = tf.constant([1.0, 2.0, 3.0, 4.0])
    with kernels.use(backend):
        y = bias_activation_dropout(tf.zeros([500, 4]), bias, "relu", 0.5, seed).numpy()
        dropped = y == 0
        assert 0.45 < dropped.mean() < 0.55
        np.testing.assert_allclose(y[~dropped], np.broadcast_to(bias.numpy() / keep, y.shape)[~dropped], rtol=1e-6)

        scores = tf.zeros([1, 300, 1, 64], tf.bfloat16)  # uniform probabilities 1/64
        with tf.GradientTape() as tape:
            tape.watch(scores)
            probs = attention_probs(scores, tf.zeros([1, 300, 1, 65], tf.bfloat16), None, None, None, None, 0.5,
                                    seed)
            loss = tf.reduce_sum(tf.cast(probs, tf.float32) * 3.0)
        assert probs.dtype == tf.bfloat16
        probs = tf.cast(probs, tf.float32).numpy()
        assert 0.45 < (probs == 0).mean() < 0.55
        np.testing.assert_allclose(probs[probs > 0], 1 / 64 / keep, rtol=1e-2)
        assert np.isfinite(tf.cast(tape.gradient(loss, scores), tf.float32).numpy()).all()

        out = tf.zeros([500, 4])
        rows = residual_layer_norm(out, out, tf.ones([4]), tf.zeros([4]), 1e-12, 0.5, seed, bias=bias).numpy()
        undropped = residual_layer_norm(out, out, tf.ones([4]), tf.zeros([4]), 1e-12, bias=bias).numpy()
    expected_full = (bias.numpy() - bias.numpy().mean()) / bias.numpy().std()
    np.testing.assert_allclose(undropped, np.broadcast_to(expected_full, (500, 4)), rtol=1e-5, atol=1e-5)
    whole = np.isclose(rows, expected_full, atol=1e-5).all(axis=1)
    assert 0.02 < whole.mean() < 0.12  # only rows that kept all 4 entries (1/16) equal LayerNorm(bias)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_runs_finite_and_close(policy):
    cfg = dict(TINY, mem_len=4)
    w = random_weights(cfg, seed=13, scale=0.2)
    batch = model_inputs(**random_batch(np.random.default_rng(13)))
    full = make_model(w, cfg)(batch)
    model = make_model(w, cfg, dtype=policy)
    with tf.GradientTape() as tape:
        out = model(batch, training=True)
        loss = tf.reduce_mean(out["lm_logits"])
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads)
    out = model(batch)
    assert out["lm_logits"].dtype == tf.float32
    assert out["sequence_output"].dtype == tf.as_dtype(policy.split("_")[1])
    for key in ("sequence_output", "query_output", "lm_logits"):
        got = tf.cast(out[key], tf.float32).numpy()
        assert np.isfinite(got).all(), key
        np.testing.assert_allclose(got, full[key].numpy(), atol=0.15, err_msg=key)


def test_batch_size_must_be_even_with_bi_data():
    cfg = dict(TINY, bi_data=True)
    model = XLNetModel(XLNetConfig(**cfg))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bi_data"):
        model(model_inputs(input_ids=np.zeros((3, 4), int)))


def test_dropout_keeps_one_minus_rate_scaled_and_is_identity_at_inference():
    from xlnet_tf.kernels.dropout_mask import dropout, keep_probability
    from xlnet_tf.layers.dropout import Dropout

    layer = Dropout(0.1, seed=1)
    x = tf.ones([400, 250])
    first = layer(x, training=True).numpy()
    assert abs((first > 0).mean() - 0.9) < 0.005
    np.testing.assert_allclose(first[first > 0], 1 / keep_probability(0.1), rtol=1e-6)
    assert abs(keep_probability(0.1) - 0.9) < 1e-5
    assert (layer(x, training=True).numpy() != first).any()  # a fresh mask every call
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    # Odd and even last axes and counts, bfloat16, under XLA: the same rate, the gradient is the mask itself, and the
    # same mask inside a whole XLA-compiled function as op by op.
    seed = tf.constant([3, 4])
    for shape, dtype in (([301, 7, 9], tf.float32), ([64, 1000], tf.bfloat16)):
        x = tf.ones(shape, dtype)
        masks = []
        for jit in (False, True):
            @tf.function(jit_compile=jit)
            def run(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = dropout(x, 0.25, seed)
                    loss = tf.reduce_sum(tf.cast(y, tf.float32) * 2.0)
                return y, tape.gradient(loss, x)
            y, grad = (t.numpy().astype(np.float32) for t in run(x))
            assert abs((y > 0).mean() - 0.75) < 0.01, (shape, jit)
            np.testing.assert_allclose(grad, 2.0 * y, rtol=1e-2)
            assert len(np.unique(y)) == 2
            masks.append(y > 0)
        np.testing.assert_array_equal(masks[0], masks[1])
    # Past 2^32 elements the mask's counter would wrap (masks repeating): refused when the step is traced.
    huge = tf.function(lambda x: dropout(x, 0.1, seed)).get_concrete_function
    huge(tf.TensorSpec([2 ** 16, 2 ** 16], tf.bfloat16))
    with pytest.raises(ValueError, match=r"4295032832 elements .*at most 2\^32"):
        huge(tf.TensorSpec([2 ** 16, 2 ** 16 + 1], tf.bfloat16))


def _fmix32(v):
    v = v ^ (v >> np.uint32(16))
    v = v * np.uint32(0x85EBCA6B)
    v = v ^ (v >> np.uint32(13))
    v = v * np.uint32(0xC2B2AE35)
    return v ^ (v >> np.uint32(16))


def test_dropout_random_words_follow_their_definition_and_are_uniform():
    """The dropout words are the documented counter hash (golden values from a NumPy re-implementation), look
    uniform and independent (bit balance, neighbours, consecutive seeds), and give the documented keep rate."""
    from xlnet_tf.kernels import dropout_mask as dropout

    seed = tf.constant([123, 7])
    n = 1 << 20
    words = dropout.random_bits(tf.constant([n]), seed).numpy().view(np.uint32)
    with np.errstate(over="ignore"):
        k0 = _fmix32(np.uint32(123) + np.uint32(0x9E3779B9))
        k1 = _fmix32(np.uint32(7) ^ k0)
        i = np.arange(n // 2, dtype=np.uint32)
        expected = _fmix32(_fmix32(_fmix32(i ^ k0) + k1) ^ k0)
    np.testing.assert_array_equal(words, expected)
    # An odd count takes the low half of its last word.
    odd = dropout.random_bits(tf.constant([3, 5]), seed).numpy().ravel()
    np.testing.assert_array_equal(odd, expected[:8].view(np.int16)[:15])
    # A TPU's form counts each element's index in the tensor's own shape: the same bits, odd sizes on every axis.
    with ops.building_for_tpu():
        for shape in ([n], [3, 5], [2, 3, 7, 9]):
            bits = dropout.random_bits(tf.constant(shape), seed).numpy().ravel()
            np.testing.assert_array_equal(bits, expected.view(np.int16)[:bits.size])

    bit_means = ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.abs(bit_means - 0.5).max() < 5 * 0.5 / math.sqrt(words.size)
    u = words / 2.0 ** 32
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    next_seed = dropout.random_bits(tf.constant([n]), seed + [0, 1]).numpy().view(np.uint32)
    assert abs(np.corrcoef(u, next_seed / 2.0 ** 32)[0, 1]) < 0.01
    assert (words == next_seed).mean() < 1e-3

    keep = dropout.keep_mask(tf.zeros([1000, 999]), 0.1, seed)
    assert abs(keep.numpy().mean() - dropout.keep_probability(0.1)) < 0.003


def test_cross_entropy_rejects_labels_outside_the_vocabulary():
    from xlnet_tf.objectives.losses import cross_entropy

    logits = tf.zeros([2, 3, 50])
    np.testing.assert_allclose(cross_entropy(logits, tf.zeros([2, 3], tf.int32))[0].numpy(),
                               np.full((2, 3), math.log(50)), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="label id outside the vocabulary"):
        cross_entropy(logits, tf.constant([[0, 1, 50], [0, 0, 0]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative label id"):
        cross_entropy(logits, tf.constant([[0, 1, -1], [0, 0, 0]]))


def test_dropout_seed_states_restore_the_next_masks(tmp_path):
    """A checkpoint holding ``seed_states`` resumes the dropout stream: after restoring, a fresh model draws the
    masks the original draws next (without them it would replay the masks of step 0)."""
    from xlnet_tf.layers.dropout import seed_states

    cfg = dict(TINY)
    inputs = model_inputs(**random_batch(np.random.default_rng(31)))
    model = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.3, dropatt=0.3))
    fresh = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.3, dropatt=0.3))
    fresh.set_weights(model.get_weights())
    assert len(seed_states(model)) == 3 + 4 * cfg["n_layer"]  # embedding, output, position; 4 per layer
    # In the order of the checkpoints written so far, so that those restore each state into its own layer.
    net = model.xlnet
    dropouts = [net._output_dropout, net._embedding_dropout]
    for block in reversed(net.blocks):
        dropouts += [block.ff._output_dropout, block.ff._inner_dropout, block.rel_attn._attention_dropout,
                     block.rel_attn._output_dropout]
    dropouts.append(net.position_encoding._dropout)
    assert [id(s) for s in seed_states(model)] == [id(d.seed_generator.state) for d in dropouts]

    def copy_seeds():
        for source, target in zip(seed_states(model), seed_states(fresh)):
            target.assign(source)

    copy_seeds()
    first = model(inputs, training=True)["lm_logits"].numpy()
    np.testing.assert_array_equal(fresh(inputs, training=True)["lm_logits"].numpy(), first)
    path = tf.train.Checkpoint(seeds=seed_states(model)).write(str(tmp_path / "ckpt"))
    expected = model(inputs, training=True)["lm_logits"].numpy()
    assert not np.array_equal(expected, first)
    for state in seed_states(fresh):  # a restarted process: seeds of its own
        state.assign(state + 1000)
    assert not np.array_equal(fresh(inputs, training=True)["lm_logits"].numpy(), expected)
    tf.train.Checkpoint(seeds=seed_states(fresh)).read(path).assert_consumed()
    np.testing.assert_array_equal(fresh(inputs, training=True)["lm_logits"].numpy(), expected)
