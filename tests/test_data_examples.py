"""Record construction (pure numpy): stream layout, A/B split, span masks, refused settings."""

import os

import numpy as np
import pytest

from xlnet_tf.data import examples as ex
from xlnet_tf.tokenization import CLS_ID, SEP_ID, XLNetTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SP_MODEL = os.path.join(ROOT, "data", "spiece.model")


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SP_MODEL)


@pytest.fixture(scope="module")
def is_start(tokenizer):
    return ex.start_piece_table(tokenizer)


@pytest.fixture(scope="module")
def text_ids(tokenizer):
    with open(os.path.join(ROOT, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines()[:400] if line.strip()]
    return np.array([i for line in lines for i in tokenizer.encode_ids(line)], dtype=np.int64)


# ---------------------------------------------------------------------------------------------- A/B split

def _original_trim(a, b, tot):
    while a + b > tot:
        if a > b:
            a -= 1
        else:
            b -= 1
    return a, b


def test_trim_matches_original_loop():
    for a in range(0, 30):
        for b in range(0, 30):
            for tot in range(1, 40):
                assert ex.trim_a_and_b(a, b, tot) == _original_trim(a, b, tot), (a, b, tot)


def _original_split(data, sent_ids, begin_idx, tot_len, rng):
    """The original `_split_a_and_b` (without extend_target), with our Generator in place of `random`."""
    data_len = data.shape[0]
    if begin_idx + tot_len >= data_len:
        return None
    end_idx = begin_idx + 1
    cut_points = []
    while end_idx < data_len:
        if sent_ids[end_idx] != sent_ids[end_idx - 1]:
            if end_idx - begin_idx >= tot_len:
                break
            cut_points.append(end_idx)
        end_idx += 1
    a_begin = begin_idx
    if len(cut_points) == 0 or rng.random() < 0.5:
        label = 0
        a_end = end_idx if len(cut_points) == 0 else int(rng.choice(np.array(cut_points)))
        b_len = max(1, tot_len - (a_end - a_begin))
        b_begin = int(rng.integers(0, data_len - b_len))
        b_end = b_begin + b_len
        while b_begin > 0 and sent_ids[b_begin - 1] == sent_ids[b_begin]:
            b_begin -= 1
        while b_end < data_len - 1 and sent_ids[b_end - 1] == sent_ids[b_end]:
            b_end += 1
    else:
        label = 1
        a_end = int(rng.choice(np.array(cut_points)))
        b_begin = a_end
        b_end = end_idx
    while a_end - a_begin + b_end - b_begin > tot_len:
        if a_end - a_begin > b_end - b_begin:
            a_end -= 1
        else:
            b_end -= 1
    return data[a_begin:a_end], data[b_begin:b_end], label


def test_split_a_and_b_matches_original():
    gen = np.random.default_rng(0)
    for trial in range(300):
        n = int(gen.integers(40, 300))
        # sentences of random lengths (some very long), ids flipping at each
        lengths = gen.geometric(1 / float(gen.choice([3, 10, 60])), size=n)
        sent = np.repeat(np.arange(n) % 2 == 0, lengths)[:n]
        data = np.arange(len(sent))
        tot = int(gen.integers(1, 40))
        begin = int(gen.integers(0, n))
        want = _original_split(data, sent, begin, tot, np.random.default_rng(trial))
        got = ex.split_a_and_b(data, ex.sentence_boundaries(sent), begin, tot, np.random.default_rng(trial))
        if want is None:
            assert got is None
            continue
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2] == want[2]
        assert len(got[0]) + len(got[1]) == tot


# ---------------------------------------------------------------------------------------------- span masks

def _words_in(seg, is_start, beg, end):
    return int(is_start[seg[beg:end]].sum())


