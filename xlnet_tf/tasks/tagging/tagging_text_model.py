"""The tagging family's Keras model on raw text: ``XLNetTextTagger`` (``xlnet_tf.XLNetTextTagger``), built on the
text models' base (``xlnet_tf.tasks.text_models``)."""

from __future__ import annotations

import contextlib
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf.checkpoint import load_task_weights
from xlnet_tf.hf import HFCheckpoint
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.tagging.tagging_head import XLNetTagger  # registered for Keras: a saved text tagger holds one
from xlnet_tf.tasks.text_data import array_dataset, as_strings, element_x, is_encoded, streamed_dataset
from xlnet_tf.tasks.text_models import TextTaskModel, build_parts, checkpoint_source


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextTagger(TextTaskModel):
    """Token classification on raw strings or pre-split words: the windows of ``tagging_graph`` + ``XLNetTagger``.

    Inputs of ``fit``/``evaluate``/``predict``: sentences as strings [B] (split into words on whitespace) or as
    lists of words (joined with spaces, so words must not contain whitespace); ``y``: per sentence its tags, a
    list of tag strings (one per word) or one space-separated string. A ``tf.data.Dataset`` yields batches of
    ``(sentences, tags)``, both [B] strings. Each batch of sentences becomes its W windows in the pipeline (the
    layout ``run_tagger.py`` trains on): ``fit`` labels every word's first piece in every window, ``evaluate``
    each word once (the window where it has the most context), as sample weights of the window positions: compile
    with ``SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")`` (the mean over
    the labelled pieces, as run_tagger.py) and ``weighted_metrics=["accuracy"]`` (word accuracy). ``call`` takes
    windows' token ids [W, S] and returns logits [W, S, num_tags].

    ``predict`` returns, per sentence, what the raw-text export does (numpy, padded [B, N] plus ``num_words``):
    ``words``, ``tags``, ``tag_ids``, ``scores``, ``start_char``/``end_char`` (into the text; for pre-split words
    into the words joined by spaces) and, for BIO tags, the entity spans (docs/tagging.md).
    """

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, labels=(), window_stride: int = 0,
                 tag_scheme: str = "auto", **kwargs):
        super().__init__(preprocessor, network, **kwargs)
        from xlnet_tf.tasks.tagging.tagging_data import detect_scheme

        self.labels = [str(t) for t in labels]
        if len(self.labels) != network.num_labels:
            raise ValueError(f"labels: {len(self.labels)} tags for a head of {network.num_labels}")
        self.window_stride = window_stride or max((preprocessor.seq_length - 2) // 2, 1)
        if not 0 < self.window_stride <= preprocessor.seq_length - 2:
            raise ValueError(f"window_stride={window_stride} must be in [1, seq_length - 2]")
        self.tag_scheme = detect_scheme(self.labels) if tag_scheme == "auto" else tag_scheme
        self._scoring = False  # evaluate: each word once

    @classmethod
    def from_checkpoint(cls, path: str, labels=None, seq_length: int = 128, *, window_stride: int = 0,
                        tag_scheme: str = "auto", config=None, spiece_model=None, lower_case: Optional[bool] = None,
                        task_scope: str = "tagging", dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None,
                        new_head: bool = False) -> "XLNetTextTagger":
        """As ``XLNetTextClassifier.from_checkpoint``; ``labels``: the tags (the head's classes, in order; a
        run_tagger.py run records them in ``<model_dir>/tagging.tags.json``). An HF ``XLNetForTokenClassification``
        gives its own (config.json's id2label) when ``labels`` is None, and its casing."""
        source = checkpoint_source(path)
        if labels is None:
            if not (isinstance(source, HFCheckpoint) and source.head == "XLNetTagger" and source.labels):
                raise ValueError("labels: the tags of the head are needed (only an HF XLNetForTokenClassification "
                                 "with named labels records them)")
            labels = source.labels
        preprocessor, config = build_parts(source, config, spiece_model, seq_length, lower_case, dropout, dropatt)
        network = XLNetTagger(config, num_labels=len(labels), task_scope=task_scope, dtype=dtype)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, labels=labels, window_stride=window_stride, tag_scheme=tag_scheme,
                   name=name)

    @classmethod
    def from_run(cls, network, info, preprocessor) -> "XLNetTextTagger":
        return cls(preprocessor, network, labels=info.labels, window_stride=info.extras["window_stride"],
                   tag_scheme=info.extras["tag_scheme"])

    @staticmethod
    def _joined(rows):
        """Lists of words (or tags) -> one space-joined string each; strings pass."""
        if isinstance(rows, (list, tuple)) and any(isinstance(r, (list, tuple)) for r in rows):
            return [" ".join(map(str, r)) if isinstance(r, (list, tuple)) else r for r in rows]
        return rows

    def _arrays(self, x, y=None) -> tuple:
        return self._joined(x), (None if y is None else self._joined(y))

    def _streamed_batch(self, batch):
        return tuple(map(self._joined, batch)) if isinstance(batch, tuple) else self._joined(batch)

    def _encode_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        if is_encoded(element_x(dataset.element_spec)):
            return dataset
        is_tuple = isinstance(dataset.element_spec, tuple)
        scoring = self._scoring

        def encode(*element):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(element if is_tuple else element[0])
            if sample_weight is not None:
                raise ValueError("sample_weight: not taken by XLNetTextTagger (words are weighted by the windows)")
            return self._windows(x, y, scoring)

        return dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    @tf.function(autograph=False, reduce_retracing=True)
    def _windows(self, text, tags=None, scoring=False):
        from xlnet_tf.tasks.tagging.tagging_graph import encode_words, split_words

        words = split_words(as_strings(text))[0]
        encoded = encode_words(self.preprocessor, words, self.window_stride)
        features = {k: encoded[k] for k in ("input_ids", "segment_ids", "padding_mask")}
        if tags is None:
            return features
        tag_text = as_strings(tags)
        tags = tf.strings.split(tag_text).with_row_splits_dtype(tf.int64)
        match = tf.equal(tags.flat_values[:, None], tf.constant(self.labels)[None, :])
        # The failing rows' own text in the messages: a pipeline's error cannot name the row of the user's data.
        uneven = tf.not_equal(tags.row_lengths(), words.row_lengths())
        row = tf.argmax(tf.cast(uneven, tf.int32))
        unknown = tf.boolean_mask(tags.flat_values, ~tf.reduce_any(match, axis=1))
        checks = [tf.debugging.Assert(~tf.reduce_any(uneven), [
                      "y: each sentence needs one tag per word; words:", tf.gather(words.row_lengths(), row),
                      "tags:", tf.gather(tags.row_lengths(), row), "sentence:", tf.gather(as_strings(text), row),
                      "its tags:", tf.gather(tag_text, row)]),
                  tf.debugging.Assert(tf.size(unknown) == 0, [
                      f"y: tags that are not one of the model's {len(self.labels)} ({' '.join(self.labels[:20])}"
                      f"{' ...' if len(self.labels) > 20 else ''}):", unknown], summarize=5)]
        with tf.control_dependencies(checks):
            ids = tf.argmax(tf.cast(match, tf.int32), axis=1, output_type=tf.int64)
        window_words = encoded["window_words"]
        labels = tf.where(window_words >= 0, tf.gather(ids, tf.maximum(window_words, 0)), 0)
        if scoring:
            at = tf.stack([encoded["window"], encoded["position"]], axis=1)
            weight = tf.scatter_nd(at, tf.ones_like(encoded["window"], tf.float32), tf.shape(window_words, tf.int64))
        else:
            weight = tf.cast(window_words >= 0, tf.float32)
        return features, labels, weight

    def call(self, inputs, training=None):
        return self.network(self._token_ids(inputs), training=training)["logits"]

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        with self._scored():
            return super().evaluate(x, y, batch_size, verbose, sample_weight, steps, callbacks, return_dict,
                                    **kwargs)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        with self._scored():
            return super().test_on_batch(x, y, sample_weight, return_dict)

    @contextlib.contextmanager
    def _scored(self):
        """Evaluation's windows: each word labelled once (where it has the most context), not in every window."""
        self._scoring = True
        try:
            yield
        finally:
            self._scoring = False

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string)])
    def _tagged(self, text):
        from xlnet_tf.tasks.tagging.tagging_graph import tag_text

        return tag_text(self.network, self.preprocessor, text, self.labels, self.window_stride,
                        self.tag_scheme == "bio")

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Per sentence its words, their offsets and tags (see the class docstring): a dict of numpy arrays."""
        x = streamed_dataset(x, self._streamed_batch)
        dataset = x if isinstance(x, tf.data.Dataset) else array_dataset(self._joined(x), batch_size=batch_size)
        parts = [self._tagged(as_strings(element_x(batch))) for batch in dataset.take(steps or -1)]
        if not parts:
            raise ValueError("x: no examples")
        out = {}
        for key in parts[0]:
            values = [p[key].numpy() for p in parts]
            if values[0].ndim == 1:
                out[key] = np.concatenate(values)
            else:  # pad each batch's [B, N] to the widest
                width = max(v.shape[1] for v in values)
                fill = b"" if values[0].dtype.kind in "SO" else (0.0 if values[0].dtype.kind == "f" else -1)
                out[key] = np.concatenate([np.pad(v, [(0, 0), (0, width - v.shape[1])], constant_values=fill)
                                           for v in values])
        return out

    _export_task = "tagging"

    def export(self, export_dir: str, labels: Optional[list] = None, task: Optional[str] = None,
               pair: Optional[bool] = None, *, format: str = "tf_saved_model") -> str:
        """As ``XLNetTextClassifier.export``: ``serving_default`` takes ``text`` [B] and returns the words with
        their character offsets and tags (docs/tagging.md); the tags are the model's ``labels``."""
        if labels is not None and list(labels) != self.labels:
            raise ValueError(f"labels: the export's tags are the model's ({len(self.labels)}, in the head's order); "
                             "give none")
        if pair:
            raise ValueError("pair: a tagger reads one text a row")
        return super().export(export_dir, task=task, format=format)

    def _serving_kind(self) -> str:
        return "tagging"

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        return list(self.labels)

    def _serving_extras(self) -> dict:
        return dict(tag_scheme=self.tag_scheme, window_stride=self.window_stride)

    def get_config(self):
        return dict(super().get_config(), labels=list(self.labels), window_stride=self.window_stride,
                    tag_scheme=self.tag_scheme)
