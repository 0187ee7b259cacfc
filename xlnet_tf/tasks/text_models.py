"""Fine-tuning models on raw strings, the Keras way: ``compile``/``fit``/``evaluate``/``predict`` on text.

``XLNetTextClassifier``, ``XLNetTextMultipleChoice`` and ``XLNetTextSquad`` hold an ``XLNetPreprocessor``
(strings -> the fine-tuning layout, TensorFlow ops) and the very task network ``run_classifier.py`` and
``run_squad.py`` train (``xlnet_tf.models.heads.XLNetClassifier`` / ``XLNetMultipleChoice`` / ``XLNetSquad``, kept
as ``.network``), so the heads, the input layout and the checkpoints are shared with the entry points. As in
keras-hub, ``call`` takes token ids and ``fit``/``evaluate``/``predict`` on strings run the preprocessor in the
tf.data pipeline; ``export`` joins the two in one serving graph. ``from_checkpoint`` reads a release directory
(``xlnet_config.json`` + ``xlnet_model.ckpt`` + ``spiece.model``), a directory or prefix of a native checkpoint
(``xlnet-convert-checkpoint``, ``run_pretrain.py``, ``run_classifier.py``), pretrained (the head starts fresh) or
fine-tuned (the head is loaded too).

The text model base lives here; a family package holds its own text model in a module of its own, imported
only when used (the family's ``__init__`` is imported while flags are checked, before TensorFlow loads): the
tagging family's ``XLNetTextTagger`` is ``xlnet_tf.tasks.tagging.text_model``. A family needs no text model; one
that wants the Keras API on strings subclasses ``_TextTaskModel`` with its ``preprocess`` and ``call``.

Example::

    model = xlnet_tf.XLNetTextClassifier.from_checkpoint("xlnet_cased_L-12_H-768_A-12", num_labels=2,
                                                         seq_length=128)
    model.compile(keras.optimizers.Adam(2e-5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32), epochs=2)
    probabilities = tf.nn.softmax(model.predict(["A gripping film.", "Dull."]))
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from typing import Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.checkpoint import (assign_arrays, is_tf1_checkpoint, load_hf_pretrained, load_original_checkpoint,
                                 load_pretrained, read_model, resolve_checkpoint)
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import InputError
from xlnet_tf.hf import HFCheckpoint, is_hf_dir
from xlnet_tf.models.heads import XLNetClassifier, XLNetMultipleChoice, XLNetSquad
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.squad_answers import answerable_inputs, answers_from_windows, squad_window_losses
from xlnet_tf.tasks.squad_data import INFERENCE_KEYS

# SQuAD windows: the labels of training, and what the answers are read from after the network.
LABEL_KEYS = ("start_positions", "end_positions", "is_impossible")
ANSWER_KEYS = ("example_index", "token_start_char", "token_end_char", "token_is_max_context")


def load_task_weights(network: keras.Model, path: str, new_head: bool = False) -> str:
    """Loads a checkpoint into a task model (``XLNetClassifier``, ``XLNetMultipleChoice``, ``XLNetSquad``): the
    whole model if the checkpoint holds this task's head (fine-tuned: TF1 layout of the original code, or
    ``run_classifier.py``'s), else only the network (a pretrained release, conversion or pretraining checkpoint;
    the head keeps its fresh initialisation). A checkpoint fine-tuned for another task (another head, number of
    labels, regression) is refused, naming its head's weights, unless ``new_head``: a new head on its network
    (e.g. RTE from an MNLI model). Returns "fine-tuned" or "pretrained"; a ValueError names the checkpoint if
    neither fits. ``path`` may be an ``hf.HFCheckpoint`` (a HuggingFace model: its head, if it is this task's)."""
    if isinstance(path, HFCheckpoint):
        return _load_hf_task_weights(network, path, new_head)
    prefix = resolve_checkpoint(path)
    try:
        if is_tf1_checkpoint(prefix):
            load_original_checkpoint(network, prefix)
        else:
            read_model(network, prefix)
        return "fine-tuned"
    except ValueError as whole:
        reason = str(whole).strip().splitlines()[-1].strip()
    heads = head_variables(prefix)
    if heads and not new_head:
        raise InputError(f"{prefix}: fine-tuned for another task: its head ({', '.join(heads[:3])}"
                         f"{', ...' if len(heads) > 3 else ''}) does not fit this {type(network).__name__} "
                         f"({reason}); pass new_head=True to start a new head on its network")
    load_pretrained(network, prefix)  # the network alone; raises (naming the checkpoint) if that does not fit
    logging.info("%s: the network is loaded, the %s head starts from random weights (%s)", prefix,
                 type(network).__name__, reason)
    return "pretrained"


def _load_hf_task_weights(network: keras.Model, checkpoint: HFCheckpoint, new_head: bool) -> str:
    tensors = checkpoint.tf1_tensors(task_scope=getattr(network, "task_scope", "task"))
    try:
        assign_arrays(network, tensors, checkpoint.source)
        return "fine-tuned"
    except InputError as whole:
        reason = str(whole).strip().splitlines()[-1].strip()
    if checkpoint.head not in (None, "XLNetPretrainer") and not new_head:
        raise InputError(f"{checkpoint.source}: its head ({checkpoint.architecture}) does not fit this "
                         f"{type(network).__name__} ({reason}); pass new_head=True to start a new head on its network")
    load_hf_pretrained(network, checkpoint)
    logging.info("%s: the network is loaded, the %s head starts from random weights", checkpoint.source,
                 type(network).__name__)
    return "pretrained"


def _source(path):
    """An ``hf.HFCheckpoint`` for a HuggingFace directory or ``hf://`` name, else ``path``."""
    return HFCheckpoint(path) if is_hf_dir(path) else path


def _hf_head(source, heads: tuple) -> dict:
    """The summary settings of an HF classification or multiple-choice checkpoint (else nothing): its weights
    compute them, so they are not a free choice."""
    return source.summary() if isinstance(source, HFCheckpoint) and source.head in heads else {}


def head_variables(prefix: str) -> list:
    """The variables of a task head in the checkpoint ``prefix``: neither the network's (``transformer``) nor
    pretraining's (LM bias, objective), nor training state (optimizer, step, dropout seeds)."""
    names = [name for name, _ in tf.train.list_variables(prefix)]
    if is_tf1_checkpoint(prefix):
        return [n for n in names if n.startswith("model/") and not n.startswith(("model/transformer/",
                                                                                   "model/lm_loss/"))]
    # Native checkpoints: the model's weights are saved as "weights/<original name, - for />" (optimizer slots
    # repeat the names under them).
    found = (re.search(r"(?:^|/)(weights/(?!transformer-)[^/]+)", name) for name in names
             if not name.startswith("optimizer/"))
    return sorted({match.group(1) for match in found if match})


def _locate(path: str, config, spiece_model) -> tuple:
    """(XLNetConfig or its path, SentencePiece model bytes or path) from the arguments, else from the checkpoint's
    directory (a release or ``xlnet-convert-checkpoint`` directory holds ``xlnet_config.json`` and
    ``spiece.model``); a ValueError names the argument that is missing."""
    path = os.fspath(path)
    folder = path if io_utils.isdir(path) else os.path.dirname(path)
    if config is None:
        config = os.path.join(folder, "xlnet_config.json")
        if not io_utils.exists(config):
            raise InputError(f"config: {path} has no xlnet_config.json next to it; pass config= (the model's "
                             "xlnet_config.json or an XLNetConfig)")
    if spiece_model is None:
        spiece_model = os.path.join(folder, "spiece.model")
        if not io_utils.exists(spiece_model):
            raise InputError(f"spiece_model: {path} has no spiece.model next to it; pass spiece_model= (a path or "
                             "the model's bytes)")
    return config, spiece_model


def _build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt, **preprocessing):
    """(preprocessor, XLNetConfig) for ``from_checkpoint``: the vocabulary of the two checked against each other.
    An HF checkpoint gives its config.json, spiece.model and tokenizer_config.json's casing (unless given)."""
    if isinstance(path, HFCheckpoint):
        tokenizer = path.tokenizer()
        config = path.xlnet_config() if config is None else config
        spiece_model = tokenizer.pop("spiece_model") if spiece_model is None else spiece_model
        lower_case = tokenizer.pop("lower_case") if lower_case is None else lower_case
        preprocessing = {**{k: v for k, v in tokenizer.items() if k in ("remove_space", "keep_accents")},
                         **preprocessing}
    else:
        config, spiece_model = _locate(path, config, spiece_model)
    lower_case = bool(lower_case)
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
        raise InputError(f"spiece_model: {preprocessor.vocabulary_size} pieces, but config has n_token="
                         f"{config.n_token} (a SentencePiece model of another checkpoint?)")
    return preprocessor, config


