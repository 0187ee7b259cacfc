"""Fine-tuning models on raw strings, the Keras way: ``compile``/``fit``/``evaluate``/``predict`` on text.

``XLNetTextClassifier``, ``XLNetTextMultipleChoice`` and ``XLNetTextSquad`` are an ``XLNetPreprocessor``
(strings -> the fine-tuning layout, in the graph) in front of the very task models ``run_classifier.py`` and
``run_squad.py`` train (``xlnet_tf.models.heads.XLNetClassifier`` / ``XLNetMultipleChoice`` / ``XLNetSquad``, kept
as ``.network``), so the heads, the
input layout and the checkpoints are shared with the entry points. ``from_checkpoint`` reads a release directory
(``xlnet_config.json`` + ``xlnet_model.ckpt`` + ``spiece.model``), a directory or prefix of a native checkpoint
(``xlnet-convert-checkpoint``, ``run_pretrain.py``, ``run_classifier.py``), pretrained (the head starts fresh) or
fine-tuned (the head is loaded too).

Example::

    model = xlnet_tf.XLNetTextClassifier.from_checkpoint("xlnet_cased_L-12_H-768_A-12", num_labels=2,
                                                         seq_length=128)
    model.compile(keras.optimizers.Adam(2e-5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32), epochs=2)
    probabilities = tf.nn.softmax(model.predict(["A gripping film.", "Dull."]))
"""

from __future__ import annotations

import os
from typing import Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf.checkpoint import is_tf1_checkpoint, load_original_checkpoint, load_pretrained, resolve_checkpoint
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models.heads import XLNetClassifier, XLNetMultipleChoice, XLNetSquad
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.training.setup import read_model


def load_task_weights(network: keras.Model, path: str) -> str:
    """Loads a checkpoint into a task model (``XLNetClassifier``, ``XLNetMultipleChoice``): the whole model if the
    checkpoint holds this task's head (fine-tuned: TF1 layout of the original code, or ``run_classifier.py``'s),
    else only the network (a pretrained release, conversion or pretraining checkpoint; the head keeps its fresh
    initialisation). Returns "fine-tuned" or "pretrained"; a ValueError names the checkpoint if neither fits."""
    prefix = resolve_checkpoint(path)
    try:
        if is_tf1_checkpoint(prefix):
            load_original_checkpoint(network, prefix)
        else:
            read_model(network, prefix)
        return "fine-tuned"
    except ValueError as whole:
        reason = str(whole).strip().splitlines()[-1].strip()
    load_pretrained(network, prefix)  # the network alone; raises (naming the checkpoint) if that does not fit
    logging.info("%s: the network is loaded, the %s head starts from random weights (%s)", prefix,
                 type(network).__name__, reason)
    return "pretrained"