@pytest.mark.parametrize("bug", [False, True])
def test_spans_count_words_or_pieces(text_ids, is_start, bug):
    seg_len, goal = 256, 43
    spans_pieces, spans_words, partial = [], [], 0
    for seed in range(60):
        off = seed * 97 % (len(text_ids) - seg_len)
        seg = text_ids[off:off + seg_len]
        spans = ex.sample_spans(seg, is_start, goal, np.random.default_rng(seed), 6, 1, original_span_bug=bug)
        assert sum(e - b for b, e in spans) <= goal
        for b, e in spans:
            assert is_start[seg[b]], "a span starts at a word start"
            words = _words_in(seg, is_start, b, e)
            assert 1 <= words <= ex.MAX_GRAM
            spans_pieces.append(e - b)
            spans_words.append(words)
            partial += not is_start[seg[e]]  # span ends inside a word
    if bug:
        assert max(spans_pieces) <= ex.MAX_GRAM, "the original's spans are at most 5 pieces"
        assert partial > 0, "piece-counted spans cut words"
    else:
        assert partial == 0, "word spans end at a word boundary"
        assert max(spans_pieces) > ex.MAX_GRAM, "5 words are often more than 5 pieces"
        assert np.mean(spans_pieces) > np.mean(spans_words)
    # p ~ 1/n: one-word spans are the most frequent
    counts = np.bincount(spans_words, minlength=6)[1:]
    assert counts[0] == counts.max()


def test_mask_exact_count_never_functional_and_deterministic(text_ids, is_start):
    for seed in range(200):
        gen = np.random.default_rng(seed)
        n = int(gen.integers(8, 80))
        seg = text_ids[seed:seed + n].copy()
        # functional tokens where the writer puts them (A <sep> B <sep> <cls>) and at random places
        seg[-1], seg[-2] = CLS_ID, SEP_ID
        seg[gen.integers(0, n, size=2)] = SEP_ID
        free = int(((seg != SEP_ID) & (seg != CLS_ID)).sum())
        goal = int(gen.integers(1, free + 1))
        alpha, beta = int(gen.integers(1, 8)), int(gen.integers(1, 3))
        for reverse in (False, True):
            m = ex.sample_mask(seg, is_start, goal, np.random.default_rng(seed), alpha, beta, reverse,
                               original_span_bug=bool(seed % 2))
            assert m.sum() == goal
            assert not m[(seg == SEP_ID) | (seg == CLS_ID)].any()
            m2 = ex.sample_mask(seg, is_start, goal, np.random.default_rng(seed), alpha, beta, reverse,
                                original_span_bug=bool(seed % 2))
            np.testing.assert_array_equal(m, m2)


