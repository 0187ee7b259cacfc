"""Fine-tuning models on raw strings, the Keras way: ``compile``/``fit``/``evaluate``/``predict`` on text.

The families' text models (``XLNetTextClassifier``, ``XLNetTextSquad``, ...) hold an ``XLNetPreprocessor`` (strings
-> the fine-tuning layout, TensorFlow ops) and the very task network ``run_classifier.py`` and ``run_squad.py`` train
(the family's head, e.g. ``XLNetClassifier``, kept as ``.network``), so the heads, the input layout and the
checkpoints are shared with the entry points. As in keras-hub, ``call`` takes token ids and
``fit``/``evaluate``/``predict`` on strings run the preprocessor in the tf.data pipeline; ``export`` joins the two in
one serving graph. ``from_checkpoint`` reads a release directory (``xlnet_config.json`` + ``xlnet_model.ckpt`` +
``spiece.model``), a directory or prefix of a native checkpoint (``xlnet-convert-checkpoint``, ``run_pretrain.py``,
``run_classifier.py``), pretrained (the head starts fresh) or fine-tuned (the head is loaded too).

The text model base lives here; a family package holds its own text model in a module of its own, imported only when
used (the family's ``__init__`` is imported while flags are checked, before TensorFlow loads):
``XLNetTextClassifier``, ``XLNetTextMultipleChoice``, ``XLNetTextSquad`` and ``XLNetTextTagger`` are in
``xlnet_tf.tasks.{classification,multiple_choice,squad,tagging}.<family>_text_model`` (named by the family's
``text_model``). A family needs no text model; one that wants the Keras API on strings subclasses ``TextTaskModel``
with its ``preprocess`` and ``call``. How Keras-style inputs become tf.data pipelines is ``tasks.text_data``'s.

Example::

    model = xlnet_tf.XLNetTextClassifier.from_checkpoint("xlnet_cased_L-12_H-768_A-12", num_labels=2,
                                                         seq_length=128)
    model.compile(keras.optimizers.Adam(2e-5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32), epochs=2)
    probabilities = tf.nn.softmax(model.predict(["A gripping film.", "Dull."]))
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import keras
import tensorflow as tf

from xlnet_tf import io_utils, tasks
from xlnet_tf.checkpoint import config_next_to
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import InputError
from xlnet_tf.hf import HFCheckpoint, is_hf_dir
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.text_data import (DEFAULT_BATCH_SIZE, array_dataset, array_parts, as_tensors, element_x,
                                      end_of_data_expected, is_encoded, num_rows, read_each_epoch, read_once,
                                      source_kind, split_arrays, streamed_dataset, yields_batches)


def checkpoint_source(path):
    """An ``hf.HFCheckpoint`` for a HuggingFace directory or ``hf://`` name, else ``path``."""
    if not is_hf_dir(path):
        return path
    tasks.families()  # every family's head is known: another family's is refused as not this task's, not unknown
    return HFCheckpoint(path)


def hf_summary_settings(source, heads: tuple) -> dict:
    """The summary settings of an HF classification or multiple-choice checkpoint (else nothing): its weights
    compute them, so they are not a free choice."""
    return source.summary() if isinstance(source, HFCheckpoint) and source.head in heads else {}


def _locate(path: str, config, spiece_model) -> tuple:
    """(XLNetConfig or its path, SentencePiece model bytes or path) from the arguments, else from the checkpoint's
    directory (a release or ``xlnet-convert-checkpoint`` directory holds ``xlnet_config.json`` and
    ``spiece.model``); a ValueError names the argument that is missing."""
    if (config is None or spiece_model is None) and io_utils.beside(path, "finetune_settings.json"):
        raise InputError(f"{path}: a fine-tuning run's model_dir: xlnet_tf.load_text_model({str(path)!r}) rebuilds "
                         "its model as the run trained it; or pass config= and spiece_model=")
    if config is None:
        config = config_next_to(path)
    if spiece_model is None:
        spiece_model = io_utils.beside(path, "spiece.model")
        if spiece_model is None:
            raise InputError(f"spiece_model: {path} has no spiece.model next to it; pass spiece_model= (a path or "
                             "the model's bytes)")
    return config, spiece_model


def build_parts(path, config, spiece_model, seq_length, lower_case, dropout, dropatt, **preprocessing):
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


