"""The feed-forward activations of XLNet, by the config's ``ff_activation`` name."""

from __future__ import annotations

import math

import tensorflow as tf


def gelu(x):
    """The original's tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    # 0.5 (1 + tanh(z)) == sigmoid(2 z): four element-wise ops (and a fused SigmoidGrad) instead of eight.
    c = 2.0 * math.sqrt(2.0 / math.pi)
    return x * tf.sigmoid(x * (c + (c * 0.044715) * tf.square(x)))


def gelu_exact(x):
    """The erf GELU, ``x Phi(x)``: HuggingFace's "gelu", which its XLNet checkpoints were fine-tuned with."""
    return tf.nn.gelu(x, approximate=False)


ACTIVATIONS = {"gelu": gelu, "gelu_exact": gelu_exact, "relu": tf.nn.relu}
