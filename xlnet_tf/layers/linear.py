"""Row-by-weight products whose transposed operands go to the kernel that handles them best.

Every projection in XLNet is ``rows [R, K] . weight`` on 2-D rows. Its gradient products take a transposed operand
(``dy . W^T`` and ``x^T . dy``), as do the output projection ``attn . W_o^T`` and the LM head ``h . E^T``. On CPU,
TensorFlow's oneDNN ``MatMul`` runs those 10-20% below the same product as a ``BatchMatMulV2`` with a unit batch
(measured at bench-small's shapes with 2 threads: ``h . E^T``
[160, 512] x [32000, 512]^T 216 vs 264 GFLOP/s, ``dy . W^T`` [1024, 2048] x [512, 2048]^T 260 vs 295); without a
transposed operand the 2-D ``MatMul`` is the faster one (by about 5%). So ``matmul`` keeps a plain product on
``MatMul`` and sends every transposed one, forward or backward, to ``BatchMatMulV2``: the float32 training step
is 5% faster; in bfloat16 (AMX) the two kernels are within noise of each other. On GPU and TPU both are the same
GEMM. The values are those of ``tf.matmul`` up to summation order: only the kernel differs.
"""

from __future__ import annotations

import tensorflow as tf


def _product(a, b, transpose_a=False, transpose_b=False):
    """``op(a) . op(b)`` for 2-D a, b: ``MatMul`` when nothing is transposed, else a unit-batch ``BatchMatMulV2``."""
    if not (transpose_a or transpose_b):
        return tf.matmul(a, b)
    return tf.raw_ops.BatchMatMulV2(x=a[None], y=b[None], adj_x=transpose_a, adj_y=transpose_b)[0]


def matmul(rows, weight, transpose_weight: bool = False):
    """``rows . weight`` (``rows . weight^T`` with ``transpose_weight``): rows [R, K], weight [K, N] ([N, K])
    -> [R, N], the forward and both gradient products each on its faster kernel (module docstring)."""
    @tf.custom_gradient
    def product(rows, weight):
        def grad(dy):
            if transpose_weight:
                return _product(dy, weight), weight_gradient(dy, rows)
            return input_gradient(dy, weight), weight_gradient(rows, dy)
        return _product(rows, weight, transpose_b=transpose_weight), grad

    return product(rows, weight)


def input_gradient(dy, weight):
    """``dy . weight^T``: the input gradient of ``matmul(rows, weight)`` for dy [R, N], weight [K, N]."""
    return _product(dy, weight, transpose_b=True)


def weight_gradient(rows, dy):
    """``rows^T . dy``: the weight gradient of ``matmul(rows, weight)`` for rows [R, K], dy [R, N]."""
    return _product(rows, dy, transpose_a=True)

