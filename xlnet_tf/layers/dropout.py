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
    """The seed-generator state of every dropout layer in ``model``, in layer order: what a training checkpoint
    must hold (beside weights, optimizer and step) for a resumed run to draw the masks an uninterrupted run
    would have drawn."""
    return [layer.seed_generator.state for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.Dropout) and hasattr(layer, "seed_generator")]  # none at rate 0
