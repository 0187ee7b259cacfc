"""The models of batch prediction: what an engine needs of one (``Predictor``), a restored Keras task model
(``KerasPredictor``, ``run_classifier.py --do_predict --predict_input_glob``) and a SavedModel export
(``SavedModelPredictor``: ``python -m xlnet_tf.cli.predict``, also on Beam). Which signature ``auto`` picks and how
an export's task family is found: the module docstring of ``xlnet_tf.batch.prediction``."""

from __future__ import annotations

import abc
import hashlib
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils, tasks
from xlnet_tf.batch import DEFAULT_MAX_SEQ_LENGTH
from xlnet_tf.errors import InputError, MissingInputError
from xlnet_tf.tasks.base import MetadataInfo
from xlnet_tf.tokenization import file_sha256


class Predictor(abc.ABC):
    """What the engine needs of a model. ``family``: its task family (``xlnet_tf.tasks``), which formats the rows;
    ``meta``: what the export records for clients (``metadata.json``). ``takes_text``: batches carry the raw strings
    (``text_a``, ``text_b`` [B]), else encoded ids (``input_ids``, ``segment_ids`` int32 [B, L], ``padding_mask``
    float32 [B, L]); ``__call__(batch)`` returns the family's ``batch.outputs`` (numpy). ``identity`` names the
    model by its content and the settings its predictions depend on, ``described`` what it predicts (the family's
    ``batch.identity``; a resumed job must use the same); ``source`` where it was read (for people, not compared:
    the same model may be named by several paths, and one path name another model later)."""
    family = None
    meta: dict = {}
    takes_text: bool = False
    pair: Optional[bool] = None  # the model reads sentence pairs (None: unknown)
    tokenizer = None
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    identity: dict = {}
    source: dict = {}
    described: dict = {}

    def _describe(self, output_names) -> None:
        self.described = self.family.batch.identity(self.meta, output_names)

    @abc.abstractmethod
    def __call__(self, batch: dict) -> dict:
        """The predictions of one batch (see the class docstring)."""


class KerasPredictor(Predictor):
    """A restored task model (the checkpoint path; the fast kernels apply) of ``family``, fed token ids; ``meta``:
    the ``ServingInfo`` (as a dict) an export of it would record.

    It runs as ``--do_predict`` over ``--eval_split`` does (``trainer.predict``): the model's inference step in
    ``strategy.run`` (default: the current strategy), each local replica on its slice of a batch of static shape
    [``batch_size``, L] (``batch_size`` rounded up to a multiple of them), compiled with XLA when
    ``jit_compile``. A shorter batch (a shard's last) is padded with rows of zeros to that shape and the padded
    rows' outputs are dropped, so a shard of any length compiles once. The family's ``batch.outputs`` is applied
    on the host to the model's outputs (classification: its logits)."""

    def __init__(self, model, family, meta: dict, tokenizer, max_seq_length: int, identity: dict,
                 strategy: Optional[tf.distribute.Strategy] = None, batch_size: int = 128,
                 jit_compile: bool = False, source: Optional[dict] = None):
        from xlnet_tf.finetuning.trainer import make_predict_step
        from xlnet_tf.training.xla import check_jit_compile

        self.family, self.meta, self.tokenizer, self.max_seq_length = family, meta, tokenizer, max_seq_length
        self.identity, self.source, self.pair = identity, source or {}, meta.get("pair")
        replicas = 1  # the default strategy (one device) has no worker devices to list or check
        if strategy is not None:
            check_jit_compile(strategy, jit_compile)
            replicas = len(strategy.extended.worker_devices)
        strategy = strategy or tf.distribute.get_strategy()
        self.batch_size = -(-batch_size // replicas) * replicas
        per_replica = self.batch_size // replicas
        spec = family.serving.ids_spec(MetadataInfo(meta))
        names = list(spec)
        step = make_predict_step(model, (), jit_compile)

        @tf.function(input_signature=[tf.TensorSpec([self.batch_size, max_seq_length], s.dtype)
                                      for s in spec.values()], autograph=False)
        def forward(*features):
            features = dict(zip(names, features))

            def replica_slice(context):
                # this worker's replicas (their ids follow one another): every worker predicts the whole batch
                start = context.replica_id_in_sync_group % replicas * per_replica
                return {k: v[start:start + per_replica] for k, v in features.items()}

            outputs = strategy.run(step, args=(strategy.experimental_distribute_values_from_function(replica_slice),))
            return {k: tf.concat(strategy.experimental_local_results(v), 0) for k, v in outputs.items()}

        self._forward, self._names = forward, names
        self._describe(())

    def __call__(self, batch):
        rows = int(batch[self._names[0]].shape[0])
        if rows > self.batch_size:
            raise ValueError(f"a batch of {rows} rows for a predictor of batches of {self.batch_size}")
        padded = [tf.pad(batch[k], [[0, self.batch_size - rows], [0, 0]]) for k in self._names]
        outputs = self._forward(*padded)
        return self.family.batch.outputs({k: v[:rows] for k, v in outputs.items()}, self.meta)


def content_sha256(paths: Sequence[str]) -> str:
    """One SHA-256 of the files' contents, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def checkpoint_sha256(checkpoint: str, model) -> str:
    """What tells a checkpoint's weights from others under the same name (a run trained again): its ``.index``,
    which holds every tensor's checksum; for an HF directory (no index), the weights restored into ``model``."""
    from xlnet_tf.hf.hub import is_hub

    if not is_hub(checkpoint) and tf.io.gfile.exists(checkpoint + ".index"):
        return content_sha256([checkpoint + ".index"])
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.asarray(weight).tobytes())
    return digest.hexdigest()


