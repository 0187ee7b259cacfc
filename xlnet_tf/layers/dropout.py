"""Keras dropout with XLNet's hashed mask (``xlnet_tf.kernels.dropout_mask``)."""

from __future__ import annotations

import keras

from xlnet_tf.kernels import dropout_mask


@keras.saving.register_keras_serializable(package="xlnet_tf")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` (same seed generator, a fresh seed per call, same config) with the mask of
    ``dropout_mask``, which the C++ kernels can reproduce from the seed alone. ``noise_shape`` is not supported."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("xlnet_tf's Dropout does not support noise_shape")
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        return dropout_mask.dropout(inputs, self.rate, self.call_seed(training))

    def call_seed(self, training=False):
        """This call's seed (int [2]) when dropout is on, for a function that applies the mask itself; else
        None (and no seed is drawn)."""
        return self.seed_generator.next() if training and self.rate > 0 else None


def seed_states(model) -> list:
    """The seed-generator states of ``model``'s layers (its dropout layers'; none at rate 0): what a training
    checkpoint must hold (beside weights, optimizer and step) for a resumed run to draw the masks an uninterrupted
    run would have drawn.

    Keras' public ``variables`` are ``weights`` plus the seed generators' states. Order: per layer of
    ``model.layers``, its states in reverse of ``variables``' order, which is the order checkpoints were written
    in so far (Keras' private ``_flatten_layers`` walk, sublayers last-first; the same while seed generators sit
    in leaf layers, as dropout's do), so they restore each state into its own layer.
    """
    weights = {id(v) for v in model.weights}
    seen, states = set(), []
    for layer in model.layers:
        own = [v for v in layer.variables if id(v) not in weights and id(v) not in seen]
        seen.update(id(v) for v in own)
        states += reversed(own)
    return states