class TextTaskModel(keras.Model):
    """A task network on token ids with the ``XLNetPreprocessor`` that makes them from strings, keras-hub's way:
    ``call`` takes the preprocessor's output (token ids), and ``fit``/``evaluate``/``predict`` on raw strings run
    the preprocessor in the tf.data pipeline (``dataset.map`` on batches, on the host) and hand the encoded
    batches to Keras; Keras' ``*_on_batch`` (the batch in one step), and ``evaluate``/``predict`` on rows of one
    batch, encode them with the same function without a pipeline (whose start is most of a call on a few rows).
    Token ids (a dict with ``input_ids``) are taken as they are. The step functions hold the network only, so
    they compile with ``jit_compile=True`` (XLA) and distribute like any Keras model; exports join preprocessor and
    network in one graph (``finetuning/serving.py``'s ``ServingModule``).

    Inputs of ``fit``/``evaluate``/``predict``: Python lists, numpy arrays or tf.string tensors (tuples or dicts
    of them, per task), batched ``batch_size`` rows at a time (default 32; ``shuffle`` and ``validation_split``
    as Keras does for arrays), or a batched ``tf.data.Dataset``, a Python generator or a ``keras.utils.PyDataset``
    of ``x``, ``(x, y)`` or ``(x, y, sample_weight)``.
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

    # What the fine-tuning run this model was loaded from records (``load_text_model``): its export keeps the
    # run's task, class names, pair and step, as ``python -m xlnet_tf.cli.export`` of the run writes them.
    run_info = None
    _export_task = "custom"  # the task an export records when it is not loaded from a run and none is given

    @classmethod
    def from_run(cls, network: keras.Model, info, preprocessor: XLNetPreprocessor) -> "TextTaskModel":
        """The text model of a fine-tuning run's restored ``network`` with the run's ``preprocessor`` and
        ``ServingInfo`` (what its export records): ``text_runs.load_text_model``'s last step."""
        return cls(preprocessor, network)

    # -- inputs ----------------------------------------------------------------------------------------------
    def preprocess(self, x) -> dict:
        """Raw strings (this task's ``x``: a batch) -> the network's inputs, in TensorFlow ops (tf.data)."""
        raise NotImplementedError(f"{type(self).__name__}.preprocess: a text task model says how its strings "
                                  "become the network's inputs")

    def _token_ids(self, inputs) -> dict:
        if not is_encoded(inputs):
            raise ValueError(f"inputs: {type(self).__name__} takes token ids in call (the dict of its "
                             "preprocessor: input_ids, segment_ids, padding_mask), got "
                             f"{type(inputs).__name__}; raw strings go to fit/evaluate/predict, or to "
                             "model(model.preprocessor(...))")
        return inputs

    def _encode_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` (batches of ``x``, ``(x, y)`` or ``(x, y, sample_weight)``) with ``x`` encoded (raw strings
        through ``preprocess``, on the host, in parallel, in order); token ids pass as they are."""
        spec = dataset.element_spec
        if is_encoded(element_x(spec)):
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

    def _streamed_batch(self, batch):
        """A batch of a generator or PyDataset (``x``, ``(x, y)``, ...) made arrays as ``_arrays`` makes ``fit``'s
        (tagging joins its rows' word lists); here, the batch as it is."""
        return batch

    def _checked_labels(self, y):
        """``y`` as the loss may take it; a task with class labels refuses others (in the pipeline: an error when
        the batch is read)."""
        return y

    def _source(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """``fit``/``evaluate``/``predict``'s data as a batched dataset, not yet encoded."""
        if yields_batches(x):
            kind = source_kind(x)
            if y is not None or sample_weight is not None:
                raise ValueError(f"y, sample_weight: not taken with a {kind} x (it yields them)")
            x = streamed_dataset(x, self._streamed_batch)
            if any(spec.shape.rank == 0 for spec in tf.nest.flatten(element_x(x.element_spec))):
                raise ValueError(f"x: a {kind} of single examples; these models take batches, as Keras does "
                                 "(tf.data: dataset.batch(n))")
            return x
        x, y = self._arrays(x, y)
        if y is not None and not isinstance(y, (dict, tuple)):
            self._checked_labels(as_tensors(y))  # arrays: refused now, not when the pipeline reaches the row
        return array_dataset(x, y, sample_weight, batch_size, shuffle)

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False) -> tf.data.Dataset:
        """The encoded pipeline of ``fit``/``evaluate``/``predict``'s data."""
        return self._encode_dataset(self._source(x, y, sample_weight, batch_size, shuffle))

    # -- Keras' loops on the encoded pipeline ----------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        validation_data = streamed_dataset(validation_data, self._streamed_batch)
        if validation_split and validation_data is None:
            if yields_batches(x):
                raise ValueError("validation_split: not supported with a dataset or generator x; pass validation_data")
            (x, y, sample_weight), validation_data = split_arrays(*self._arrays(x, y), sample_weight,
                                                                  validation_split)
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            vx, vy, vw = keras.utils.unpack_x_y_sample_weight(validation_data)
            validation_data = self._dataset(vx, vy, vw, validation_batch_size or batch_size)
        elif validation_data is not None:
            validation_data = self._dataset(validation_data)
        if validation_data is not None:  # each epoch's validation is an evaluate: a new iterator, read once
            validation_data, validation_steps = read_once(validation_data, validation_steps)
        train, steps = read_each_epoch(self._dataset(x, y, sample_weight, batch_size, shuffle), steps_per_epoch,
                                       self.steps_per_execution)
        self._build_state(train.element_spec)
        # shuffle=False: the pipeline shuffles arrays itself (Keras would warn that a dataset is not shuffled).
        with end_of_data_expected(steps_per_epoch):
            return super().fit(train, epochs=epochs, verbose=verbose, callbacks=callbacks,
                               validation_data=validation_data, shuffle=False, class_weight=class_weight,
                               initial_epoch=initial_epoch, steps_per_epoch=steps, validation_steps=validation_steps,
                               validation_freq=validation_freq)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        dataset, read_steps = self._loop_data(x, y, sample_weight, batch_size, steps)
        self._build_state(dataset.element_spec)
        with end_of_data_expected(steps):
            return super().evaluate(dataset, verbose=verbose, steps=read_steps, callbacks=callbacks,
                                    return_dict=return_dict, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        dataset, read_steps = self._loop_data(x, None, None, batch_size, steps)
        with end_of_data_expected(steps):
            return super().predict(dataset, verbose=verbose, steps=read_steps, callbacks=callbacks)

    def _build_state(self, data) -> None:
        """Creates the optimizer's and the compiled loss's and metrics' variables before Keras traces a step, from
        ``data`` (a dataset's element_spec or a batch: ``x``, ``(x, y)`` or ``(x, y, sample_weight)``). Keras does
        so under a distribution strategy only; without one it leaves them to the step's first trace, and
        TensorFlow traces a function that created variables a second time: the first ``fit``, ``evaluate`` or
        ``*_on_batch`` of a model traced its step twice."""
        if self._distribute_strategy is None:  # with one, Keras builds them itself from a batch it reads
            self._symbolic_build(data_batch=data)

    def _loop_data(self, x, y, sample_weight, batch_size, steps) -> tuple:
        """evaluate's and predict's ``(dataset, steps)`` (see ``read_once``): rows of one batch encoded without a
        pipeline (``_encoded_batch``), others through it."""
        if steps is None and not yields_batches(x) and not is_encoded(x) and self._encodes_batches():
            x, y, sample_weight = array_parts(*self._arrays(x, y), sample_weight)  # tensors once, for either path
            if num_rows(x) <= (batch_size or DEFAULT_BATCH_SIZE):
                encoded = keras.utils.pack_x_y_sample_weight(*self._encoded_batch(x, y, sample_weight))
                return read_once(tf.data.Dataset.from_tensors(encoded), steps)
        return read_once(self._dataset(x, y, sample_weight, batch_size), steps)

    # Keras' one-batch steps take raw strings too (keras-hub's task models do): the batch encoded as fit's or
    # predict's pipeline encodes it (through the pipeline only where its rows make windows), all in one step.
    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        x, y, sample_weight = self._one_step(x, y, sample_weight)
        self._build_state(keras.utils.pack_x_y_sample_weight(x, y, sample_weight))
        return super().train_on_batch(x, y, sample_weight, class_weight=class_weight, return_dict=return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        x, y, sample_weight = self._one_step(x, y, sample_weight)
        self._build_state(keras.utils.pack_x_y_sample_weight(x, y, sample_weight))
        return super().test_on_batch(x, y, sample_weight, return_dict=return_dict)

    def predict_on_batch(self, x):
        if yields_batches(x):
            raise ValueError(f"x: a {source_kind(x)} goes to predict; predict_on_batch takes one batch")
        if is_encoded(x):
            return super().predict_on_batch(x)
        if not self._encodes_batches():
            return self.predict(x, batch_size=self._batch_rows(x), verbose=0)
        return super().predict_on_batch(self._encoded_batch(x)[0])

    def _batch_rows(self, x) -> int:
        return num_rows(as_tensors(self._arrays(x)[0]))

    def _one_step(self, x, y, sample_weight) -> tuple:
        """``*_on_batch``'s batch as the one step fit's pipeline makes of it; token ids as they are."""
        if is_encoded(x):
            return x, y, sample_weight
        if yields_batches(x):
            raise ValueError(f"x: a {source_kind(x)} goes to fit/evaluate; train_on_batch/test_on_batch take one "
                             "batch")
        if self._encodes_batches():
            return self._encoded_batch(x, y, sample_weight)
        rows = self._batch_rows(x)
        steps = list(self._dataset(x, y, sample_weight, batch_size=rows))
        if len(steps) != 1:  # SQuAD and tagging: a long text is several windows
            raise ValueError(f"x: these {rows} rows make {len(steps)} steps of windows; give train_on_batch/"
                             "test_on_batch fewer rows, or use fit/evaluate")
        return keras.utils.unpack_x_y_sample_weight(steps[0])

    def _encodes_batches(self) -> bool:
        """Whether this model's pipeline makes one step of each batch of rows (``_encoded_batch`` may stand in for
        it): not for a subclass with its own ``_dataset`` or ``_encode_dataset`` (SQuAD's and tagging's windows)."""
        return (type(self)._dataset is TextTaskModel._dataset
                and type(self)._encode_dataset is TextTaskModel._encode_dataset)

    def _encoded_batch(self, x, y=None, sample_weight=None) -> tuple:
        """Arrays of one batch as ``(x, y, sample_weight)``, ``x`` encoded and ``y`` checked as the pipeline does
        it to each batch (``_encode_dataset``, the same traced function), but without a tf.data pipeline: each of
        its iterators instantiates the pipeline's functions anew (the preprocessor's graph), which took most of a
        call on a few strings. Only where ``_encodes_batches``."""
        x, y, sample_weight = array_parts(*self._arrays(x, y), sample_weight)
        return self._preprocessed(x), self._checked_labels(y), sample_weight

    def export(self, export_dir: str, labels: Optional[list] = None, task: Optional[str] = None,
               pair: Optional[bool] = None, *, format: str = "tf_saved_model") -> str:
        """Writes this model for TF Serving at ``<export_dir>/<version>/`` and returns that directory: the
        ``serving_default`` signature takes raw text (this preprocessor is inside the graph), ``serve_ids`` the
        encoded inputs, ``metadata`` what a client must know; the same writer and layout as ``python -m
        xlnet_tf.cli.export`` (docs/serving.md). The version is the step count (a run's checkpoint step, plus the
        optimizer's steps since; a Unix timestamp before any training), or one above the newest version already
        there: none is overwritten.

        ``labels``: the class names of the ``label`` output (default: the run's, else the model's ``labels``,
        else "0", "1", ...); ``pair``: the signature also takes ``sentence2`` (default: as the run was fine-tuned,
        else False; a run is not exported otherwise); ``task``: recorded in the metadata (default: the run's, else
        the model's kind: "custom" for a classifier). ``format``: Keras' argument; raw text is served by a
        ``tf_saved_model`` only (other formats: the network's own ``export``, on token ids). A base path already
        serving a model with other inputs or classes takes no version of this one
        (``serving.check_same_interface``)."""
        from xlnet_tf.finetuning.serving import ServingInfo, write_serving_model

        if format != "tf_saved_model":
            raise ValueError(f"format={format!r}: a text model exports a TF SavedModel that takes raw text "
                             "(format='tf_saved_model'); other formats take token ids: "
                             f"model.network.export(path, format={format!r})")
        pre = self.preprocessor
        kind = self._serving_kind()
        run = self.run_info
        if run is not None and pair is not None and bool(pair) != run.pair:
            raise ValueError(f"pair={pair}: this model was fine-tuned on "
                             + ("sentence pairs" if run.pair else "single sentences")
                             + f" (task {run.task}); its export takes what it was trained on (leave pair unset)")
        pair = run.pair if run is not None else bool(pair)
        task = task or (run.task if run is not None else self._export_task)
        labels = self._serving_labels(labels)
        step = int(self.optimizer.iterations.numpy()) if getattr(self, "optimizer", None) is not None else 0
        step += run.global_step if run is not None else 0
        info = ServingInfo(kind=kind, task=task, max_seq_length=pre.seq_length, lower_case=pre.lower_case,
                           labels=list(labels) if labels is not None else None, pair=pair, global_step=step,
                           extras=self._serving_extras(), family=tasks.for_kind(kind))
        return write_serving_model(self.network, export_dir, info, preprocessor=pre)

    def _serving_extras(self) -> dict:
        """The family's ``ServingInfo.extras`` of this model's export, as its task's ``serving_info`` records them."""
        return {}

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        """The class names of the export's ``label`` output, where it has one (a classifier's)."""
        if labels is not None:
            raise ValueError(f"labels: a {self._serving_kind()} export has no class names to give")
        return None

    def get_config(self):
        return dict(super().get_config(), preprocessor=keras.saving.serialize_keras_object(self.preprocessor),
                    network=keras.saving.serialize_keras_object(self.network),
                    run_info=None if self.run_info is None else dataclasses.asdict(self.run_info))

    @classmethod
    def from_config(cls, config):
        from xlnet_tf.finetuning.serving import ServingInfo
        from xlnet_tf.tasks.base import with_extras

        config = dict(config)
        for key in ("preprocessor", "network"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        run_info = config.pop("run_info", None)  # None too in a file written before it was kept
        model = cls(**config)
        if run_info is not None:
            model.run_info = ServingInfo(**with_extras(run_info))
        return model