def _locate(path: str, config, spiece_model) -> tuple:
    """(XLNetConfig or its path, SentencePiece model bytes or path) from the arguments, else from the checkpoint's
    directory (a release or ``xlnet-convert-checkpoint`` directory holds ``xlnet_config.json`` and
    ``spiece.model``); a ValueError names the argument that is missing."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if config is None:
        config = os.path.join(folder, "xlnet_config.json")
        if not os.path.exists(config):
            raise ValueError(f"config: {path} has no xlnet_config.json next to it; pass config= (the model's "
                             "xlnet_config.json or an XLNetConfig)")
    if spiece_model is None:
        spiece_model = os.path.join(folder, "spiece.model")
        if not os.path.exists(spiece_model):
            raise ValueError(f"spiece_model: {path} has no spiece.model next to it; pass spiece_model= (a path or "
                             "the model's bytes)")
    return config, spiece_model


def _build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt, **preprocessing):
    """(preprocessor, XLNetConfig) for ``from_checkpoint``: the vocabulary of the two checked against each other."""
    config, spiece_model = _locate(path, config, spiece_model)
    if isinstance(config, XLNetConfig):
        config = config.replace(dropout=dropout, dropatt=dropatt)
    else:
        config = XLNetConfig.from_json(config, dropout=dropout, dropatt=dropatt)
    if isinstance(spiece_model, (bytes, bytearray)):
        preprocessor = XLNetPreprocessor(spiece_model, seq_length=seq_length, lower_case=lower_case,
                                         **preprocessing)
    else:
        preprocessor = XLNetPreprocessor.from_file(spiece_model, seq_length=seq_length, lower_case=lower_case,
                                                   **preprocessing)
    if preprocessor.vocabulary_size != config.n_token:
        raise ValueError(f"spiece_model: {preprocessor.vocabulary_size} pieces, but config has n_token="
                         f"{config.n_token} (a SentencePiece model of another checkpoint?)")
    return preprocessor, config


def _string_tensors(x):
    """Python lists and numpy arrays of strings (also inside a tuple, list or dict of inputs) as tf.string tensors:
    Keras 3's data adapters take string tensors but not those."""
    if isinstance(x, dict):
        return {k: _string_tensors(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x and all(isinstance(v, (str, bytes)) for v in x):
        return tf.constant(list(x), tf.string)  # a batch of strings
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (list, tuple)) and x[0] and \
            all(isinstance(v, (str, bytes)) for v in x[0]) and isinstance(x, list):
        return tf.constant(x, tf.string)  # multiple-choice options: a list of lists of strings
    if isinstance(x, tuple):
        return tuple(_string_tensors(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        return tf.constant(x.astype(object) if x.dtype.kind == "U" else x, tf.string)
    return x


class _TextTaskModel(keras.Model):
    """A preprocessor in front of a task model: ``call(raw strings) -> logits``. ``fit``/``evaluate``/
    ``predict`` also take Python lists of strings (and tuples of them)."""

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(preprocessor, XLNetPreprocessor):
            raise ValueError(f"preprocessor: expected an XLNetPreprocessor, got {type(preprocessor).__name__}")
        self.preprocessor, self.network = preprocessor, network
        # Fine-tuning has no query stream: mask_emb gets no gradient (Keras would warn about it at every fit).
        network.xlnet.mask_emb.trainable = False

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Under a tf.distribute strategy Keras 3 (3.15) builds the model from the first batch averaged over the
        # replicas (strategy.reduce("MEAN")), which fails on strings (AddN has no string kernel). The shapes are all
        # it needs: build from the first replica's part of that batch instead, taken the same way.
        if self._distribute_strategy is not None and iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda v: (self._distribute_strategy.experimental_local_results(v)[0]
                               if isinstance(v, tf.distribute.DistributedValues) else v), next(batches))
                break
        return super()._maybe_symbolic_build(data_batch=data_batch)

    def build_from_config(self, config):
        self.built = True  # the network creates its variables when constructed: nothing to build on loading

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        if isinstance(validation_data, tuple):
            validation_data = (_string_tensors(validation_data[0]),) + tuple(validation_data[1:])
        return super().fit(_string_tensors(x), y, *args, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        return super().evaluate(_string_tensors(x), y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        return super().predict(_string_tensors(x), *args, **kwargs)

    def export(self, export_dir: str, labels: Optional[list] = None, task: str = "custom", pair: bool = False) -> str:
        """Writes this model for TF Serving at ``<export_dir>/<version>/`` and returns that directory: the
        ``serving_default`` signature takes raw text (this preprocessor is inside the graph), ``serve_ids`` the
        encoded inputs, ``metadata`` what a client must know; the same writer and layout as ``python -m
        xlnet_tf.cli.export`` (docs/serving.md). The version is the optimizer's step count (a Unix timestamp before
        any training), or one above the newest version already there: none is overwritten.

        ``labels``: the class names of the ``label`` output (default "0", "1", ...); ``pair``: the signature also
        takes ``sentence2``; ``task``: recorded in the metadata."""
        from xlnet_tf.finetuning.serving import ServingInfo, write_serving_model

        pre = self.preprocessor
        kind = self._serving_kind()
        labels = self._serving_labels(labels)
        step = int(self.optimizer.iterations.numpy()) if getattr(self, "optimizer", None) is not None else 0
        info = ServingInfo(kind=kind, task=task, max_seq_length=pre.seq_length, lower_case=pre.lower_case,
                           labels=list(labels) if labels is not None else None, pair=pair, global_step=step,
                           max_qa_length=pre.max_qa_length, squad=self._serving_squad())
        return write_serving_model(self.network, export_dir, info, preprocessor=pre)

    def _serving_squad(self) -> dict:
        return {}  # SQuAD's window and beam settings (``ServingInfo.squad``); none for the other tasks

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        return labels  # the class names of the export's ``label`` output, where it has one

    def get_config(self):
        return dict(super().get_config(), preprocessor=keras.saving.serialize_keras_object(self.preprocessor),
                    network=keras.saving.serialize_keras_object(self.network))

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("preprocessor", "network"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextClassifier(_TextTaskModel):
    """Sequence classification / regression on raw strings: ``XLNetPreprocessor`` + ``XLNetClassifier``.

    Inputs: sentences, a tf.string [B] tensor (or a Python list / numpy array of strings), or sentence pairs as
    a tuple ``(sentences, second_sentences)`` of two such [B] batches (``fit`` on a ``tf.data`` of
    ``((a, b), label)``). Output: ``logits`` float32 [B, num_labels] (``tf.nn.softmax`` for probabilities), or
    the score [B] for regression. Train with ``SparseCategoricalCrossentropy(from_logits=True)`` (classes) or
    ``MeanSquaredError`` (regression), as ``run_classifier.py`` does.
    """

    @classmethod
    def from_checkpoint(cls, path: str, num_labels: int = 2, seq_length: int = 128, *, config=None,
                        spiece_model=None, lower_case: bool = False, regression: bool = False,
                        task_scope: str = "task", summary_type: str = "last", use_summ_proj: bool = True,
                        dropout: float = 0.1, dropatt: float = 0.1, dtype: Optional[str] = None,
                        name: Optional[str] = None) -> "XLNetTextClassifier":
        """A classifier from a checkpoint (see ``load_task_weights``): a release directory, a native checkpoint's
        directory or prefix. ``config`` (an ``xlnet_config.json`` path or an ``XLNetConfig``) and ``spiece_model``
        (a path or the proto's bytes) default to the files next to the checkpoint. ``task_scope`` names the head
        of a fine-tuned TF1 checkpoint (``model/classification_{task_scope}/...``, the original's task name);
        ``dropout``/``dropatt`` are the fine-tuning rates (run_classifier.py's defaults)."""
        preprocessor, config = _build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt)
        network = XLNetClassifier(config, num_labels=num_labels, task_scope=task_scope, regression=regression,
                                  summary_type=summary_type, use_summ_proj=use_summ_proj, dtype=dtype)
        load_task_weights(network, path)
        return cls(preprocessor, network, name=name)

    def features(self, inputs) -> dict:
        if isinstance(inputs, dict):
            return self.preprocessor(inputs["sentence"], inputs.get("sentence2"))
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2 and not isinstance(inputs[0], str):
            return self.preprocessor(*inputs)
        return self.preprocessor(inputs)

    def call(self, inputs, training=None):
        logits = self.network(self.features(inputs), training=training)["logits"]
        return logits[:, 0] if self.network.regression else logits

    def _serving_kind(self) -> str:
        return "regression" if self.network.regression else "classification"

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        if labels is None and not self.network.regression:
            return [str(i) for i in range(self.network.num_labels)]
        return labels


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextMultipleChoice(_TextTaskModel):
    """RACE-style multiple choice on raw strings: ``XLNetPreprocessor.multiple_choice`` + ``XLNetMultipleChoice``.

    Inputs: ``(article, question, options)`` -- tf.string [B], [B], [B, C] -- as a tuple, or a dict with those
    keys. Output: ``logits`` float32 [B, C]; train with ``SparseCategoricalCrossentropy(from_logits=True)`` on
    the index of the right option.
    """

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_qa_length: Optional[int] = None,
                        config=None, spiece_model=None, lower_case: bool = False, summary_type: str = "last",
                        use_summ_proj: bool = True, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None) -> "XLNetTextMultipleChoice":
        """As ``XLNetTextClassifier.from_checkpoint``; ``max_qa_length`` as ``run_classifier.py``'s (the last
        question+option tokens kept)."""
        preprocessor, config = _build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_qa_length=max_qa_length)
        network = XLNetMultipleChoice(config, summary_type=summary_type, use_summ_proj=use_summ_proj, dtype=dtype)
        load_task_weights(network, path)
        return cls(preprocessor, network, name=name)

    def features(self, inputs) -> dict:
        if isinstance(inputs, dict):
            return self.preprocessor.multiple_choice(inputs["article"], inputs["question"], inputs["options"])
        if not (isinstance(inputs, (tuple, list)) and len(inputs) == 3):
            raise ValueError(f"inputs: expected (article, question, options), got {type(inputs).__name__}")
        return self.preprocessor.multiple_choice(*inputs)

    def call(self, inputs, training=None):
        return self.network(self.features(inputs), training=training)["logits"]

    def _serving_kind(self) -> str:
        return "multiple_choice"


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextSquad(_TextTaskModel):
    """SQuAD (1.1 and 2.0) on raw strings: ``XLNetPreprocessor.squad`` + ``XLNetSquad``.

    Inputs: ``(questions, contexts)``, tf.string [B] each, as a tuple (or a dict with keys ``question`` and
    ``context``). Output of ``call``/``predict``: ``run_squad.py --do_predict``'s answer per question, computed in
    the graph by ``squad_model.best_answers`` (what the SavedModel of ``export`` serves), each [B]: ``text``
    (string; ``predict`` gives bytes), ``start_char``/``end_char`` (int32, ``context[start_char:end_char] == text``
    in characters, -1 without an answer span), ``null_odds`` (float32; above a threshold tuned on dev data the
    question counts as unanswerable, SQuAD 2.0). Each question's context is cut into W >= B windows of
    ``seq_length`` tokens (``doc_stride`` apart); the answer is the best one over its windows.

    ``fit``/``evaluate`` take ``((questions, contexts), (answer_starts, answers, is_impossible))``: the answer's
    first character in the context int [B], the answer text tf.string [B] (or its end character, exclusive, int
    [B]) and is_impossible bool/int/float [B] (SQuAD 2.0; 0 for SQuAD 1.1). Training runs on the windows: each
    gets the labels of ``squad_data``'s training features (``window_labels``) and the loss is ``squad_loss``'s
    mean over the batch's windows, as ``run_squad.py`` trains; no ``loss`` is passed to ``compile``. Unlike
    ``run_squad.py`` nothing is skipped: an answer that no window holds whole trains every window as "no answer".
    ``fit``/``evaluate`` run on one device: under a multi-replica ``tf.distribute`` strategy they raise
    (a 2-CPU MirroredStrategy step hung); ``call``/``predict``/``export`` have no such limit.
    """

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, max_answer_length: int = 64,
                 **kwargs):
        super().__init__(preprocessor, network, **kwargs)
        if not isinstance(max_answer_length, int) or max_answer_length < 1:
            raise ValueError(f"max_answer_length={max_answer_length!r}: must be a positive int")
        self.max_answer_length = max_answer_length

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_query_length: int = 64, doc_stride: int = 128,
                        max_answer_length: int = 64, start_n_top: int = 5, end_n_top: int = 5, config=None,
                        spiece_model=None, lower_case: bool = False, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None) -> "XLNetTextSquad":
        """As ``XLNetTextClassifier.from_checkpoint``; the window and beam settings are ``run_squad.py``'s flags
        (a fine-tuned checkpoint: the SQuAD head of ``run_squad.py`` or of the original's TF1 layout)."""
        preprocessor, config = _build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_query_length=max_query_length, doc_stride=doc_stride)
        network = XLNetSquad(config, start_n_top=start_n_top, end_n_top=end_n_top, dtype=dtype)
        load_task_weights(network, path)
        return cls(preprocessor, network, max_answer_length=max_answer_length, name=name)

    @staticmethod
    def _texts(inputs) -> tuple:
        """(questions, contexts) [B] each from a tuple/list or a dict of the two."""
        if isinstance(inputs, dict):
            return inputs["question"], inputs["context"]
        if not (isinstance(inputs, (tuple, list)) and len(inputs) == 2):
            raise ValueError(f"inputs: expected (questions, contexts), got {type(inputs).__name__}")
        return tuple(inputs)

    def call(self, inputs, training=None):
        from xlnet_tf.tasks.squad_answers import best_answers

        question, context = self._texts(inputs)
        return best_answers(self.network, self.preprocessor, question, context,
                            {"max_answer_length": self.max_answer_length})

    # -- training on raw strings ------------------------------------------------------------------------------
    @staticmethod
    def _label_tensors(y):
        """(answer_starts, answers, is_impossible) given as Python lists or numpy arrays, as tensors: Keras' data
        adapters take no Python lists, nor numpy labels next to the inputs' string tensors."""
        if isinstance(y, (tuple, list)) and len(y) == 3:
            return tuple(tf.convert_to_tensor(_string_tensors(v)) for v in y)
        return y

    def _check_single_replica(self, method: str) -> None:
        # Under a 2-CPU MirroredStrategy the replicas' batches hold different numbers of SQuAD windows, and the
        # optimizer's all-reduce of the gradients then disagrees on shapes between replicas: a hang, or "Shape
        # mismatch in the collective instance" (densifying the embedding's IndexedSlices gradient was not enough).
        # An error is better than either. One device (no strategy) is what is tested.
        if self.distribute_strategy.num_replicas_in_sync > 1:
            raise NotImplementedError(f"XLNetTextSquad.{method} under a tf.distribute strategy with "
                                      f"{self.distribute_strategy.num_replicas_in_sync} replicas is not supported "
                                      "yet; build the model outside strategy.scope(), or train with run_squad.py")

    def fit(self, x=None, y=None, *args, **kwargs):
        self._check_single_replica("fit")
        return super().fit(x, self._label_tensors(y), *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self._check_single_replica("evaluate")
        return super().evaluate(x, self._label_tensors(y), *args, **kwargs)

    def training_windows(self, inputs, labels) -> dict:
        """The windows of ``XLNetPreprocessor.squad`` for ``inputs`` (questions, contexts [B]) with the labels of
        ``labels`` = (answer_starts int [B], answers: text tf.string [B] or end characters (exclusive) int [B],
        is_impossible [B]) per window (``window_labels``): what the train step feeds ``XLNetSquad``."""
        question, context = self._texts(inputs)
        if not (isinstance(labels, (tuple, list)) and len(labels) == 3):
            raise ValueError("labels: expected (answer_starts, answers, is_impossible), got "
                             f"{type(labels).__name__}")
        answer_start, answer, is_impossible = labels
        answer_start = tf.cast(answer_start, tf.int32)
        answer = tf.convert_to_tensor(answer)
        if answer.dtype == tf.string:
            # squad_data's answer end: start + len(text) (Python characters = code points, as UTF8_CHAR counts).
            answer = tf.strings.unicode_transcode(answer, "UTF-8", "UTF-8", errors="replace",
                                                  replacement_char=0xFFFD)
            answer_end = answer_start + tf.strings.length(answer, unit="UTF8_CHAR")
        else:
            answer_end = tf.cast(answer, tf.int32)
        windows = self.preprocessor.squad(question, context)
        windows.update(window_labels(windows, answer_start, answer_end, tf.cast(is_impossible, tf.bool)))
        return windows

    def _window_loss(self, x, y, training: bool):
        from xlnet_tf.tasks.squad_data import INFERENCE_KEYS
        from xlnet_tf.tasks.squad_answers import squad_loss

        windows = self.training_windows(x, y)
        features = {k: windows[k] for k in INFERENCE_KEYS + ("start_positions", "end_positions", "is_impossible")}
        total, count = squad_loss(features, self.network(features, training=training))
        return tf.math.divide_no_nan(total, count)  # the mean over the windows (none: a batch of empty contexts)

    def train_step(self, data):
        # Keras' train step calls the model on x and a compiled loss on its output; SQuAD's loss needs the
        # teacher-forced head (the labelled start, per window) instead, so the step is written out here.
        from keras.src.losses.loss import scale_loss_for_distribution

        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss = self._window_loss(x, y, training=True)
            self._loss_tracker.update_state(loss)
            scaled = self.optimizer.scale_loss(scale_loss_for_distribution(loss))
        variables = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        return self.get_metrics_result()

    def test_step(self, data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        self._loss_tracker.update_state(self._window_loss(x, y, training=False))
        return self.get_metrics_result()

    def export(self, export_dir: str, task: str = "squad") -> str:
        """As ``XLNetTextClassifier.export``: the SQuAD layout (``serving_default`` takes ``question`` and
        ``context`` and answers as ``call``; ``serve_ids`` gives the head's beam), as ``run_squad.py
        --export_dir`` writes it."""
        return super().export(export_dir, task=task)

    def _serving_kind(self) -> str:
        return "squad"

    def _serving_squad(self) -> dict:
        from xlnet_tf.tasks.squad import SquadSettings

        pre, network = self.preprocessor, self.network
        # n_best_size: run_squad.py's default, recorded as its export does (the served answer does not use it).
        return dict(max_query_length=pre.max_query_length, doc_stride=pre.doc_stride,
                    max_answer_length=self.max_answer_length, start_n_top=network.start_n_top,
                    end_n_top=network.end_n_top, n_best_size=SquadSettings.n_best_size)

    def get_config(self):
        return dict(super().get_config(), max_answer_length=self.max_answer_length)


def window_labels(windows: dict, answer_start: tf.Tensor, answer_end: tf.Tensor, is_impossible: tf.Tensor) -> dict:
    """The training labels of ``XLNetPreprocessor.squad``'s windows, as ``squad_data``'s training features have
    them (squad_lib_sp's rules), from each token's characters (``token_start_char``/``token_end_char`` [W, S]).

    answer_start, answer_end: the answer's first character and its end (exclusive) in the context, int32 [B];
    is_impossible: bool [B]. The answer's first token is the first paragraph token ending at or after its first
    character (a token's characters begin with the whitespace before its word), its last token the last one
    starting at or before its last character. A window holding both gets their positions; any other window, and
    every window of an impossible question, points both at its ``cls_index`` and is impossible. Returns
    ``start_positions``, ``end_positions`` int32 [W] and ``is_impossible`` float32 [W].
    """
    example = windows["example_index"]  # [W]
    first_char, last_char = windows["token_start_char"], windows["token_end_char"]  # [W, S], -1: not paragraph
    batch = tf.shape(answer_start)[0]
    first = tf.gather(answer_start, example)[:, None]
    last = tf.gather(answer_end, example)[:, None] - 1
    ends_after = (last_char >= 0) & (last_char >= first)
    starts_before = (first_char >= 0) & (first_char <= last)
    # The two tokens over the whole context (a window sees only its part), named by their characters: the
    # answer's first token is the one ending first among those ending after its start, and so on.
    start_key = tf.math.unsorted_segment_min(
        tf.reduce_min(tf.where(ends_after, last_char, tf.int32.max), axis=1), example, batch)
    end_key = tf.math.unsorted_segment_max(
        tf.reduce_max(tf.where(starts_before, first_char, -1), axis=1), example, batch)
    start_here = ends_after & (last_char == tf.gather(start_key, example)[:, None])
    end_here = starts_before & (first_char == tf.gather(end_key, example)[:, None])
    seq_length = tf.shape(first_char)[1]
    start = tf.argmax(tf.cast(start_here, tf.int32), axis=1, output_type=tf.int32)  # the first such position
    end = seq_length - 1 - tf.argmax(tf.cast(tf.reverse(end_here, [1]), tf.int32), axis=1, output_type=tf.int32)
    inside = (tf.reduce_any(start_here, axis=1) & tf.reduce_any(end_here, axis=1)
              & ~tf.gather(is_impossible, example))
    cls_index = windows["cls_index"]
    return {"start_positions": tf.where(inside, start, cls_index), "end_positions": tf.where(inside, end, cls_index),
            "is_impossible": 1.0 - tf.cast(inside, tf.float32)}
