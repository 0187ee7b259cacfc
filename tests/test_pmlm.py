"""UniLMv2's pseudo-masked LM and MPNet on the XLNet backbone: the masks (one builder), the span sampling, the
corruption, the generalised position term, and what the model can and cannot see."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf import XLNetConfig, XLNetPretrainer, kernels, ops
from xlnet_tf.data.factorization import blockwise_steps, corrupt, eligible_for_masking, max_masked
from xlnet_tf.layers.attention import gather_relative, rel_shift
from xlnet_tf.objectives import OBJECTIVES, BatchShape
from xlnet_tf.objectives.mpnet import make_mpnet_batch
from xlnet_tf.objectives.plm import make_pretraining_batch
from xlnet_tf.objectives.pmlm import make_pmlm_batch
from xlnet_tf.tokenization import CLS_ID, MASK_ID, SEP_ID

VOCAB = 200
# Large initial weights: the invariance tests need the visible inputs to move the outputs clearly.
TINY = XLNetConfig(n_token=VOCAB, n_layer=3, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0,
                   initializer_range=0.3)


def random_records(rng, batch, length):
    """Text ids with XLNet's functional tokens: A <sep> B <sep> <cls>, segments 0 / 1 / 2."""
    ids = rng.integers(10, VOCAB, size=(batch, length))
    seg = np.zeros((batch, length), np.int64)
    for b in range(batch):
        sep = int(rng.integers(length // 3, length - 3))
        ids[b, [sep, length - 2]] = SEP_ID
        ids[b, length - 1] = CLS_ID
        seg[b, sep + 1:] = 1
        seg[b, length - 1] = 2
    return ids, seg


def built(builder, batch, length, seed, draw=0):
    """``builder``'s (make_pmlm_batch / make_mpnet_batch) inputs for random records, as NumPy: (records, inputs)."""
    ids, seg = random_records(np.random.default_rng(seed), batch, length)
    out = builder(tf.constant(ids), tf.constant(seg), tf.constant([seed, draw]), VOCAB)
    return (ids, seg), {k: v.numpy() for k, v in out.items()}


def closure(visible):
    """Transitive closure of a boolean [T, T] attention graph (i reaches j through any chain of layers)."""
    reach = visible.copy()
    while True:
        grown = reach | ((reach.astype(np.int32) @ reach.astype(np.int32)) > 0)
        if (grown == reach).all():
            return reach
        reach = grown


def content_reach(perm_mask):
    """What each content row can depend on after any number of layers: the model adds the own position."""
    return closure((perm_mask == 0) | np.eye(perm_mask.shape[0], dtype=bool))


# ------------------------------------------------------------------------------------------- masks (no model)


def pmlm_attention(out, b, length):
    """The whole [L + 2K, L + 2K] mask of example b (1 = blocked): the corrupted sequence sees itself only (the
    content stream), the appended rows see what ``query_perm_mask`` allows."""
    rows = out["query_perm_mask"][b]
    top = np.concatenate([np.zeros((length, length)), np.ones((length, rows.shape[0]))], axis=1)
    return np.concatenate([top, rows], axis=0)


@pytest.mark.parametrize("seed", range(6))
def test_pmlm_pseudo_masks_never_reach_the_originals_of_their_own_or_later_steps(seed):
    length = 48
    (ids, _), out = built(make_pmlm_batch, 8, length, seed, draw=1)
    k = max_masked(length)
    for b in range(8):
        pm, valid = pmlm_attention(out, b, length), out["target_mask"][b, :k] > 0
        masked = out["lm_positions"][b, :k]
        reach = content_reach(pm)
        # The factorisation step of every appended slot (the span index): the order in which its rows see.
        step = np.array([reach[length + i, length:length + k][valid].sum() for i in range(k)])
        originals, pseudo = np.arange(length, length + k), np.arange(length + k, length + 2 * k)
        for i in np.flatnonzero(valid):
            own_or_later = originals[valid & (step >= step[i])]
            assert not reach[pseudo[i], own_or_later].any(), "a pseudo mask reaches its own or a later original"
            earlier = originals[valid & (step < step[i])]
            assert reach[pseudo[i], earlier].all(), "a pseudo mask sees the originals of earlier steps"
            same_span = pseudo[valid & (step == step[i])]
            assert (pm[pseudo[i], same_span] == 0).all(), "the pseudo masks of one span see each other"
            assert (pm[pseudo[i], :length] == 0).all() and (pm[originals[i], :length] == 0).all()
        # its own token reaches a pseudo mask only through the corrupted sequence, where the masked positions are
        # corrupted (10% kept unchanged, by design); every other position is the text itself
        unmasked = ~np.isin(np.arange(length), masked[valid])
        assert (out["input_ids"][b][unmasked] == ids[b][unmasked]).all()


@pytest.mark.parametrize("seed", range(4))
def test_mpnet_queries_never_reach_the_originals_of_their_own_or_later_tokens(seed):
    length = 40
    _, out = built(make_mpnet_batch, 6, length, seed, draw=2)
    for b in range(6):
        reach = content_reach(out["perm_mask"][b])
        valid = out["target_mask"][b] > 0
        position = out["target_mapping"][b].argmax(-1)
        for i in np.flatnonzero(valid):
            seen = (out["query_perm_mask"][b, i] == 0)
            reached = seen | reach[seen].any(0)
            assert not reached[position[i:][valid[i:]]].any(), "a query reaches its own or a later original"
            assert reached[position[:i]].all(), "a query sees the originals before it"
            # position compensation: the placeholders of the tokens not yet predicted, its own included
            assert seen[length + i:length + valid.sum()].all() and not seen[length:length + i].any()


def test_xlnet_perm_mask_comes_from_the_same_rule():
    """The query stream of a target never reaches itself or a later target through the content stream."""
    rng = np.random.default_rng(3)
    ids, seg = random_records(rng, 4, 32)
    is_masked = rng.random((4, 32)) < 0.3
    out = {k: v.numpy() for k, v in make_pretraining_batch(tf.constant(ids), tf.constant(is_masked),
                                                           tf.constant(seg), 32, 16, 8, 12,
                                                           tf.constant([1, 2], tf.int64)).items()}
    for b in range(4):
        pm = out["perm_mask"][b]
        reach = content_reach(pm)
        targets = out["target_mapping"][b].argmax(-1)[out["target_mask"][b] > 0]
        for t in targets:
            reached = (pm[t] == 0) | reach[pm[t] == 0].any(0)
            assert not reached[t], "a target's query stream reaches its own token"
            later = targets[pm[t, targets] == 1]
            assert not reached[later].any()


def test_blockwise_spans_follow_algorithm_1():
    rng = np.random.default_rng(0)
    length, batch = 96, 64
    ids, _ = random_records(rng, batch, length)
    padding = np.ones((batch, length), bool)
    padding[::3, -20:] = False  # right padding in every third example
    eligible = eligible_for_masking(tf.constant(ids), tf.constant(padding)).numpy()
    step = blockwise_steps(tf.constant(eligible), tf.constant([5, 6])).numpy()
    lengths = []
    for b in range(batch):
        goal = int(np.ceil(0.15 * eligible[b].sum()))
        covered = step[b] > 0
        assert goal <= covered.sum() <= goal + 5, "about 15% of the real tokens"
        assert not (covered & ~eligible[b]).any(), "never <sep>, <cls> or padding"
        for s in range(1, step[b].max() + 1):
            where = np.flatnonzero(step[b] == s)
            assert len(where) and (np.diff(where) == 1).all(), "a step is one contiguous span"
            lengths.append(len(where))
        # the span that reaches the goal is the last one
        assert (step[b] < step[b].max()).sum() - (~covered).sum() < goal
    lengths = np.array(lengths)
    assert set(lengths) <= {1, 2, 3, 4, 5, 6}
    # Singles and blocks are drawn 60 / 40; blocks are rejected a little more often (they overlap more).
    assert 0.25 < (lengths > 1).mean() < 0.45
    assert set(lengths[lengths > 1]) == {2, 3, 4, 5, 6}


def test_corruption_rates_80_10_10():
    tokens = tf.constant(np.random.default_rng(1).integers(10, VOCAB, size=(200, 500)), tf.int32)
    out = corrupt(tokens, tf.constant([3, 4]), VOCAB).numpy()
    n = out.size
    masked = (out == MASK_ID).mean()
    kept = (out == tokens.numpy()).mean()
    random = 1 - masked - kept
    tol = 4 * np.sqrt(0.1 * 0.9 / n)
    assert abs(masked - 0.8) < tol and abs(kept - (0.1 + 0.1 / (VOCAB - 9))) < tol and abs(random - 0.1) < tol
    assert ((out >= 9) | (out == MASK_ID)).all()  # random replacements are never special symbols


def test_pmlm_corrupts_only_the_masked_positions_and_the_appended_rows_copy_them():
    length = 64
    (ids, seg), out = built(make_pmlm_batch, 32, length, seed=2, draw=9)
    k = max_masked(length)
    masked = out["lm_positions"][:, :k]
    valid = out["target_mask"][:, :k] > 0
    part_a = out["input_ids"]
    is_masked = np.zeros_like(part_a, bool)
    for b in range(32):
        is_masked[b, masked[b][valid[b]]] = True
    assert (part_a[~is_masked] == ids[~is_masked]).all()
    assert 0.7 < (part_a[is_masked] == MASK_ID).mean() < 0.9
    np.testing.assert_array_equal(out["segment_ids"], seg)
    for b in range(32):
        m = masked[b][valid[b]]
        np.testing.assert_array_equal(out["query_ids"][b, :k][valid[b]], ids[b, m])
        np.testing.assert_array_equal(out["target"][b, :k][valid[b]], ids[b, m])
        np.testing.assert_array_equal(out["target"][b, k:], out["target"][b, :k])
        for part in (slice(0, k), slice(k, 2 * k)):  # both appended parts sit at the masked positions
            np.testing.assert_array_equal(out["target_mapping"][b, part][valid[b]], np.eye(length)[m])
            assert (out["target_mapping"][b, part][~valid[b]] == 0).all()
        np.testing.assert_array_equal(out["lm_positions"][b, k:], length + k + np.arange(k))
        np.testing.assert_array_equal(out["pseudo_mask"][b], np.arange(2 * k) >= k)
        # padded slots are invisible keys
        pad = np.flatnonzero(~valid[b])
        assert (out["query_perm_mask"][b][:, length + pad] == 1).all()
        assert (out["query_perm_mask"][b][:, length + k + pad] == 1).all()


def test_objective_batches_are_deterministic_and_static():
    ids, seg = random_records(np.random.default_rng(4), 4, 32)
    records = {"input": tf.constant(ids), "is_masked": tf.constant(ids > 100), "seg_id": tf.constant(seg)}
    for name, objective in OBJECTIVES.items():
        a, b, c = (objective.make_batch(records, BatchShape(32, 16, 16, 6), tf.constant(seed, tf.int64), VOCAB)
                   for seed in ([1, 1], [1, 1], [1, 2]))
        assert set(a) == set(objective.model_inputs) | {"target", "target_mask"}
        for key in a:
            np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
            assert a[key].shape[1:] == c[key].shape[1:]
        assert any((a[key].numpy() != c[key].numpy()).any() for key in a)


# ------------------------------------------------------------------------------------------- position term


def test_gather_relative_is_rel_shift_on_consecutive_positions():
    rng = np.random.default_rng(0)
    mlen, qlen = 3, 5
    klen = mlen + qlen
    scores = tf.constant(rng.normal(size=(2, 3, qlen, klen + qlen)), tf.float32)
    consecutive = np.tile(np.arange(klen, dtype=np.int32), (3, 1))
    got = gather_relative(scores, tf.constant(consecutive[:, mlen:]), klen, tf.constant(consecutive))
    np.testing.assert_array_equal(got.numpy(), rel_shift(scores, klen).numpy())


def test_gather_relative_on_permuted_and_duplicated_positions_matches_numpy():
    rng = np.random.default_rng(1)
    n, b, rlen = 2, 3, 24
    klen, q = 12, 7
    scores = rng.normal(size=(n, b, q, rlen)).astype(np.float32)
    key_pos = np.stack([rng.permutation(klen) for _ in range(b)]).astype(np.int32)
    key_pos[:, -4:] = key_pos[:, :4]  # duplicated positions (appended copies)
    query_pos = rng.integers(0, klen, size=(b, q), dtype=np.int32)
    got = gather_relative(tf.constant(scores), tf.constant(query_pos), klen, tf.constant(key_pos)).numpy()
    want = np.empty((n, b, q, klen), np.float32)
    for h in range(n):
        for bb in range(b):
            for i in range(q):
                for j in range(klen):
                    want[h, bb, i, j] = scores[h, bb, i, klen - (query_pos[bb, i] - key_pos[bb, j])]
    np.testing.assert_array_equal(got, want)
    # Traced with unknown shapes (its flat index then in int64): the same values.
    traced = tf.function(lambda *args: gather_relative(*args[:2], klen, args[2]), input_signature=[
        tf.TensorSpec([None] * 4, tf.float32), tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_array_equal(traced(scores, query_pos, key_pos).numpy(), want)
    # The gradient adds up where several keys read one column (the duplicated positions).
    weight = rng.normal(size=want.shape).astype(np.float32)
    scores_t = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(scores_t)
        total = tf.reduce_sum(weight * gather_relative(scores_t, tf.constant(query_pos), klen, tf.constant(key_pos)))
    want_grad = np.zeros_like(scores)
    for h, bb, i, j in np.ndindex(*want.shape):
        want_grad[h, bb, i, klen - (query_pos[bb, i] - key_pos[bb, j])] += weight[h, bb, i, j]
    np.testing.assert_allclose(tape.gradient(total, scores_t).numpy(), want_grad, rtol=1e-6, atol=1e-6)


def test_ops_are_for_a_tpu_where_one_runs_them_or_as_the_caller_says():
    """``ops.for_tpu()``: False in this process (no TPU, no TPUStrategy); ``building_for_tpu`` says otherwise
    either way (an export for a TPU; a TPU run timing the other devices' forms), nested, and restores it."""
    assert not ops.for_tpu()
    with ops.building_for_tpu():
        assert ops.for_tpu()
        with ops.building_for_tpu(False):
            assert not ops.for_tpu()
        assert ops.for_tpu()
    assert not ops.for_tpu()


@pytest.mark.parametrize("rlen", [24, 13])  # the encoding's rows: 2 klen; shorter, columns past it clamped
def test_gather_relative_for_a_tpu_takes_the_key_columns_of_each_window(rlen):
    """For a TPU (which runs a gather with an index per element at ~300x its bytes), keys at explicit positions
    (UniLMv2, MPNet) read the columns of each row's window at their positions, by a product with a one-hot matrix
    at HIGHEST precision: the same float32 numbers as the element gather, and its gradient, which adds up where
    several keys read one column (duplicated positions, the clamped edge)."""
    rng = np.random.default_rng(4)
    n, b, q, klen = 2, 3, 5, 12
    scores = tf.constant(rng.normal(size=(n, b, q, rlen)).astype(np.float32))
    key_pos = np.stack([rng.permutation(klen) for _ in range(b)]).astype(np.int32)
    key_pos[:, -4:] = key_pos[:, :4]  # duplicated positions (appended copies)
    key_pos = tf.constant(key_pos)
    query_pos = tf.constant(rng.integers(0, klen, size=(b, q)), tf.int32)
    weight = tf.constant(rng.normal(size=(n, b, q, klen)).astype(np.float32))

    def step(scores):
        with tf.GradientTape() as tape:
            tape.watch(scores)
            out = gather_relative(scores, query_pos, klen, key_pos)
            total = tf.reduce_sum(weight * out)
        return out, tape.gradient(total, scores)

    want, want_grad = step(scores)  # outside XLA: the element gather
    compiled = tf.function(step, jit_compile=True)
    with ops.building_for_tpu():
        out, grad = compiled(scores)
        hlo = compiled.experimental_get_compiler_ir(scores)(stage="hlo")
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-6, atol=1e-6)
    assert " gather(" not in hlo and "operand_precision={highest,highest}" in hlo


@pytest.mark.parametrize("rlen", [24, 13, 9])  # 'bi' without memory; with memory; 'uni' (klen + 1 rows)
@pytest.mark.parametrize("tpu", [False, True], ids=["gather", "tpu"])
def test_gather_relative_under_xla_takes_a_window_of_each_row(rlen, tpu):
    """Under XLA (jit_compile, TPUs), queries against consecutive keys read a window of their row, gathered with
    one start per row (an index per element costs a GPU 8x the scores' bytes, a TPU ~300x), or for a TPU, which
    runs that gather as a loop over rows, by whole-row shifts: the same numbers as the element gather outside XLA
    and its gradient, columns past a short table clamped to its last."""
    rng = np.random.default_rng(2)
    n, b, q, klen = 2, 3, 5, 8
    scores = tf.constant(rng.normal(size=(n, b, q, rlen)).astype(np.float32))
    query_pos = tf.constant(rng.integers(0, klen, size=(b, q)), tf.int32)
    weight = tf.constant(rng.normal(size=(n, b, q, klen)).astype(np.float32))

    def step(scores, query_pos):
        with tf.GradientTape() as tape:
            tape.watch(scores)
            out = gather_relative(scores, query_pos, klen)
            total = tf.reduce_sum(weight * out)
        return out, tape.gradient(total, scores)

    want = np.empty((n, b, q, klen), np.float32)
    for h, bb, i, j in np.ndindex(*want.shape):
        want[h, bb, i, j] = scores.numpy()[h, bb, i, min(klen - int(query_pos[bb, i]) + j, rlen - 1)]
    compiled = tf.function(step, jit_compile=True)
    with ops.building_for_tpu(tpu):  # traced here
        out, grad = compiled(scores, query_pos)
        hlo = compiled.experimental_get_compiler_ir(scores, query_pos)(stage="hlo")
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(grad.numpy(), step(scores, query_pos)[1].numpy(), rtol=1e-6, atol=1e-6)
    assert (f"slice_sizes={{1,1,1,{klen}}}" in hlo) != tpu  # the windows, not an index per element
    assert (" gather(" in hlo) != tpu  # for a TPU no gather at all


@pytest.mark.parametrize("width,size,edge", [(70, 30, 0), (50, 30, 10), (37, 20, 3), (64, 63, 0), (20, 20, 5),
                                             (1408, 896, 384)])  # the last: base-512's query stream
def test_row_windows_for_a_tpu_by_base_4_shifts(width, size, edge):
    """A TPU's row windows (base-4 shifts, every digit of the largest start, the top one below 3 too; columns past
    the row's end read its last entry, the ``edge``): the entries a window starting at ``start`` (clamped to the
    largest) reads, and their gradient, which adds up where several columns read one entry."""
    rng = np.random.default_rng(width)
    n, b, q = (1, 1, 8) if width > 1000 else (2, 2, 7)
    x = rng.normal(size=(n, b, q, width)).astype(np.float32)
    span = width + edge - size
    start = rng.integers(0, span + 3, size=(b, q)).astype(np.int32)  # past the largest too
    start[0, :3] = [0, span, span + 2]
    weight = rng.normal(size=(n, b, q, size)).astype(np.float32)

    extended = np.concatenate([x, np.repeat(x[..., -1:], edge, axis=-1)], axis=-1)
    cols = np.minimum(start, span)[None, ..., None] + np.arange(size)  # [1, b, q, size] into the extended row
    want = np.take_along_axis(extended, np.broadcast_to(cols, weight.shape), axis=-1)
    want_grad = np.zeros_like(x)
    rows = np.indices(weight.shape)
    np.add.at(want_grad, (rows[0], rows[1], rows[2], np.minimum(np.broadcast_to(cols, weight.shape), width - 1)),
              weight)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = ops.row_windows(x, tf.constant(start), size, edge=edge)
            total = tf.reduce_sum(weight * out)
        return out, tape.gradient(total, x)

    compiled = tf.function(step, jit_compile=True)
    with ops.building_for_tpu():
        out, grad = compiled(tf.constant(x))
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-5, atol=1e-5)


def test_explicit_consecutive_positions_leave_xlnet_unchanged():
    rng = np.random.default_rng(5)
    ids, seg = random_records(rng, 2, 16)
    batch = make_pretraining_batch(tf.constant(ids), tf.constant(rng.random((2, 16)) < 0.3), tf.constant(seg), 16,
                                   8, 8, 5, tf.constant([1, 1], tf.int64))
    model = XLNetPretrainer(TINY)
    inputs = {k: batch[k] for k in OBJECTIVES["plm"].model_inputs}
    base = model(inputs)
    moved = model(dict(inputs, position_ids=tf.tile(tf.range(16)[None], [2, 1])))
    for key in ("sequence_output", "query_output", "lm_logits"):
        np.testing.assert_allclose(moved[key].numpy(), base[key].numpy(), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------- model


def _pmlm_inputs(seed, length=40, batch=4):
    return built(make_pmlm_batch, batch, length, seed, draw=7)[1]


def _logits(model, batch, objective="pmlm"):
    return model({k: tf.constant(batch[k]) for k in OBJECTIVES[objective].model_inputs})["lm_logits"].numpy()


def test_pmlm_autoencoding_predictions_ignore_the_appended_part():
    model = XLNetPretrainer(TINY)
    batch = _pmlm_inputs(0)
    length, k = 40, max_masked(40)
    base = _logits(model, batch)
    rng = np.random.default_rng(1)
    changed = dict(batch, query_ids=rng.integers(10, VOCAB, size=(4, 2 * k)).astype(np.int32),
                   target_mapping=np.eye(length, dtype=np.float32)[rng.integers(0, length, size=(4, 2 * k))])
    got = _logits(model, changed)
    np.testing.assert_allclose(got[:, :k], base[:, :k], atol=1e-5, rtol=0)
    assert np.abs(got[:, k:] - base[:, k:]).max() > 1e-3  # the pseudo masks do read the appended part


def test_pmlm_pseudo_predictions_ignore_the_originals_of_their_own_and_later_steps():
    model = XLNetPretrainer(TINY)
    batch = _pmlm_inputs(3)
    length, k = 40, max_masked(40)
    base = _logits(model, batch)
    for b in range(4):
        valid = np.flatnonzero(batch["target_mask"][b, :k] > 0)
        # the original slots a pseudo mask sees are exactly those of the earlier steps: rank the spans by them
        seen = (batch["query_perm_mask"][b][k:, length:length + k] == 0).sum(1)
        s = valid[len(valid) // 2]

        def logits_with_changed(slots):
            changed = {key: value.copy() for key, value in batch.items()}
            changed["query_ids"][b, slots] = (changed["query_ids"][b, slots] + 1) % VOCAB
            return _logits(model, changed)[b, k + s]

        np.testing.assert_allclose(logits_with_changed([i for i in valid if seen[i] >= seen[s]]),
                                   base[b, k + s], atol=1e-5, rtol=0)
        earlier = [i for i in valid if seen[i] < seen[s]]
        if earlier:
            assert np.abs(logits_with_changed(earlier) - base[b, k + s]).max() > 1e-4


def test_mpnet_query_predictions_ignore_their_own_and_later_originals():
    model = XLNetPretrainer(TINY)
    _, batch = built(make_mpnet_batch, 3, 40, seed=4, draw=5)
    base = _logits(model, batch, "mpnet")
    for b in range(3):
        valid = np.flatnonzero(batch["target_mask"][b] > 0)
        i = valid[len(valid) // 2]
        position = batch["target_mapping"][b].argmax(-1)
        changed = {key: value.copy() for key, value in batch.items()}
        changed["input_ids"][b, position[i:len(valid)]] = (changed["input_ids"][b, position[i:len(valid)]] + 1) % VOCAB
        np.testing.assert_allclose(_logits(model, changed, "mpnet")[b, i], base[b, i], atol=1e-5, rtol=0)


@pytest.mark.parametrize("objective", ["plm", "pmlm", "mpnet"])
def test_each_objective_as_a_tpu_runs_it_computes_the_same_numbers(objective):
    """The model compiled as a TPU runs it (the query stream's windows by row shifts, the key columns of UniLMv2
    and MPNet by one-hot products: ``ops.for_tpu``) gives the logits and weight gradients of the plain ops outside
    XLA, to float32 round-off."""
    builder = {"plm": None, "pmlm": make_pmlm_batch, "mpnet": make_mpnet_batch}[objective]
    if builder is None:
        rng = np.random.default_rng(6)
        ids, seg = random_records(rng, 2, 16)
        batch = make_pretraining_batch(tf.constant(ids), tf.constant(rng.random((2, 16)) < 0.3), tf.constant(seg),
                                       16, 8, 8, 5, tf.constant([1, 1], tf.int64))
        batch = {k: np.asarray(v) for k, v in batch.items()}
    else:
        batch = built(builder, 3, 40, seed=6, draw=5)[1]
    model = XLNetPretrainer(dataclasses.replace(TINY, n_layer=1))  # every layer takes the same forms
    inputs = {k: tf.constant(batch[k]) for k in OBJECTIVES[objective].model_inputs}

    def step(inputs):
        with tf.GradientTape() as tape:
            logits = model(inputs)["lm_logits"]
            total = tf.reduce_sum(tf.sin(logits))
        return [logits] + tape.gradient(total, model.trainable_variables)

    with kernels.use("plain"):
        want = [t.numpy() for t in step(inputs)]
        compiled = tf.function(step, jit_compile=True)
        with ops.building_for_tpu():
            got = [t.numpy() for t in compiled(inputs)]
            hlo = compiled.experimental_get_compiler_ir(inputs)(stage="hlo")
    # no gather in the attention (the embedding's rows and the masks' are gathers a TPU takes without a loop)
    assert not [line for line in hlo.splitlines() if " gather(" in line and "rel_attn" in line]
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * np.abs(b).max(), err_msg=str(i))


def test_pmlm_split_attention_equals_one_dense_stream_with_position_ids():
    """The split form (content stream + appended query rows that are keys too) computes exactly the single stream
    [corrupted | originals | pseudo] with explicit position ids and the whole mask (the s2s-ft layout)."""
    model = XLNetPretrainer(TINY)
    model.xlnet.word_embedding[MASK_ID].assign(model.xlnet.mask_emb[0, 0])  # a dense [P] token: mask_emb
    length = 40
    batch = _pmlm_inputs(5)
    split = _logits(model, batch)
    positions = batch["target_mapping"].argmax(-1)
    dense = {
        "input_ids": np.concatenate([batch["input_ids"], batch["query_ids"]], axis=1),
        "segment_ids": np.concatenate([batch["segment_ids"],
                                       np.take_along_axis(batch["segment_ids"], positions, axis=1)], axis=1),
        "position_ids": np.concatenate([np.tile(np.arange(length), (4, 1)), positions], axis=1),
        "perm_mask": np.stack([pmlm_attention(batch, b, length) for b in range(4)]).astype(np.float32),
        "lm_positions": batch["lm_positions"],
    }
    got = model({key: tf.constant(value) for key, value in dense.items()})["lm_logits"].numpy()
    real = batch["target_mask"] > 0
    np.testing.assert_allclose(got[real], split[real], atol=2e-5, rtol=0)
