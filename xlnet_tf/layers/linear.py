"""The projection every XLNet weight applies: rows [R, K] times a weight."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf import kernels
from xlnet_tf.kernels import fast


@kernels.fast_path(fast=fast.matmul)
def matmul(rows, weight, transpose_weight: bool = False):
    """``rows . weight`` (``rows . weight^T`` with ``transpose_weight``): rows [R, K], weight [K, N] ([N, K])
    -> [R, N]."""
    return tf.matmul(rows, weight, transpose_b=transpose_weight)