def resolve_saved_model(path: str) -> tuple:
    """(SavedModel directory, version or None): ``path`` itself if it holds ``saved_model.pb`` (its version if it
    is a numbered directory), else its highest numbered version directory that does (TF Serving's
    ``<base>/<version>/``). A version directory and its base path name the same model the same way (a job
    resumed with either)."""
    path = path.rstrip("/") or path
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        name = os.path.basename(path)
        return path, int(name) if name.isdigit() else None
    if not tf.io.gfile.isdir(path):
        raise MissingInputError(f"--saved_model={path}: no such directory")
    versions = sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(path) if name.rstrip("/").isdigit()
                      and tf.io.gfile.exists(os.path.join(path, name.rstrip("/"), "saved_model.pb")))
    if not versions:
        raise MissingInputError(f"--saved_model={path}: no saved_model.pb there nor in a numbered version "
                                "directory (<base>/<version>/saved_model.pb)")
    return os.path.join(path, str(versions[-1])), versions[-1]


class SavedModelPredictor(Predictor):
    """A SavedModel's signature (see the module docstring for which one ``auto`` picks)."""

    def __init__(self, path: str, signature: str = "auto", spiece_model_file: Optional[str] = None,
                 max_seq_length: Optional[int] = None, uncased: Optional[bool] = None):
        import tensorflow_text  # noqa: F401  (registers the text ops that raw-text signatures hold)

        self.path, self.version = resolve_saved_model(path)
        try:
            loaded = tf.saved_model.load(self.path)
        except (OSError, tf.errors.OpError) as e:  # a truncated or foreign saved_model.pb, missing variables
            message = " ".join(str(e).split())
            raise InputError(f"--saved_model={self.path}: cannot load it ({message[:300]})") from None
        self._loaded = loaded  # the signatures' variables live as long as the loaded object
        signatures = dict(loaded.signatures)

        def inputs_of(name):
            return signatures[name].structured_input_signature[1]

        def is_text(name):
            return any(spec.dtype == tf.string for spec in inputs_of(name).values())

        if signature == "auto":
            if "serving_default" in signatures and is_text("serving_default"):
                signature = "serving_default"
            elif "serve_ids" in signatures:
                signature = "serve_ids"
            elif "serving_default" in signatures:
                signature = "serving_default"
        if signature not in signatures:
            raise InputError(f"{self.path}: no signature {signature!r} (it has: {', '.join(signatures) or 'none'})")
        self.signature = signature
        self._fn = signatures[signature]
        self._inputs = inputs_of(signature)
        self.takes_text = is_text(signature)
        meta = self.meta = self._read_metadata()
        self.family = self._family(meta, signature)
        if self.takes_text:
            self._text_inputs = self.family.batch.text_inputs(meta)
            if self._text_inputs[0] not in self._inputs or not set(self._inputs) <= set(self._text_inputs):
                raise InputError(f"{self.path}: signature {signature!r} takes {sorted(self._inputs)}; batch "
                                 f"prediction of a {self.family.name} export sends {', '.join(self._text_inputs)}")
        else:
            ids = ("input_ids", "segment_ids", "padding_mask")
            if set(self._inputs) != set(ids) or self._inputs["input_ids"].shape.rank != 2:
                shapes = {k: v.shape.as_list() for k, v in self._inputs.items()}
                raise InputError(f"{self.path}: signature {signature!r} takes {shapes}; batch prediction from token "
                                 f"ids needs {', '.join(ids)} [batch, seq] (a classification or regression export; "
                                 "other exports: their raw-text serving_default)")
        self._describe(self._fn.structured_outputs)
        # Sentence pairs: a text signature says so by its inputs; an ids one only through metadata.json.
        self.pair = (len(self._text_inputs) > 1 and self._text_inputs[1] in self._inputs if self.takes_text
                     else meta.get("pair"))
        fixed = None if self.takes_text else self._inputs["input_ids"].shape[1]  # e.g. a long-document export's
        if not self.takes_text and max_seq_length is None:
            # The fine-tuning run's length, as the export records it; a shorter or longer one changes predictions.
            max_seq_length = meta.get("max_seq_length", fixed)
            if max_seq_length is None:
                max_seq_length = DEFAULT_MAX_SEQ_LENGTH
                logging.warning("%s does not record the fine-tuning run's max_seq_length; tokenizing to %d tokens "
                                "(set --max_seq_length to the run's)", self.path, max_seq_length)
        elif self.takes_text:
            given = dict(max_seq_length=max_seq_length, uncased=uncased, spiece_model_file=spiece_model_file)
            unused = [f"--{name}={value}" for name, value in given.items() if value is not None]
            if unused:
                logging.warning("%s not used: signature %s tokenizes in the graph as the fine-tuning run did "
                                "(max_seq_length %s, uncased %s; --signature=serve_ids tokenizes here)",
                                ", ".join(unused), signature, meta.get("max_seq_length", "unrecorded"),
                                meta.get("lower_case", "unrecorded"))
        elif fixed not in (None, max_seq_length):
            raise InputError(f"--max_seq_length={max_seq_length}: signature {signature} of {self.path} takes exactly "
                             f"{fixed} tokens")
        elif meta.get("max_seq_length") not in (None, max_seq_length):
            logging.warning("--max_seq_length=%d differs from the fine-tuning run's %d (%s)", max_seq_length,
                            meta["max_seq_length"], self.path)
        self.max_seq_length = max_seq_length
        if not self.takes_text:
            from xlnet_tf.tokenization import XLNetTokenizer
            model_file = spiece_model_file or self._asset_spiece()
            self.tokenizer = XLNetTokenizer(model_file, lower=meta.get("lower_case", False) if uncased is None
                                            else uncased)
        self.source = dict(saved_model=self.path, version=self.version)
        # Its content, not its path: a path may name another export later (the same version number retrained), and
        # the same export other paths. variables.index holds each variable's checksum.
        files = [os.path.join(self.path, "saved_model.pb"), os.path.join(self.path, "variables", "variables.index")]
        self.identity = dict(sha256=content_sha256([f for f in files if tf.io.gfile.exists(f)]), signature=signature,
                             max_seq_length=None if self.takes_text else max_seq_length,
                             spiece_sha256=self.tokenizer.fingerprint() if self.tokenizer else None,
                             uncased=self.tokenizer.lower if self.tokenizer else None)

    def _family(self, meta: dict, signature: str):
        """The export's task family: that of the kind it records, else the one whose signature takes these inputs."""
        if meta.get("kind"):
            family = tasks.for_kind(meta["kind"])
        else:
            family = tasks.for_signature(self._inputs)
            if family is None:
                raise InputError(f"{self.path}: signature {signature!r} takes {sorted(self._inputs)} and the export "
                                 "records no kind (assets.extra/metadata.json): no task family serves these inputs")
        if family.batch is None:
            raise InputError(f"{self.path}: a {family.name} export; batch prediction handles "
                             f"{', '.join(f.name for f in tasks.families() if f.batch is not None)} exports")
        return family

    def _read_metadata(self) -> dict:
        """What the export's ``assets.extra/`` says for clients: ``metadata.json`` (kind, labels, lower_case,
        pair; ``python -m xlnet_tf.cli.export``) or the older ``labels.json`` (kind, labels); {} if neither."""
        for name in ("metadata.json", "labels.json"):
            path = os.path.join(self.path, "assets.extra", name)
            if io_utils.exists(path):  # not an object, or not UTF-8: one line naming it, as any file of settings
                return io_utils.read_mapping(path, "json", missing=None, expected="a JSON object")
        return {}

    def _asset_spiece(self) -> str:
        extra = os.path.join(self.path, "assets.extra")
        models = tf.io.gfile.glob(os.path.join(extra, "*.model"))
        if len(models) != 1:
            raise InputError(f"{self.path}: signature {self.signature!r} takes token ids and "
                             f"{'no' if not models else 'more than one'} SentencePiece model is in "
                             "assets.extra/: give --spiece_model_file")
        return models[0]  # XLNetTokenizer reads it through tf.io.gfile

    def __call__(self, batch):
        if self.takes_text:
            args = {name: batch[key] for name, key in zip(self._text_inputs, ("text_a", "text_b"))
                    if name in self._inputs}
        else:
            args = {k: tf.cast(batch[k], self._inputs[k].dtype) for k in ("input_ids", "segment_ids", "padding_mask")}
        return self.family.batch.outputs(self._fn(**args), self.meta)
