"""The shape settings a pretraining batch is built for: what the reader hands an objective (no TensorFlow here)."""

from typing import NamedTuple


class BatchShape(NamedTuple):
    """The pretraining shape settings a batch is built for (``run_pretrain.py``'s flags of the same names)."""

    seq_len: int
    reuse_len: int
    perm_size: int
    num_predict: int
