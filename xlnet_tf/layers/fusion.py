"""Element-wise fusion on CPU without giving up oneDNN matmuls.

TensorFlow's graph executor runs every element-wise op as its own kernel (a full pass over memory each), which
dominates an XLNet step on CPU once the matmuls run on oneDNN/AMX. Whole-step XLA fuses them, but XLA's CPU dots
are slower than oneDNN's (and don't use AMX for bfloat16). ``fusable(fn)`` compiles only the element-wise
stretches between matmuls (score shift + mask + softmax + dropout, bias + GELU + dropout, dropout + residual +
LayerNorm) as small XLA clusters, forward and backward, while the matmuls stay ordinary oneDNN ops.

It applies only while a ``tf.function`` is being traced (eager calls run the plain ops, so eager results and the
parity tests see the same math), and ``XLNET_TF_FUSE=0`` turns it off.
"""

from __future__ import annotations

import functools
import os

import tensorflow as tf


def fusion_enabled() -> bool:
    return os.environ.get("XLNET_TF_FUSE", "1") != "0"


def fusable(fn):
    """``fn`` (element-wise ops only, Python values as keyword args) as one XLA cluster inside traced functions."""
    compiled = tf.function(fn, jit_compile=True, autograph=False)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if fusion_enabled() and tf.inside_function():
            return compiled(*args, **kwargs)
        return fn(*args, **kwargs)

    return call
