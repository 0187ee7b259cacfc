"""Shared by the SQuAD tests: a small config and a batch in the head's layout (paragraph, question, CLS, padding)."""

import numpy as np

from xlnet_tf.config import XLNetConfig

SMALL = XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=8000, dropout=0.0, dropatt=0.0)


def inference_batch(seq=24, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    p_mask = np.ones((batch, seq), np.float32)
    p_mask[:, :12] = 0
    p_mask[:, 20] = 0
    padding = np.ones((batch, seq), np.float32)
    padding[:, 21:] = 0
    return dict(input_ids=rng.integers(9, 8000, (batch, seq)).astype(np.int32),
                segment_ids=np.array([[0] * 13 + [1] * 7 + [2] + [3] * 3] * batch, np.int32),
                padding_mask=padding, p_mask=p_mask, cls_index=np.full([batch], 20, np.int32))