def test_mask_ratio_follows_alpha_beta(text_ids, is_start):
    """Without a goal cap, about beta of every alpha tokens are predicted (span / (span + context))."""
    seg = text_ids[:4000]
    m = ex.sample_mask(seg, is_start, 4000 // 7, np.random.default_rng(0), 6, 1)
    spans = ex.sample_spans(seg, is_start, 10**6, np.random.default_rng(0), 6, 1)
    covered = sum(e - b for b, e in spans) / len(seg)
    assert 0.08 < covered < 0.25, covered
    assert m.sum() == 4000 // 7


def test_backward_mask_spans_whole_words(text_ids, is_start):
    seg = text_ids[:256]
    m = ex.sample_mask(seg[::-1].copy(), is_start, 40, np.random.default_rng(3), 6, 1, reverse=True)
    fwd = m[::-1]
    spans = ex.sample_spans(seg, is_start, 40, np.random.default_rng(3), 6, 1)
    covered = np.zeros(256, bool)
    for b, e in spans:
        covered[b:e] = True
    assert (fwd & covered).sum() == covered.sum(), "the backward row's spans are the forward text's word spans"


# ---------------------------------------------------------------------------------------------- layout

def test_bi_data_layout_per_core():
    stream = np.arange(8 * 10)
    sent = (np.arange(80) // 3) % 2 == 0
    rows, srows = ex.layout_rows(stream, sent, bsz_per_host=8, num_core_per_host=2, bi_data=True)
    assert rows.shape == (8, 20)
    fwd = stream.reshape(4, 20)
    # core 0: rows 0,1 forward (stream rows 0,1), rows 2,3 the same reversed; core 1: stream rows 2,3
    for core in range(2):
        for k in range(2):
            np.testing.assert_array_equal(rows[core * 4 + k], fwd[core * 2 + k])
            np.testing.assert_array_equal(rows[core * 4 + 2 + k], fwd[core * 2 + k][::-1])
    np.testing.assert_array_equal(srows[2], srows[0][::-1])
    s = ex.ExampleSettings(seq_len=8, reuse_len=4, bsz_per_host=8, num_core_per_host=2, num_predict=2)
    assert [ex.is_backward_row(r, s) for r in range(8)] == [False, False, True, True] * 2


def test_uni_layout():
    rows, _ = ex.layout_rows(np.arange(30), np.zeros(30, bool), 4, 1, False)
    np.testing.assert_array_equal(rows, np.arange(28).reshape(4, 7))


def test_example_structure(text_ids, is_start):
    s = ex.ExampleSettings(seq_len=64, reuse_len=32, bsz_per_host=2, num_core_per_host=1, bi_data=True,
                           num_predict=12)
    sent = np.zeros(len(text_ids), bool)
    sent[np.cumsum(np.random.default_rng(0).integers(3, 20, size=len(text_ids)))[:-1] % len(text_ids)] = True
    sent = np.cumsum(sent) % 2 == 1
    rows, srows = ex.layout_rows(text_ids, sent, 2, 1, True)
    bounds = [ex.sentence_boundaries(r) for r in srows]
    labels = []
    for b in range(20):
        batch = ex.make_host_batch(rows, bounds, b, s, is_start, np.random.default_rng(b))
        assert batch is not None
        for r, e in enumerate(batch):
            np.testing.assert_array_equal(e.input[:32], rows[r][b * 32:(b + 1) * 32])
            assert e.input[-1] == CLS_ID and e.input[-2] == SEP_ID
            sep_a = 32 + int((e.seg_id[32:] == 0).sum()) - 1
            assert e.input[sep_a] == SEP_ID
            assert e.seg_id[-1] == 2 and e.seg_id[-2] == 1 and (e.seg_id[:sep_a + 1] == 0).all()
            assert (e.seg_id[sep_a + 1:-1] == 1).all()
            assert e.is_masked.sum() == 12
            assert e.is_masked[:32].sum() == 6 and e.is_masked[32:].sum() == 6
            assert not e.is_masked[np.isin(e.input, [SEP_ID, CLS_ID])].any()
            labels.append(e.label)
    assert 0 < np.mean(labels) < 1


# ---------------------------------------------------------------------------------------------- settings

@pytest.mark.parametrize("kwargs,flag", [
    (dict(seq_len=64, reuse_len=32, num_predict=85), "--num_predict"),       # issue #217: the original hangs
    (dict(seq_len=512, reuse_len=256, num_predict=600), "--num_predict"),
    (dict(seq_len=64, reuse_len=61), "--reuse_len"),
    (dict(seq_len=64, reuse_len=0), "--reuse_len"),
    (dict(bsz_per_host=12, num_core_per_host=4, bi_data=True), "--bi_data"),
    (dict(bsz_per_host=10, num_core_per_host=4, bi_data=False), "--num_core_per_host"),
    (dict(mask_beta=0), "--mask_beta"),
])
def test_impossible_settings_refused(kwargs, flag):
    base = dict(seq_len=64, reuse_len=32, bsz_per_host=8, num_core_per_host=1, num_predict=10)
    base.update(kwargs)
    with pytest.raises(ValueError, match=flag):
        ex.ExampleSettings(**base).validate()


def test_generalised_reuse_len_is_allowed(text_ids, is_start):
    """reuse_len need not be seq_len/2 (the original asserted it): each part gets its own mask budget."""
    s = ex.ExampleSettings(seq_len=64, reuse_len=16, bsz_per_host=2, bi_data=False, num_predict=20)
    s.validate()
    sent = (np.arange(len(text_ids)) // 11) % 2 == 0
    rows, srows = ex.layout_rows(text_ids, sent, 2, 1, False)
    batch = ex.make_host_batch(rows, [ex.sentence_boundaries(r) for r in srows], 0, s, is_start,
                               np.random.default_rng(0))
    for e in batch:
        assert e.is_masked[:16].sum() == 10 and e.is_masked[16:].sum() == 10


def test_is_start_piece_rule():
    assert ex.is_start_piece("\u2581the") and ex.is_start_piece("<eod>") and ex.is_start_piece(",")
    assert not ex.is_start_piece("ing") and not ex.is_start_piece("s")
