"""Pure-numpy construction of XLNet pretraining examples from a token stream (no TensorFlow here).

This is the part of the original ``data_utils.py`` writer that decides *what* goes in a record:

* ``layout_rows``: the token stream cut into ``bsz_per_host`` parallel rows (with ``bi_data`` every core's rows
  are ``[forward rows ; the same rows reversed]``), exactly as ``batchify`` + ``create_tfrecords``.
* ``split_a_and_b``: the A/B segments after the reused part, with the 50% random-B rule.
* ``sample_mask``: span-based prediction targets (spans of up to 5 words, p ~ 1/n, ``mask_alpha``/``mask_beta``
  context), topped up to an exact count.
* ``make_host_batch``: one host batch (``bsz_per_host`` examples at one column offset), all-or-nothing.

Randomness comes from a ``numpy.random.Generator`` seeded per host batch by the caller, so a batch's content does
not depend on which process writes it or on how the output is sharded: that is what makes parallel writing and
resuming a killed run produce byte-identical shards.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Optional

import numpy as np
from absl import logging

from xlnet_tf.errors import InputError
from xlnet_tf.tokenization import CLS_ID, SEP_ID, SPIECE_UNDERLINE

# More targets than this fraction of the sequence is legal, but rarely what a user meant: warned about.
MAX_TARGET_FRACTION = 1 / 3

MAX_GRAM = 5
# The original's `_is_start_piece` punctuation set (string.punctuation with a duplicated quote).
_START_PUNCT = frozenset('!"#$%&\'()*+,-./:;?@[\\]^_`{|}~')


def is_start_piece(piece: str) -> bool:
    """A piece begins a word: it starts with '▁', is a special symbol ('<...>'), or is a punctuation piece."""
    return piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<") or piece in _START_PUNCT


def start_piece_table(tokenizer) -> np.ndarray:
    """bool [vocab]: ``is_start_piece`` for every id, so masks are sampled without per-token string calls."""
    return np.array([is_start_piece(tokenizer.id_to_piece(i)) for i in range(tokenizer.vocab_size)], dtype=bool)


@dataclasses.dataclass(frozen=True)
class ExampleSettings:
    """The writer settings that shape records (all of them go into the manifest)."""

    seq_len: int = 512
    reuse_len: int = 256
    bsz_per_host: int = 32
    num_core_per_host: int = 1
    bi_data: bool = True
    mask_alpha: int = 6
    mask_beta: int = 1
    num_predict: int = 85
    original_span_bug: bool = False

    @property
    def tot_len(self) -> int:
        """Length of A + B: the non-reused part minus <sep>, <sep>, <cls>."""
        return self.seq_len - self.reuse_len - 3

    @property
    def num_predict_reuse(self) -> int:
        # The original splits the budget this way: the larger half goes to the reused part.
        return self.num_predict - self.num_predict // 2

    @property
    def num_predict_new(self) -> int:
        return self.num_predict // 2

    def errors(self) -> list:
        """Why these settings cannot produce examples (instead of hanging), each naming the flag."""
        errors = []
        if self.seq_len < 8:
            errors.append(f"--seq_len={self.seq_len} must be at least 8")
        if not 0 < self.reuse_len < self.seq_len - 3:
            errors.append(f"--reuse_len={self.reuse_len} must be in [1, seq_len-4={self.seq_len - 4}]: the "
                          "non-reused part holds A <sep> B <sep> <cls> with at least one token of text")
        if self.bsz_per_host <= 0 or self.num_core_per_host <= 0:
            errors.append(f"--bsz_per_host={self.bsz_per_host} and --num_core_per_host={self.num_core_per_host} "
                          "must be positive")
        elif self.bsz_per_host % self.num_core_per_host:
            errors.append(f"--bsz_per_host={self.bsz_per_host} must be divisible by "
                          f"--num_core_per_host={self.num_core_per_host}")
        elif self.bi_data and self.bsz_per_host % (2 * self.num_core_per_host):
            errors.append(f"--bi_data needs --bsz_per_host={self.bsz_per_host} divisible by 2*num_core_per_host="
                          f"{2 * self.num_core_per_host} (every core gets forward and backward rows)")
        if self.mask_alpha <= 0 or self.mask_beta <= 0:
            errors.append(f"--mask_alpha={self.mask_alpha} and --mask_beta={self.mask_beta} must be positive")
        if self.num_predict <= 0:
            errors.append(f"--num_predict={self.num_predict} must be positive")
        elif not errors:
            # The original's top-up loop never ends when a part has fewer free positions than its budget
            # (issue #217). Each part must have room for its share; <sep>/<cls> are never targets.
            if self.num_predict_reuse > self.reuse_len:
                errors.append(f"--num_predict={self.num_predict}: the reused part gets "
                              f"{self.num_predict_reuse} targets but holds only --reuse_len={self.reuse_len} "
                              "tokens")
            if self.num_predict_new > self.tot_len:
                errors.append(f"--num_predict={self.num_predict}: the new part gets {self.num_predict_new} "
                              f"targets but holds only seq_len-reuse_len-3={self.tot_len} text tokens")
        return errors

    def validate(self) -> None:
        """Raises an InputError (a ValueError) listing ``errors()``; warns about a surprising ``num_predict``."""
        errors = self.errors()
        if errors:
            raise InputError("impossible data settings:\n  " + "\n  ".join(errors))
        if self.num_predict > self.seq_len * MAX_TARGET_FRACTION:
            logging.warning("--num_predict=%d makes %.0f%% of the %d tokens prediction targets (the original "
                            "predicts 85 of 512, 17%%): most of the context the targets are predicted from is gone",
                            self.num_predict, 100 * self.num_predict / self.seq_len, self.seq_len)


# ----------------------------------------------------------------------------------------------------------
# Stream layout
# ----------------------------------------------------------------------------------------------------------

def layout_rows(tokens: np.ndarray, sent_ids: np.ndarray, bsz_per_host: int, num_core_per_host: int,
                bi_data: bool) -> tuple[np.ndarray, np.ndarray]:
    """Cuts the stream into ``bsz_per_host`` rows read in parallel; returns (tokens, sent_ids) [bsz, steps].

    Row r of every host batch continues row r of the previous one, so a replica's memory (mems) always holds
    the text that precedes its current segment. With ``bi_data`` the stream is cut into ``bsz_per_host/2``
    forward rows; core c gets ``bsz_core/2`` forward rows followed by the same rows reversed.
    """
    num_rows = bsz_per_host // 2 if bi_data else bsz_per_host
    steps = len(tokens) // num_rows
    tok = np.asarray(tokens[:num_rows * steps]).reshape(num_rows, steps)
    sid = np.asarray(sent_ids[:num_rows * steps]).reshape(num_rows, steps)
    if not bi_data:
        return tok, sid
    half = bsz_per_host // num_core_per_host // 2
    tok = tok.reshape(num_core_per_host, 1, half, steps)
    sid = sid.reshape(num_core_per_host, 1, half, steps)
    tok = np.concatenate([tok, tok[..., ::-1]], axis=1).reshape(bsz_per_host, steps)
    sid = np.concatenate([sid, sid[..., ::-1]], axis=1).reshape(bsz_per_host, steps)
    return tok, sid


def is_backward_row(row: int, settings: ExampleSettings) -> bool:
    """True for the reversed rows of a ``bi_data`` host batch: the second half of every core's rows."""
    if not settings.bi_data:
        return False
    half = settings.bsz_per_host // settings.num_core_per_host // 2
    return (row // half) % 2 == 1


def num_host_batches(row_len: int, settings: ExampleSettings) -> int:
    """Number of column offsets 0, reuse_len, 2*reuse_len, ... with a full ``seq_len`` window in a row."""
    if row_len < settings.seq_len:
        return 0
    return (row_len - settings.seq_len) // settings.reuse_len + 1


def sentence_boundaries(sent_ids: np.ndarray) -> np.ndarray:
    """Sorted positions k where a new sentence starts (``sent_ids[k] != sent_ids[k-1]``)."""
    sent_ids = np.asarray(sent_ids)
    return np.flatnonzero(sent_ids[1:] != sent_ids[:-1]) + 1


# ----------------------------------------------------------------------------------------------------------
# A/B segments
# ----------------------------------------------------------------------------------------------------------

def trim_a_and_b(a_len: int, b_len: int, tot_len: int) -> tuple[int, int]:
    """The original's trimming loop in closed form: drop tokens from the right of the longer segment (B on ties)
    one at a time until ``a_len + b_len <= tot_len``."""
    excess = a_len + b_len - tot_len
    if excess <= 0:
        return a_len, b_len
    if a_len > b_len:
        d = min(excess, a_len - b_len)
        a_len -= d
    else:
        d = min(excess, b_len - a_len)
        b_len -= d
    excess -= d
    # Now equal lengths: the loop alternates B, A, B, ...
    return a_len - excess // 2, b_len - (excess + 1) // 2


def split_a_and_b(data: np.ndarray, boundaries: np.ndarray, begin: int, tot_len: int,
                  rng: np.random.Generator) -> Optional[tuple[np.ndarray, np.ndarray, int]]:
    """A and B for the part after the reused tokens, as the original ``_split_a_and_b``; None if impossible.

    A starts at ``begin`` and ends at a sentence boundary. With probability 1/2 (or when A has no boundary to
    end at) B is a random span elsewhere in the row, widened to sentence boundaries (``label=0``); otherwise B is
    A's true continuation (``label=1``). The label is stored but XLNet has no next-sentence loss. Returns
    ``(a, b, label)`` with ``len(a) + len(b) == tot_len``.
    """
    data_len = len(data)
    if begin + tot_len >= data_len:
        return None
    # Sentence starts after `begin`: those closer than tot_len are candidate A ends (cut points); the first one
    # at least tot_len away (or the row's end) ends the true continuation.
    lo = np.searchsorted(boundaries, begin + 1)
    hi = np.searchsorted(boundaries, begin + tot_len)
    cut_points = boundaries[lo:hi]
    end_idx = int(boundaries[hi]) if hi < len(boundaries) else data_len

    a_begin = begin
    if len(cut_points) == 0 or rng.random() < 0.5:
        label = 0
        a_end = end_idx if len(cut_points) == 0 else int(rng.choice(cut_points))
        b_len = max(1, tot_len - (a_end - a_begin))
        b_begin = int(rng.integers(0, data_len - b_len))  # the original's randint(0, data_len - 1 - b_len)
        b_end = b_begin + b_len
        # Widen B to whole sentences: back to the sentence start, forward to the next sentence start (but never
        # to the last token, as the original).
        k = np.searchsorted(boundaries, b_begin, side="right")
        b_begin = int(boundaries[k - 1]) if k > 0 else 0
        k = np.searchsorted(boundaries, b_end, side="left")
        b_end = min(int(boundaries[k]) if k < len(boundaries) else data_len, data_len - 1)
    else:
        label = 1
        a_end = int(rng.choice(cut_points))
        b_begin, b_end = a_end, end_idx
    a_len, b_len = trim_a_and_b(a_end - a_begin, b_end - b_begin, tot_len)
    return data[a_begin:a_begin + a_len], data[b_begin:b_begin + b_len], label


# ----------------------------------------------------------------------------------------------------------
# Span masks
# ----------------------------------------------------------------------------------------------------------

# P(n) ~ 1/n for n = 1..5, as a cumulative table for bisect.
_NGRAM_CDF_LIST = (np.cumsum(1.0 / np.arange(1, MAX_GRAM + 1)) / np.sum(1.0 / np.arange(1, MAX_GRAM + 1))).tolist()


def sample_spans(seg: np.ndarray, is_start: np.ndarray, goal: int, rng: np.random.Generator, mask_alpha: int,
                 mask_beta: int, original_span_bug: bool = False) -> list[tuple[int, int]]:
    """Prediction spans ``[beg, end)`` over ``seg`` (in reading order), at most ``goal`` tokens in all.

    As the paper: repeatedly draw a span length n in 1..5 words with p ~ 1/n and a context of
    ``n * mask_alpha // mask_beta`` tokens (so about beta of every alpha tokens are predicted); the span starts at
    the first word start after a random left part of the context, covers n whole words, and the rest of the
    context follows it. Word starts are ``is_start`` pieces ('▁...', '<...>', punctuation), as the original.

    ``original_span_bug``: the original tested ``seg[beg]`` instead of ``seg[end]`` when counting words, so its
    spans are n *pieces* (starting at a word start) rather than n words; this flag reproduces it.

    Differences from the original, needed for an exact target count: a span never covers <sep>/<cls> (it stops
    before one), and n words that would exceed the remaining budget are cut to the whole words that fit (the
    original could not overshoot because it counted pieces).
    """
    seg = np.asarray(seg)
    seg_len = len(seg)
    starts = is_start[seg]
    eligible = (seg != SEP_ID) & (seg != CLS_ID)
    # Python lists + bisect: this loop runs ~40 times per example, where numpy's per-call overhead dominates.
    start_pos = np.flatnonzero(starts).tolist()             # word starts (special symbols count as words)
    begin_pos = np.flatnonzero(starts & eligible).tolist()  # where a span may begin
    func_pos = np.flatnonzero(~eligible).tolist()
    spans = []
    num_predict = cur = 0
    uniforms: list[float] = []
    while cur < seg_len and num_predict < goal:
        remaining = goal - num_predict
        if not uniforms:
            uniforms = rng.random(64).tolist()  # drawn in blocks: one Generator call per ~30 spans
        u_len, u_ctx = uniforms.pop(), uniforms.pop()
        n = min(bisect.bisect_right(_NGRAM_CDF_LIST, u_len) + 1, MAX_GRAM, remaining)
        ctx_size = (n * mask_alpha) // mask_beta
        l_ctx = int(u_ctx * ctx_size)  # uniform in [0, ctx_size)
        r_ctx = ctx_size - l_ctx
        k = bisect.bisect_left(begin_pos, cur + l_ctx)
        if k >= len(begin_pos):
            break
        beg = begin_pos[k]
        if original_span_bug:
            end = beg + n  # n pieces
        else:
            j = bisect.bisect_right(start_pos, beg) + n - 1  # the start of the (n+1)-th word
            end = start_pos[j] if j < len(start_pos) else seg_len
        if end >= seg_len:  # the original drops a span that reaches the end of the segment
            break
        f = bisect.bisect_left(func_pos, beg)
        if f < len(func_pos) and func_pos[f] < end:
            end = func_pos[f]
        if end - beg > remaining:
            # Keep the whole words that fit; stop if not even one does (the top-up fills the rest).
            hi = bisect.bisect_right(start_pos, beg + remaining)
            if start_pos[hi - 1] <= beg:
                break
            end = start_pos[hi - 1]
        spans.append((beg, end))
        num_predict += end - beg  # spans never overlap: the next one starts after this one's right context
        cur = end + r_ctx
    return spans


def sample_mask(seg: np.ndarray, is_start: np.ndarray, goal: int, rng: np.random.Generator,
                mask_alpha: int, mask_beta: int, reverse: bool = False,
                original_span_bug: bool = False) -> np.ndarray:
    """bool mask over ``seg`` with exactly ``goal`` targets, never on <sep>/<cls>: ``sample_spans``, then random
    single tokens to top up (as the original). Backward rows (``reverse``) are sampled in reading order (the
    flipped segment), so that spans cover whole words there too."""
    seg = np.asarray(seg)
    if reverse:
        seg = seg[::-1]
    eligible = (seg != SEP_ID) & (seg != CLS_ID)
    if int(eligible.sum()) < goal:
        raise ValueError(f"cannot place {goal} targets in a segment with {int(eligible.sum())} text tokens")
    mask = np.zeros(len(seg), dtype=bool)
    for beg, end in sample_spans(seg, is_start, goal, rng, mask_alpha, mask_beta, original_span_bug):
        mask[beg:end] = True
    remaining = goal - int(mask.sum())
    if remaining > 0:
        free = np.flatnonzero(eligible & ~mask)
        mask[rng.choice(free, size=remaining, replace=False)] = True
    return mask[::-1].copy() if reverse else mask


# ----------------------------------------------------------------------------------------------------------
# Host batches
# ----------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Example:
    input: np.ndarray      # int [seq_len]: reused tokens, A, <sep>, B, <sep>, <cls>
    is_masked: np.ndarray  # bool [seq_len]: prediction targets (exactly num_predict)
    seg_id: np.ndarray     # int [seq_len]: 0 reused+A+<sep>, 1 B+<sep>, 2 <cls>
    label: int             # 1 if B continues A (stored as in the original, unused by the loss)


def make_example(row: np.ndarray, boundaries: np.ndarray, offset: int, backward: bool, settings: ExampleSettings,
                 is_start: np.ndarray, rng: np.random.Generator) -> Optional[Example]:
    """The example of one row at column ``offset``; None if A/B cannot be formed there."""
    s = settings
    reused = row[offset:offset + s.reuse_len]
    split = split_a_and_b(row, boundaries, offset + s.reuse_len, s.tot_len, rng)
    if split is None:
        return None
    a, b, label = split
    sep, cls = np.array([SEP_ID], row.dtype), np.array([CLS_ID], row.dtype)
    new_part = np.concatenate([a, sep, b, sep, cls])
    mask_0 = sample_mask(reused, is_start, s.num_predict_reuse, rng, s.mask_alpha, s.mask_beta, backward,
                         s.original_span_bug)
    mask_1 = sample_mask(new_part, is_start, s.num_predict_new, rng, s.mask_alpha, s.mask_beta, backward,
                         s.original_span_bug)
    seg_id = np.array([0] * (s.reuse_len + len(a)) + [0] + [1] * len(b) + [1] + [2], dtype=np.int64)
    inp = np.concatenate([reused, new_part])
    assert len(inp) == s.seq_len and len(seg_id) == s.seq_len, (len(inp), len(seg_id))
    return Example(inp, np.concatenate([mask_0, mask_1]), seg_id, label)


def make_host_batch(rows: np.ndarray, boundaries: list[np.ndarray], batch_index: int, settings: ExampleSettings,
                    is_start: np.ndarray, rng: np.random.Generator) -> Optional[list[Example]]:
    """The ``bsz_per_host`` examples at column ``batch_index * reuse_len``; None unless every row succeeds (a
    partial host batch would shift every later row onto another replica and break the memory stream)."""
    offset = batch_index * settings.reuse_len
    out = []
    for r in range(settings.bsz_per_host):
        ex = make_example(rows[r], boundaries[r], offset, is_backward_row(r, settings), settings, is_start, rng)
        if ex is None:
            return None
        out.append(ex)
    return out
