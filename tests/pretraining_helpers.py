"""Shared by the pretraining tests (loop, PLM/PMLM training, new objectives, the multi-worker workers): a tiny config,
synthetic examples in the reader's layout, a dataset_fn positioned as the reader positions its pipeline, and the
TensorBoard scalars of a run."""

import contextlib
import logging
import os

import numpy as np
import tensorflow as tf

from training_state import assert_same_state, model_state
from xlnet_tf import XLNetConfig

SEQ, REUSE, PREDICT, VOCAB = 16, 8, 4, 50
CONFIG = XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB, mem_len=8,
                     reuse_len=REUSE, dropout=0.0, dropatt=0.0)


def synthetic_examples(n, seed=0):
    """n examples with a random factorization order per example (targets = last PREDICT in the order)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, VOCAB, (n, SEQ)).astype(np.int32)
    seg = np.zeros((n, SEQ), np.int32)
    perm = np.zeros((n, SEQ, SEQ), np.float32)
    tm = np.zeros((n, PREDICT, SEQ), np.float32)
    for e in range(n):
        order = rng.permutation(SEQ)
        rank = np.argsort(order)
        targets = order[-PREDICT:]
        is_target = np.zeros(SEQ, bool)
        is_target[targets] = True
        perm[e] = (is_target[None, :] & ((rank[:, None] <= rank[None, :]) | ~is_target[:, None])).astype(np.float32)
        tm[e, np.arange(PREDICT), np.sort(targets)] = 1
    target = np.einsum("epl,el->ep", tm, ids).astype(np.int32)
    return dict(input_ids=ids, segment_ids=seg, perm_mask=perm, target_mapping=tm, target=target,
                target_mask=np.ones((n, PREDICT), np.float32))


def make_dataset_fn(examples, per_replica_batch, accum=1):
    """As the pretraining reader positions its pipeline: each input pipeline (one per worker) reads its own shard
    and a step takes a batch for each of that pipeline's replicas, so a resumed run skips that many per step."""
    def dataset_fn(ctx, start_step):
        records_per_step = per_replica_batch * (ctx.num_replicas_in_sync // ctx.num_input_pipelines) * accum
        ds = tf.data.Dataset.from_tensor_slices(examples).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().skip(start_step * records_per_step).batch(per_replica_batch, drop_remainder=True)
    return dataset_fn


def assert_same_weights(a, b, round_off):
    """Keras models ``a`` and ``b`` hold the same weights, to ``round_off`` of each weight's scale (0: equal)."""
    assert_same_state(model_state(a), model_state(b), round_off)


def scalars(model_dir):
    """TensorBoard scalars of a run: {tag: [(step, value)]}."""
    out = {}
    for path in tf.io.gfile.glob(os.path.join(model_dir, "train", "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return {tag: sorted(values) for tag, values in out.items()}


@contextlib.contextmanager
def absl_messages():
    """The messages absl logs meanwhile (INFO and up), read from absl's logger itself: pytest's caplog sees them
    only while they propagate to the root logger, which depends on what earlier tests set up."""
    messages = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("absl")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