# Keras' batch size for arrays; the strings of a batch are preprocessed together.
DEFAULT_BATCH_SIZE = 32


def _tensors(value):
    """Python lists, numpy arrays and tensors (inside tuples and dicts) as tensors, so that tf.data slices them as
    Keras slices arrays: a list is one array (of strings, numbers, or lists of strings for multiple-choice
    options), a tuple or dict a structure of arrays."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_tensors(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        value = value.tolist()  # strings (str or bytes) in an object array
    return tf.convert_to_tensor(value)


def _strings(value) -> tf.Tensor:
    return tf.convert_to_tensor(value.tolist() if isinstance(value, np.ndarray) and value.dtype.kind == "O" else value,
                                tf.string)


def _rows(data) -> int:
    return int(tf.nest.flatten(data)[0].shape[0])


def _array_dataset(x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
    """Arrays (see ``_tensors``) as a tf.data pipeline of batches, the way Keras batches arrays: ``batch_size``
    rows (default 32) of ``x`` / ``(x, y)`` / ``(x, y, sample_weight)``, reshuffled every epoch if ``shuffle``."""
    data = keras.utils.pack_x_y_sample_weight(_tensors(x), _tensors(y), _tensors(sample_weight))
    if _rows(data) == 0:
        raise ValueError("x: no examples (an empty batch)")
    dataset = tf.data.Dataset.from_tensor_slices(data)
    if shuffle:
        dataset = dataset.shuffle(max(_rows(data), 1), reshuffle_each_iteration=True)
    return dataset.batch(batch_size or DEFAULT_BATCH_SIZE)


def _split_arrays(x, y, sample_weight, validation_split: float):
    """Keras' ``validation_split`` on arrays: the last ``validation_split`` of the rows (before any shuffling) are
    the validation data. Returns ``((x, y, sample_weight), (x, y, sample_weight))``."""
    data = tuple(_tensors(part) for part in (x, y, sample_weight))
    cut = int(np.floor(_rows(data) * (1.0 - validation_split)))

    def rows(part, take):
        return None if part is None else tf.nest.map_structure(take, part)

    return (tuple(rows(part, lambda t: t[:cut]) for part in data),
            tuple(rows(part, lambda t: t[cut:]) for part in data))


def _element_x(spec):
    """The ``x`` of a dataset element (or of its ``element_spec``), by Keras' rule: a tuple is ``(x,)``,
    ``(x, y)`` or ``(x, y, sample_weight)``, anything else is ``x``."""
    return keras.utils.unpack_x_y_sample_weight(spec)[0] if isinstance(spec, tuple) else spec


def _is_encoded(x) -> bool:
    """Whether model inputs are token ids already (the preprocessor's dict), not raw strings."""
    return isinstance(x, dict) and "input_ids" in x


@contextlib.contextmanager
def _end_of_data_expected(steps):
    """Without a step count Keras reads a dataset of unknown length (SQuAD's windows, a CsvDataset) to its end and
    then warns that the input 'ran out of data; interrupting training': noise where no count was asked for."""
    with warnings.catch_warnings():
        if steps is None:
            warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        yield


class _TextTaskModel(keras.Model):
    """A task network on token ids with the ``XLNetPreprocessor`` that makes them from strings, keras-hub's way:
    ``call`` takes the preprocessor's output (token ids), and ``fit``/``evaluate``/``predict`` on raw strings run
    the preprocessor in the tf.data pipeline (``dataset.map`` on batches, on the host) and hand the encoded
    batches to Keras. Token ids (a dict with ``input_ids``) are taken as they are. The step functions hold the
    network only, so they compile with ``jit_compile=True`` (XLA) and distribute like any Keras model; exports
    join preprocessor and network in one graph (``finetuning/serving.py``'s ``ServingModule``).

    Inputs of ``fit``/``evaluate``/``predict``: Python lists, numpy arrays or tf.string tensors (tuples or dicts
    of them, per task), batched ``batch_size`` rows at a time (default 32; ``shuffle`` and ``validation_split``
    as Keras does for arrays), or a batched ``tf.data.Dataset`` of ``x``, ``(x, y)`` or ``(x, y, sample_weight)``.
    ``compile(jit_compile="auto")`` (Keras' default) compiles the steps with XLA where there is an accelerator and
    not on a CPU-only machine, where xlnet_tf's fast CPU kernels (which XLA cannot run) do the work;
    ``jit_compile=True`` compiles with XLA anywhere."""

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(preprocessor, XLNetPreprocessor):
            raise ValueError(f"preprocessor: expected an XLNetPreprocessor, got {type(preprocessor).__name__}")
        self.preprocessor, self.network = preprocessor, network
        self.built = True  # the network creates its variables when constructed: nothing to build from data

    # Fine-tuning has no query stream: the network's mask_emb gets no gradient, so it is left out of what the
    # optimizer trains (Keras would warn about a missing gradient at every step). The network itself is not
    # touched: it may be shared with other models.
    def _unused(self, weight) -> bool:
        network = getattr(self, "network", None)  # None while keras.Model.__init__ runs
        return network is not None and weight is network.xlnet.mask_emb

    @property
    def trainable_weights(self):
        return [w for w in super().trainable_weights if not self._unused(w)]

    @property
    def non_trainable_weights(self):
        return super().non_trainable_weights + [w for w in super().trainable_weights if self._unused(w)]

    @property
    def trainable_variables(self):  # Keras builds the optimizer from this list (compile, loading a .keras file)
        return [v for v in super().trainable_variables if not self._unused(v)]

    @property
    def non_trainable_variables(self):
        return super().non_trainable_variables + [v for v in super().trainable_variables if self._unused(v)]

    def build_from_config(self, config):
        self.built = True  # see __init__

    # -- inputs ----------------------------------------------------------------------------------------------
    def preprocess(self, x) -> dict:
        """Raw strings (this task's ``x``: a batch) -> the network's inputs, in TensorFlow ops (tf.data)."""
        raise NotImplementedError(f"{type(self).__name__}.preprocess: a text task model says how its strings "
                                  "become the network's inputs")

    def _token_ids(self, inputs) -> dict:
        if not _is_encoded(inputs):
            raise ValueError(f"inputs: {type(self).__name__} takes token ids in call (the dict of its "
                             "preprocessor: input_ids, segment_ids, padding_mask), got "
                             f"{type(inputs).__name__}; raw strings go to fit/evaluate/predict, or to "
                             "model(model.preprocessor(...))")
        return inputs

    def _encode_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` (batches of ``x``, ``(x, y)`` or ``(x, y, sample_weight)``) with ``x`` encoded (raw strings
        through ``preprocess``, on the host, in parallel, in order); token ids pass as they are."""
        spec = dataset.element_spec
        if _is_encoded(_element_x(spec)):
            return dataset
        is_tuple = isinstance(spec, tuple)

        def encode(*element):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(element if is_tuple else element[0])
            return keras.utils.pack_x_y_sample_weight(self._preprocessed(x), self._checked_labels(y), sample_weight)

        return dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    # The pipelines' heavy functions are traced once per model and input signature, not at every fit/evaluate/
    # predict call: the preprocessor's graph takes about a second to trace.
    @tf.function(autograph=False, reduce_retracing=True)
    def _preprocessed(self, x):
        return self.preprocess(x)

    def _arrays(self, x, y=None) -> tuple:
        """``(x, y)`` with this task's tuples given as lists made tuples (a list is one array for tf.data)."""
        return x, y

    def _checked_labels(self, y):
        """``y`` as the loss may take it; a task with class labels refuses others (in the pipeline: an error when
        the batch is read)."""
        return y

    def _source(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """``fit``/``evaluate``/``predict``'s data as a batched dataset, not yet encoded."""
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("y, sample_weight: not taken with a tf.data.Dataset x (it yields them)")
            return x
        x, y = self._arrays(x, y)
        if y is not None and not isinstance(y, (dict, tuple)):
            self._checked_labels(_tensors(y))  # arrays: refused now, not when the pipeline reaches the row
        return _array_dataset(x, y, sample_weight, batch_size, shuffle)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """The encoded pipeline of ``fit``/``evaluate``/``predict``'s data."""
        return self._encode_dataset(self._source(x, y, sample_weight, batch_size, shuffle))

    # -- Keras' loops on the encoded pipeline ----------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        if validation_split and validation_data is None:
            if isinstance(x, tf.data.Dataset):
                raise ValueError("validation_split: not supported with a tf.data.Dataset; pass validation_data")
            (x, y, sample_weight), validation_data = _split_arrays(*self._arrays(x, y), sample_weight,
                                                                    validation_split)
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            vx, vy, vw = keras.utils.unpack_x_y_sample_weight(validation_data)
            validation_data = self._dataset(vx, vy, vw, validation_batch_size or batch_size)
        elif validation_data is not None:
            validation_data = self._dataset(validation_data)
        # shuffle=False: the pipeline shuffles arrays itself (Keras would warn that a dataset is not shuffled).
        with _end_of_data_expected(steps_per_epoch):
            return super().fit(self._dataset(x, y, sample_weight, batch_size, shuffle), epochs=epochs,
                               verbose=verbose, callbacks=callbacks, validation_data=validation_data, shuffle=False,
                               class_weight=class_weight, initial_epoch=initial_epoch,
                               steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                               validation_freq=validation_freq)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        with _end_of_data_expected(steps):
            return super().evaluate(self._dataset(x, y, sample_weight, batch_size), verbose=verbose, steps=steps,
                                    callbacks=callbacks, return_dict=return_dict, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        with _end_of_data_expected(steps):
            return super().predict(self._dataset(x, batch_size=batch_size), verbose=verbose, steps=steps,
                                   callbacks=callbacks)

    def export(self, export_dir: str, labels: Optional[list] = None, task: str = "custom", pair: bool = False) -> str:
        """Writes this model for TF Serving at ``<export_dir>/<version>/`` and returns that directory: the
        ``serving_default`` signature takes raw text (this preprocessor is inside the graph), ``serve_ids`` the
        encoded inputs, ``metadata`` what a client must know; the same writer and layout as ``python -m
        xlnet_tf.cli.export`` (docs/serving.md). The version is the optimizer's step count (a Unix timestamp before
        any training), or one above the newest version already there: none is overwritten.

        ``labels``: the class names of the ``label`` output (default "0", "1", ...); ``pair``: the signature also
        takes ``sentence2``; ``task``: recorded in the metadata."""
        from xlnet_tf import tasks
        from xlnet_tf.finetuning.serving import ServingInfo, write_serving_model

        pre = self.preprocessor
        kind = self._serving_kind()
        labels = self._serving_labels(labels)
        step = int(self.optimizer.iterations.numpy()) if getattr(self, "optimizer", None) is not None else 0
        info = ServingInfo(kind=kind, task=task, max_seq_length=pre.seq_length, lower_case=pre.lower_case,
                           labels=list(labels) if labels is not None else None, pair=pair, global_step=step,
                           max_qa_length=pre.max_qa_length, squad=self._serving_squad(),
                           family=tasks.for_kind(kind), **self._serving_long_document())
        return write_serving_model(self.network, export_dir, info, preprocessor=pre)

    def _serving_squad(self) -> dict:
        return {}  # SQuAD's window and beam settings (``ServingInfo.squad``); none for the other tasks

    def _serving_long_document(self) -> dict:
        return {}  # a long-document classifier's segment_length and mem_len (``ServingInfo``)

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

    ``fit``/``evaluate``/``predict`` inputs: sentences, a tf.string [B] tensor (or a Python list / numpy array of
    strings), or sentence pairs as a tuple ``(sentences, second_sentences)`` of two such [B] batches (``fit`` on a
    ``tf.data`` of ``((a, b), label)``); ``call`` takes what ``preprocessor(sentences[, second_sentences])``
    gives (``input_ids``, ``segment_ids``, ``padding_mask`` [B, S]). Output: ``logits`` float32 [B, num_labels]
    (``tf.nn.softmax`` for probabilities), or the score [B] for regression. Train with
    ``SparseCategoricalCrossentropy(from_logits=True)`` (classes) or ``MeanSquaredError`` (regression), as
    ``run_classifier.py`` does.
    """

    @classmethod
    def from_checkpoint(cls, path: str, num_labels: Optional[int] = None, seq_length: int = 128, *, config=None,
                        spiece_model=None, lower_case: Optional[bool] = None, regression: Optional[bool] = None,
                        task_scope: str = "task", summary_type: Optional[str] = None,
                        use_summ_proj: Optional[bool] = None, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None, new_head: bool = False,
                        num_segments: int = 1, mem_len: Optional[int] = None) -> "XLNetTextClassifier":
        """A classifier from a checkpoint (see ``load_task_weights``): a release directory, a native checkpoint's
        directory or prefix, a HuggingFace XLNet directory or ``hf://owner/name`` (``xlnet_tf.hf``).
        ``config`` (an ``xlnet_config.json`` path or an ``XLNetConfig``) and ``spiece_model``
        (a path or the proto's bytes) default to the files next to the checkpoint. ``task_scope`` names the head
        of a fine-tuned TF1 checkpoint (``model/classification_{task_scope}/...``, the original's task name);
        ``dropout``/``dropatt`` are the fine-tuning rates (run_classifier.py's defaults). A checkpoint fine-tuned
        for another task is refused unless ``new_head=True`` (its network, a new head). Left as None,
        ``num_labels``, ``regression``, ``summary_type``, ``use_summ_proj`` and ``lower_case`` are an HF
        classifier's (its config.json and tokenizer_config.json), else 2, False, "last", True, False.

        ``num_segments`` > 1: long documents (run_classifier.py's ``--long_document=memory``): a text's first
        ``num_segments * seq_length - 2`` tokens are read in segments of ``seq_length`` through ``mem_len`` hidden
        states of memory per layer (default: all earlier segments; docs/long_documents.md)."""
        source = _source(path)
        hf_head = _hf_head(source, ("XLNetClassifier",))
        if hf_head:
            num_labels = source.num_labels if num_labels is None else num_labels
            regression = source.regression if regression is None else regression
        preprocessor, config = _build_parts(source, config, spiece_model, seq_length * num_segments, lower_case,
                                            dropout, dropatt)
        network = XLNetClassifier(config, num_labels=2 if num_labels is None else num_labels, task_scope=task_scope,
                                  regression=bool(regression),
                                  summary_type=summary_type or hf_head.get("summary_type", "last"),
                                  use_summ_proj=hf_head.get("use_summ_proj", True) if use_summ_proj is None
                                  else use_summ_proj, dtype=dtype, num_segments=num_segments,
                                  mem_len=mem_len or (num_segments - 1) * seq_length)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, name=name)

    def preprocess(self, x) -> dict:
        """Sentences [B] (a tf.string tensor), a pair ``(sentences, second_sentences)``, or a dict with keys
        ``sentence`` (and ``sentence2``) -> ``input_ids``, ``segment_ids``, ``padding_mask`` [B, S]."""
        if isinstance(x, dict):
            if "sentence" not in x:
                raise ValueError(f"inputs: a dict of strings needs the key 'sentence' (and 'sentence2' for pairs), "
                                 f"got keys {sorted(x)}")
            return self.preprocessor(x["sentence"], x.get("sentence2"))
        if isinstance(x, (tuple, list)):
            if len(x) != 2:
                raise ValueError(f"inputs: expected sentences or (sentences, second_sentences), got a tuple of "
                                 f"{len(x)}")
            return self.preprocessor(*x)
        return self.preprocessor(x)

    def call(self, inputs, training=None):
        logits = self.network(self._token_ids(inputs), training=training)["logits"]
        return logits[:, 0] if self.network.regression else logits

    def _checked_labels(self, y):
        # Keras would truncate 1.7 to class 1 and train on it: a classifier knows its classes, so it refuses.
        if y is None or self.network.regression or isinstance(y, dict):
            return y
        y = tf.convert_to_tensor(y)
        value = tf.cast(y, tf.float64)
        valid = tf.reduce_all((value == tf.round(value)) & (value >= 0) & (value < self.network.num_labels))
        message = f"y: class labels must be whole numbers in [0, {self.network.num_labels})"
        if tf.executing_eagerly():  # arrays, checked before the pipeline is built
            if not bool(valid):
                raise ValueError(f"{message}, got {y.numpy().tolist()[:8]}")
            return y
        with tf.control_dependencies([tf.debugging.Assert(valid, [message, y], summarize=8)]):
            return tf.identity(y)

    def _serving_kind(self) -> str:
        return "regression" if self.network.regression else "classification"

    def _serving_long_document(self) -> dict:
        segments = self.network.num_segments
        if segments == 1:
            return {}
        return dict(segment_length=self.preprocessor.seq_length // segments, mem_len=self.network.mem_len)

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        if labels is None and not self.network.regression:
            return [str(i) for i in range(self.network.num_labels)]
        return labels


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextMultipleChoice(_TextTaskModel):
    """RACE-style multiple choice on raw strings: ``XLNetPreprocessor.multiple_choice`` + ``XLNetMultipleChoice``.

    ``fit``/``evaluate``/``predict`` inputs: ``(article, question, options)`` -- tf.string [B], [B], [B, C] -- as
    a tuple, or a dict with those keys; ``call`` takes what ``preprocessor.multiple_choice`` gives (each [B, C,
    S]). Output: ``logits`` float32 [B, C]; train with ``SparseCategoricalCrossentropy(from_logits=True)`` on the
    index of the right option.
    """

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_qa_length: Optional[int] = None,
                        config=None, spiece_model=None, lower_case: Optional[bool] = None,
                        summary_type: Optional[str] = None, use_summ_proj: Optional[bool] = None,
                        dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None,
                        new_head: bool = False) -> "XLNetTextMultipleChoice":
        """As ``XLNetTextClassifier.from_checkpoint``; ``max_qa_length`` as ``run_classifier.py``'s (the last
        question+option tokens kept)."""
        source = _source(path)
        hf_head = _hf_head(source, ("XLNetMultipleChoice",))
        preprocessor, config = _build_parts(source, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_qa_length=max_qa_length)
        network = XLNetMultipleChoice(config, summary_type=summary_type or hf_head.get("summary_type", "last"),
                                      use_summ_proj=hf_head.get("use_summ_proj", True) if use_summ_proj is None
                                      else use_summ_proj, dtype=dtype)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, name=name)

    def preprocess(self, x) -> dict:
        """``(article, question, options)`` -- [B], [B], [B, C] strings -- or a dict with those keys -> the three
        inputs, each [B, C, S]."""
        if isinstance(x, dict):
            return self.preprocessor.multiple_choice(x["article"], x["question"], x["options"])
        if not (isinstance(x, (tuple, list)) and len(x) == 3):
            raise ValueError(f"inputs: expected (article, question, options), got {type(x).__name__}")
        return self.preprocessor.multiple_choice(*x)

    def _arrays(self, x, y=None) -> tuple:
        return (tuple(x) if isinstance(x, list) and len(x) == 3 else x), y

    def call(self, inputs, training=None):
        return self.network(self._token_ids(inputs), training=training)["logits"]

    def _serving_kind(self) -> str:
        return "multiple_choice"


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextSquad(_TextTaskModel):
    """SQuAD (1.1 and 2.0) on raw strings: ``XLNetPreprocessor.squad`` + ``XLNetSquad``.

    ``predict((questions, contexts))`` -- tf.string [B] each, as a tuple (or a dict with keys ``question`` and
    ``context``) -- gives ``run_squad.py --do_predict``'s answer per question, chosen by
    ``squad_answers.best_answers``' rules (what the SavedModel of ``export`` serves), each [B]: ``text`` (bytes),
    ``start_char``/``end_char`` (int32, ``context[start_char:end_char] == text`` in characters, -1 without an
    answer span), ``null_odds`` (float32; above a threshold tuned on dev data the question counts as
    unanswerable, SQuAD 2.0). Each question's context is cut into W >= B windows of ``seq_length`` tokens
    (``doc_stride`` apart) in the tf.data pipeline; the network scores them in steps of ``window_batch_size``
    windows (``call``: the windows' ``input_ids``, ``segment_ids``, ``padding_mask``, ``p_mask``, ``cls_index``
    -> the head's outputs); the answer is then the best one over a question's windows, outside the network's
    step. ``predict`` on windows (a dict with ``input_ids``) gives the head's outputs per window.

    ``fit``/``evaluate`` take ``((questions, contexts), (answer_starts, answers, is_impossible))``: the answer's
    first character in the context int [B], the answer text tf.string [B] (or its end character, exclusive, int
    [B]) and is_impossible bool/int/float [B] (SQuAD 2.0; 0 for SQuAD 1.1); or windows already encoded: a dict
    with ``input_ids``, ``segment_ids``, ``padding_mask``, ``p_mask``, ``cls_index`` [W, ...] and the labels
    ``start_positions``, ``end_positions``, ``is_impossible`` [W] (in it, or as ``y`` in a dict). Each window
    gets the labels of ``squad_data``'s training features (``window_labels``); the windows of the questions'
    batches are regrouped into steps of ``window_batch_size`` windows (``run_squad.py``'s batch sizes count
    windows too), the last one filled up with windows of weight 0, and the loss is ``squad_loss``'s mean over a
    step's windows (weighted by a question's ``sample_weight`` if given), as ``run_squad.py`` trains; no ``loss``
    is passed to ``compile``. Under a multi-replica ``tf.distribute`` strategy every replica gets the same number
    of windows (``window_batch_size`` rounded up to a multiple of the replicas) and the step computes what one
    device computes. Unlike ``run_squad.py`` nothing is skipped: an answer that no window holds whole trains
    every window as "no answer". ``batch_size`` (arrays) counts the questions preprocessed together.
    """

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, max_answer_length: int = 64,
                 window_batch_size: int = DEFAULT_BATCH_SIZE, **kwargs):
        super().__init__(preprocessor, network, **kwargs)
        if not isinstance(max_answer_length, int) or max_answer_length < 1:
            raise ValueError(f"max_answer_length={max_answer_length!r}: must be a positive int")
        if not isinstance(window_batch_size, int) or window_batch_size < 1:
            raise ValueError(f"window_batch_size={window_batch_size!r}: must be a positive int")
        self.max_answer_length, self.window_batch_size = max_answer_length, window_batch_size
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_query_length: int = 64, doc_stride: int = 128,
                        max_answer_length: int = 64, start_n_top: int = 5, end_n_top: int = 5,
                        window_batch_size: int = DEFAULT_BATCH_SIZE, config=None, spiece_model=None,
                        lower_case: Optional[bool] = None, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None,
                        new_head: bool = False) -> "XLNetTextSquad":
        """As ``XLNetTextClassifier.from_checkpoint``; the window and beam settings are ``run_squad.py``'s flags
        (a fine-tuned checkpoint: the SQuAD head of ``run_squad.py``, of the original's TF1 layout or of HF's
        ``XLNetForQuestionAnswering``)."""
        source = _source(path)
        preprocessor, config = _build_parts(source, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_query_length=max_query_length, doc_stride=doc_stride)
        network = XLNetSquad(config, start_n_top=start_n_top, end_n_top=end_n_top, dtype=dtype)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, max_answer_length=max_answer_length, window_batch_size=window_batch_size,
                   name=name)

    @staticmethod
    def _texts(inputs) -> tuple:
        """(questions, contexts) [B] each from a tuple/list or a dict of the two."""
        if isinstance(inputs, dict):
            return inputs["question"], inputs["context"]
        if not (isinstance(inputs, (tuple, list)) and len(inputs) == 2):
            raise ValueError(f"inputs: expected (questions, contexts), got {type(inputs).__name__}")
        return tuple(inputs)

    def _arrays(self, x, y=None) -> tuple:
        if isinstance(x, list) and len(x) == 2 and not isinstance(x[0], (str, bytes)):
            x = tuple(x)
        if isinstance(y, list) and len(y) == 3 and not isinstance(y[0], (str, bytes, int, float)):
            y = tuple(y)
        return x, y

    def call(self, inputs, training=None):
        return self.network(self._token_ids(inputs), training=training)

    # -- the windows ------------------------------------------------------------------------------------------
    def preprocess(self, x) -> dict:
        """``(questions, contexts)`` [B] -> their windows (``XLNetPreprocessor.squad``), as ``best_answers`` makes
        them: invalid UTF-8 replaced, no window for a question ``run_squad.py`` skips."""
        question, context = self._texts(x)
        question, context, skipped = answerable_inputs(_strings(question), _strings(context))
        return self.preprocessor.squad(question, tf.where(skipped, "", context))

    def training_windows(self, inputs, labels) -> dict:
        """The windows of ``XLNetPreprocessor.squad`` for ``inputs`` (questions, contexts [B]) with the labels of
        ``labels`` = (answer_starts int [B], answers: text tf.string [B] or end characters (exclusive) int [B],
        is_impossible [B]) per window (``window_labels``): what the train step feeds ``XLNetSquad``."""
        question, context = self._texts(inputs)
        if isinstance(labels, dict):
            labels = tuple(labels[k] for k in ("answer_start", "answer", "is_impossible"))
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

    @tf.function(autograph=False, reduce_retracing=True)  # traced once (see _preprocessed)
    def _labelled_windows(self, x, y, sample_weight) -> dict:
        """One batch of ``fit``/``evaluate``'s data -> its windows: the network inputs, labels and a weight each."""
        if _is_encoded(x):
            windows = dict(x)
            if y is not None:
                windows.update(y if isinstance(y, dict) else dict(zip(LABEL_KEYS, y)))
            missing = [k for k in INFERENCE_KEYS + LABEL_KEYS if k not in windows]
            if missing:
                raise ValueError(f"inputs: encoded SQuAD windows lack {', '.join(missing)}")
            weight = tf.ones(tf.shape(windows["input_ids"])[:1]) if sample_weight is None else sample_weight
        else:
            windows = self.training_windows(x, y)
            weight = tf.ones(tf.shape(windows["example_index"])) if sample_weight is None else tf.gather(
                tf.reshape(sample_weight, [-1]), windows["example_index"])
        features = {k: windows[k] for k in INFERENCE_KEYS + LABEL_KEYS}
        return dict(features, weight=tf.cast(weight, tf.float32))

    def _steps(self, windows: tf.data.Dataset, labelled: bool) -> tf.data.Dataset:
        """Windows regrouped into steps of ``window_batch_size`` (rounded up to a multiple of the replicas, so that
        each replica gets the same shapes and the gradients' all-reduce agrees), the last step filled up with
        all-zero windows: weight 0 in training, ``example_index`` -1 in prediction. In training an element is
        ``(inputs, labels, weights)`` with the weights summing to 1 over the step (across the replicas): each
        replica's loss is its part of the step's mean, and the summed gradients are one device's."""
        replicas = self.distribute_strategy.num_replicas_in_sync
        size = -(-self.window_batch_size // replicas) * replicas

        def fill(name, values):
            missing = size - tf.shape(values)[0]
            padding = tf.fill(tf.concat([[missing], tf.shape(values)[1:]], 0),
                              tf.constant(-1 if name == "example_index" else 0, values.dtype))
            values = tf.concat([values, padding], axis=0)
            values.set_shape([size] + values.shape[1:].as_list())
            return values

        def step(batch):
            batch = {k: fill(k, v) for k, v in batch.items()}
            if not labelled:
                return batch
            weight = batch.pop("weight")
            labels = {k: batch.pop(k) for k in LABEL_KEYS}
            return batch, labels, tf.math.divide_no_nan(weight, tf.reduce_sum(weight))

        return windows.unbatch().batch(size).map(step, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
            tf.data.AUTOTUNE)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """``fit``/``evaluate``'s data as steps of labelled windows (``_steps``)."""
        dataset = self._source(x, y, sample_weight, batch_size, shuffle)
        is_tuple = isinstance(dataset.element_spec, tuple)

        def windows(*element):
            return self._labelled_windows(*keras.utils.unpack_x_y_sample_weight(
                element if is_tuple else element[0]))

        return self._steps(dataset.map(windows, num_parallel_calls=tf.data.AUTOTUNE), labelled=True)

    # -- training: the teacher-forced head and squad_loss, weighted per window ---------------------------------
    @property
    def metrics(self):
        return [self.loss_tracker]

    def _loss(self, x, y, sample_weight, training: bool) -> tuple:
        """``(loss, weight)`` of this replica's windows: the sum of their losses times their weights (its part of
        the step's mean), and the sum of their weights (of the step's 1)."""
        features = dict(x, **y)
        losses = squad_window_losses(features, self.network(features, training=training))
        if sample_weight is None:  # windows not from _steps (train_on_batch): their mean
            sample_weight = tf.fill(tf.shape(losses), 1.0 / tf.cast(tf.size(losses), losses.dtype))
        weight = tf.cast(sample_weight, losses.dtype)
        return tf.reduce_sum(losses * weight), tf.reduce_sum(weight)

    def train_step(self, data):
        # Keras' train step calls the model on x and a compiled loss on its output; SQuAD's loss needs the
        # teacher-forced head (the labelled start, per window) instead, so the step is written out here. The
        # weights already divide by the whole step's windows: the replicas' gradients are summed, not averaged.
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss, weight = self._loss(x, y, sample_weight, training=True)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        self._track(loss, weight)
        return self.get_metrics_result()

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        self._track(*self._loss(x, y, sample_weight, training=False))
        return self.get_metrics_result()

    def _track(self, loss, weight):
        # The loss metric sums totals and counts over the replicas: each adds its windows' mean with their share
        # of the step's weight, so the metric is the mean of the steps' losses with any number of replicas. (The
        # count must depend on the data: Keras runs the step function once more at the end of a dataset of
        # unknown length, where only ops independent of the failing get_next execute.)
        self.loss_tracker.update_state(tf.math.divide_no_nan(loss, weight), sample_weight=weight)

    # -- prediction: the network per window in Keras' loop, the answers from its outputs ---------------------
    def predict_step(self, data):
        x = keras.utils.unpack_x_y_sample_weight(data)[0]
        outputs = dict(self(x, training=False))
        # The windows' positions and characters pass through, for the answers after the loop.
        outputs.update({k: x[k] for k in ANSWER_KEYS if k in x})
        return outputs

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        # Keras' own predict below (not _TextTaskModel's, which preprocesses): its data are windows already.
        if _is_encoded(_element_x(x.element_spec) if isinstance(x, tf.data.Dataset) else x):
            return keras.Model.predict(self, x, batch_size=batch_size, verbose=verbose, steps=steps,
                                       callbacks=callbacks)
        question, context = self._question_texts(x)
        if int(tf.size(question)) == 0:
            raise ValueError("x: no questions (an empty batch)")
        rows = tf.data.Dataset.from_tensor_slices((tf.range(tf.size(question)), question, context))

        encoded = rows.batch(batch_size or DEFAULT_BATCH_SIZE).map(self._answer_windows,
                                                                   num_parallel_calls=tf.data.AUTOTUNE)
        with _end_of_data_expected(steps):
            outputs = keras.Model.predict(self, self._steps(encoded, labelled=False), verbose=verbose, steps=steps,
                                          callbacks=callbacks)
        real = outputs["example_index"] >= 0  # not a window filling up the last step
        outputs = {k: v[real] for k, v in outputs.items()}
        _, context, skipped = answerable_inputs(question, context)
        answers = answers_from_windows(outputs, outputs, context, skipped, self.network.start_n_top,
                                       self.network.end_n_top, self.max_answer_length)
        return {k: v.numpy() for k, v in answers.items()}

    @tf.function(autograph=False, reduce_retracing=True)  # traced once (see _preprocessed)
    def _answer_windows(self, index, question, context) -> dict:
        """``predict``'s windows of the questions [B] at rows ``index`` [B] of all its inputs."""
        windows = self.preprocess((question, context))
        windows["example_index"] = tf.gather(index, windows["example_index"])  # the row in all of x
        windows["token_is_max_context"] = tf.cast(windows["token_is_max_context"], tf.int32)
        return {k: windows[k] for k in INFERENCE_KEYS + ANSWER_KEYS}

    def _question_texts(self, x) -> tuple:
        """``predict``'s questions and contexts, all of them: tf.string [N] each (a dataset of batches of
        ``(questions, contexts)``, ``((questions, contexts),)`` or with labels, is read once)."""
        if not isinstance(x, tf.data.Dataset):
            question, context = self._texts(self._arrays(x)[0])
            return _strings(question), _strings(context)
        spec = x.element_spec
        # (questions, contexts) as the whole element: Keras' rule would read (x, y), but one string tensor cannot
        # be SQuAD's x, so the pair can only be the two texts.
        pair = isinstance(spec, tuple) and len(spec) == 2 and all(
            isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec)
        parts = [self._texts(element if pair else _element_x(element)) for element in x]
        if not parts:
            raise ValueError("x: the dataset is empty")
        return tuple(tf.concat([tf.reshape(_strings(p[i]), [-1]) for p in parts], axis=0) for i in (0, 1))

    def export(self, export_dir: str, task: str = "squad") -> str:
        """As ``XLNetTextClassifier.export``: the SQuAD layout (``serving_default`` takes ``question`` and
        ``context`` and answers as ``predict``; ``serve_ids`` gives the head's beam), as ``run_squad.py
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
        return dict(super().get_config(), max_answer_length=self.max_answer_length,
                    window_batch_size=self.window_batch_size)


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
