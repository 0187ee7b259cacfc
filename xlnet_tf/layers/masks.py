"""Attention masks for the content and query streams, built once per forward pass.

Convention (the original's): ``True``/1 means *blocked*. Keys are ``[memory ; current segment]``; memory is
always visible. The query stream uses the combined mask; the content stream additionally always sees its own
position (the original's ``non_tgt_mask``). Masks become additive float32 biases of ``-1e30``: the scores are
upcast to float32 before the softmax, so the same constant is safe under float16 and bfloat16 policies, and a
fully blocked row gives the original's uniform distribution (score - 1e30 == -1e30 in float32).
"""

from __future__ import annotations

import tensorflow as tf

MASK_VALUE = -1e30


def large_negative(dtype) -> float:
    """The most negative safe additive mask value for ``dtype`` (what the original's 1e30 overflows in fp16)."""
    dtype = tf.as_dtype(dtype)
    return -65500.0 if dtype == tf.float16 else MASK_VALUE


def causal_mask(qlen, mlen, same_length: bool = False):
    """Transformer-XL causal mask [qlen, mlen + qlen] (bool, True = blocked), as the original ``_create_mask``.

    Query ``i`` sees all memory and current keys ``<= i``; with ``same_length`` it also loses the keys before
    ``i`` among the first ``qlen`` key columns, so every query attends to exactly ``mlen + 1`` keys.
    """
    rows = tf.range(qlen)[:, None]
    cols = tf.range(qlen)[None, :]
    future = cols > rows
    blocked = tf.concat([tf.zeros([qlen, mlen], tf.bool), future], axis=1)
    if same_length:
        first = tf.concat([blocked[:, :qlen] | (cols < rows), blocked[:, qlen:]], axis=1)
        blocked = first
    return blocked


def key_blocked(perm_mask, mlen, padding_mask=None):
    """bool [B, Q, mlen + K]: ``perm_mask`` [B, Q, K] (1 = may not attend) over ``[memory ; keys]``, the memory
    visible and the padding keys (``padding_mask`` [B, L], 0 = padding, for the first L <= K keys) blocked."""
    blocked = tf.cast(perm_mask, tf.float32) > 0
    shape = tf.shape(blocked)
    if padding_mask is not None:
        padding = tf.logical_not(tf.cast(padding_mask, tf.bool))
        padding = tf.pad(padding, [[0, 0], [0, shape[2] - tf.shape(padding)[1]]])  # later keys: not padding
        blocked |= padding[:, None, :]
    return tf.concat([tf.zeros([shape[0], shape[1], mlen], tf.bool), blocked], axis=2)


def stream_masks(qlen, mlen, padding_mask=None, perm_mask=None, attn_type: str = "bi",
                 same_length: bool = False):
    """Blocked-key masks of the two streams, ``(query_blocked, content_blocked)``, each bool [B|1, qlen, klen].

    Args:
      padding_mask: [B, qlen], 1 = real token, 0 = padding (padding keys are blocked), or None.
      perm_mask: [B, qlen, qlen], 1 = query i may not attend to key j, or None.
    Returns (None, None) when nothing is masked (bidirectional attention without padding or permutation).
    """
    blocked = None
    if attn_type == "uni":
        blocked = causal_mask(qlen, mlen, same_length)[None]
    data = None
    if padding_mask is not None:
        data = tf.logical_not(tf.cast(padding_mask, tf.bool))[:, None, :]
    if perm_mask is not None:
        perm = tf.cast(perm_mask, tf.float32) > 0
        data = perm if data is None else (data | perm)
    if data is not None:
        batch = tf.shape(data)[0]
        data = tf.concat([tf.zeros([batch, tf.shape(data)[1], mlen], tf.bool), data], axis=2)
        data = tf.broadcast_to(data, [batch, qlen, mlen + qlen])
        blocked = data if blocked is None else (blocked | data)
    if blocked is None:
        return None, None
    own_position = tf.concat([tf.zeros([qlen, mlen], tf.bool), tf.eye(qlen, dtype=tf.bool)], axis=1)
    content_blocked = blocked & tf.logical_not(own_position)[None]
    return blocked, content_blocked


def memory_padding_blocked(blocked, mems_padding_mask, qlen):
    """``blocked`` [B|1, Q, M + qlen] (or None: nothing blocked) with the padding rows of the memory blocked too:
    ``mems_padding_mask`` [B, M], 1 = real token. -> bool [B, Q, M + qlen]."""
    padding = tf.logical_not(tf.cast(mems_padding_mask, tf.bool))
    padding = tf.pad(padding, [[0, 0], [0, qlen]])[:, None, :]  # the current segment's keys: not memory padding
    if blocked is None:
        return tf.broadcast_to(padding, [tf.shape(padding)[0], qlen, tf.shape(padding)[2]])
    return blocked | padding


def mask_bias(blocked):
    """bool [B, Q, K] -> additive float32 bias [B, Q, K] (broadcast over the leading head axis of the
    head-major [N, B, Q, K] scores), or None."""
    if blocked is None:
        return None
    return tf.where(blocked, tf.constant(MASK_VALUE, tf.float32), tf.constant(0.0, tf.float32))
