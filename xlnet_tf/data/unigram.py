"""The pretraining data's unigram distribution, which the LM bias of a from-scratch run starts from.

Why: the LM head is tied to the word embedding, ``logits = h . E^T + lm_bias``, and the bias used to start at
zero. Adam moves a weight by at most about ``learning_rate`` per step, so in a short or small run (the demo: 600
steps at 1e-3) the bias cannot reach the ~10-nat spread of the log frequencies, and the loss falls from ln(V) to
the unigram entropy through the embeddings instead: every row of a rarely predicted token gets the same
systematic push down, ``p(w) * h`` along the mean query state, which Adam turns into full-size steps. The rows of
rare tokens collapse onto that one direction (mean pairwise cosine 0.67-0.77 after 600-4000 steps of the tiny
model, against 0.0 at initialisation) and ``<cls>``/``<sep>``, never targets, grow to 3-4x the norm of the other
rows (measurements in ``bench/reports/pretraining_pays.md``). Starting the bias at the data's log unigram
frequencies puts the loss at the unigram entropy from step 0, where the expected gradient of a rare row is zero: no
shared drift, and the embeddings are left to what the context tells.
"""

from __future__ import annotations

import math

import numpy as np

from xlnet_tf.errors import InputError

# Enough text for a unigram estimate of any vocabulary: larger corpora are sampled evenly across their shards.
MAX_TOKENS = 20_000_000


def token_counts(data_dir: str, vocab_size: int, split: str = "train", max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """int64 [vocab_size]: how often each id occurs in the ``input`` of the records in ``data_dir`` (all of them,
    or an even sample of every shard's first records when there are more than ``max_tokens`` tokens). Every token
    of the text is counted about twice (a record's reused part is the previous record's new part): the
    distribution is what matters."""
    import tensorflow as tf

    from xlnet_tf.data.manifest import load_manifest

    manifest = load_manifest(data_dir, split)
    seq_len = manifest["params"]["seq_len"]
    shards = [s for s in manifest["shards"] if s["num_records"] > 0]
    total = sum(s["num_records"] for s in shards) * seq_len
    fraction = min(1.0, max_tokens / max(total, 1))
    spec = {"input": tf.io.FixedLenFeature([seq_len], tf.int64)}
    counts = np.zeros(vocab_size, np.int64)
    for shard in shards:
        take = max(1, math.ceil(shard["num_records"] * fraction))
        records = tf.data.TFRecordDataset(shard["path"]).take(take).batch(4096)
        for batch in records.map(lambda r: tf.io.parse_example(r, spec)["input"]):
            ids = batch.numpy().reshape(-1)
            if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                raise InputError(f"{shard['path']}: token id outside the vocabulary of {vocab_size}")
            counts += np.bincount(ids, minlength=vocab_size)
    return counts


def log_unigram(counts: np.ndarray, smoothing: float = 0.5) -> np.ndarray:
    """float32 log probabilities of the add-``smoothing`` unigram distribution of ``counts``."""
    counts = np.asarray(counts, np.float64) + smoothing
    return np.log(counts / counts.sum()).astype(np.float32)


def initialise_lm_bias(model, data_dir: str, split: str = "train") -> np.ndarray:
    """Sets ``model.lm_bias`` (an ``XLNetPretrainer``'s) to the log unigram frequencies of the data; returns them."""
    bias = log_unigram(token_counts(data_dir, int(model.lm_bias.shape[0]), split))
    model.lm_bias.assign(bias)
    return bias
