"""TF Serving exports of fine-tuned models: one writer for every task family (``xlnet_tf.tasks``: the family that
``ServingInfo`` carries, handed over by the family's task, says what the signatures take and return), used by
``run_classifier.py --export_dir``, ``run_squad.py --export_dir``, ``python -m xlnet_tf.cli.export`` and the Keras
text models' ``export``.

Layout (what TF Serving expects under a model's base path)::

    <export_dir>/<version>/saved_model.pb, variables/, assets/     the SavedModel
    <export_dir>/<version>/assets.extra/metadata.json              what a client must know (below)
    <export_dir>/<version>/assets.extra/labels.json, spiece.model  label names and kind; the SentencePiece model

``version`` is the checkpoint's global step (a timestamp for a checkpoint without one); it never goes down: an
export older than the newest version already there gets the next number instead (TF Serving serves the highest
version). A version directory is built under a temporary name (``.<version>.tmp-*``, ignored by TF Serving) and
renamed into place; an existing version is never replaced.

Signatures (all traced with the plain kernels: stock TensorFlow ops only, no custom C++ kernels, no XLA):

* ``serving_default``: raw text in (the in-graph ``XLNetPreprocessor``: the fine-tuning run's SentencePiece model,
  lower-casing and ``max_seq_length``, truncation as in training); the inputs are the family's ``serving.text_inputs``
  (classification: ``sentence`` [and ``sentence2``]; multiple choice: ``article``, ``question``, ``options``;
  SQuAD: ``question``, ``context``), the outputs its ``outputs_from_text``.
* ``serve_ids``: the encoded layout of the family's ``serving.ids_spec`` (``input_ids``/``segment_ids`` int32,
  ``padding_mask`` float32, [batch, seq] or [batch, choices, seq]; SQuAD adds ``p_mask`` and ``cls_index``), any
  batch size and length.
* ``metadata``: no inputs; ``kind``, ``task``, ``labels``, ``max_seq_length``, ``lower_case``, ``global_step``,
  ``version``, ``pair`` and the family's ``extras`` (e.g. SQuAD's window and beam settings) as tensors, the same
  values as ``assets.extra/metadata.json`` (where the extras are one mapping, ``extras``).

A 16-bit model's export (``mixed_bfloat16``) stores in bfloat16 the weights its graph only reads in bfloat16
(``ServingModule``): the same results, no casts at every call.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import kernels
from xlnet_tf import io_utils
from xlnet_tf.io_utils import atomic_path, write_json_atomic
from xlnet_tf.errors import InputError

# The file a fine-tuning run leaves in its --model_dir so that an export needs nothing but that directory.
RUN_RECORD = "finetune_settings.json"
METADATA_FILE = "metadata.json"
# assets.extra/: the checkpoint and SentencePiece model an export was written from, by content.
SOURCE_FILE = "source.json"
# metadata.json's layout; 1: the families' settings were fields of their own (max_qa_length, squad, segment_length,
# mem_len), 2: they are ``extras``.
FORMAT = "xlnet_tf.serving/2"


@dataclasses.dataclass
class ServingInfo:
    """What a client of an export must know, written into it (``metadata`` signature, ``metadata.json``).

    ``kind``: one of ``family.serving.kinds()``. ``family``: the task family whose hooks make the signatures; not
    a field (not written into the export, not compared): the family hands itself over (its task's ``serving_info``
    passes ``family=self.family``; ``xlnet_tf.tasks.for_kind(kind)`` finds it), serving never looks it up.
    ``pair``: classification/regression take ``sentence2`` too (tasks with two sentences, e.g. MNLI, STS-B).
    ``extras``: what else the family's serving hooks and its clients need, its own keys, written and read by the
    family alone (e.g. SQuAD's window and beam settings, RACE's ``max_qa_length``, a long document's
    ``segment_length`` and ``mem_len``, tagging's ``tag_scheme`` and ``window_stride``); scalars, each also a
    constant of the ``metadata`` signature. An older export's separate fields: ``tasks.base.with_extras``.
    """

    kind: str
    task: str
    max_seq_length: int
    lower_case: bool = False
    labels: Optional[list] = None
    pair: bool = False
    global_step: int = 0
    extras: dict = dataclasses.field(default_factory=dict)
    family: dataclasses.InitVar[Any] = None

    def __post_init__(self, family):
        self.family = family
        if family is not None and self.kind not in family.serving.kinds():
            raise InputError(f"kind must be one of {', '.join(family.serving.kinds())} (the {family.name} family's), "
                             f"got {self.kind!r}")

    def to_json(self, version: int) -> dict:
        return dict(dataclasses.asdict(self), version=version, format=FORMAT)


def family_of(info: ServingInfo):
    """The task family ``info`` carries; a ValueError if it carries none."""
    if info.family is None:
        raise ValueError(f"ServingInfo(kind={info.kind!r}) carries no task family: pass family= (the family that "
                         "serves the kind: a task's self.family, or xlnet_tf.tasks.for_kind(kind))")
    return info.family


# -- the run record ---------------------------------------------------------------------------------------------
def write_run_record(model_dir: str, family, settings) -> str:
    """Records ``settings`` (a ``ClassifierSettings``/``SquadSettings``) and the task ``family`` in
    ``model_dir/finetune_settings.json``, with the model config, SentencePiece and task module paths made absolute,
    so that ``python -m xlnet_tf.cli.export --model_dir=...`` rebuilds the same model and preprocessing without
    flags. ``runner`` (classifier | squad: the family's entry point) is what older records have."""
    values = dataclasses.asdict(settings)
    for name in ("model_config_path", "spiece_model_file"):
        if values.get(name):
            values[name] = io_utils.abspath(values[name])
    module = values.get("task_module")
    if module and (module.endswith(".py") or os.sep in module):
        values["task_module"] = os.path.abspath(module)
    return write_json_atomic(os.path.join(model_dir, RUN_RECORD),
                             {"runner": family.run_record_runner, "family": family.name, "settings": values})


def read_run_record(model_dir: str) -> Optional[dict]:
    """``{"runner": ..., "settings": {...}}`` from ``write_run_record``, or None if ``model_dir`` has none."""
    path = os.path.join(model_dir, RUN_RECORD)
    if not io_utils.exists(path):
        return None
    try:
        with io_utils.open(path, encoding="utf-8") as f:
            record = json.load(f)
        if not isinstance(record.get("runner"), str) or not isinstance(record.get("settings"), dict):
            raise InputError("expected {'runner': 'classifier' | 'squad', 'family': ..., 'settings': {...}}")
    except ValueError as e:
        raise InputError(f"{path}: damaged run record ({e}); delete it and pass the task's flags") from None
    return record


# -- versions ---------------------------------------------------------------------------------------------------
def existing_versions(export_dir: str) -> list:
    """The numeric version directories under ``export_dir``, ascending."""
    if not io_utils.isdir(export_dir):
        return []
    return sorted(int(n) for n in io_utils.listdir(export_dir)
                  if n.isdigit() and io_utils.isdir(io_utils.join(export_dir, n)))


# What a client of a model name sees change between versions: its inputs (kind, a second sentence), its classes.
_INTERFACE = ("kind", "pair", "labels")


def check_same_interface(export_dir: str, info: ServingInfo) -> None:
    """Refuses to add a version to a base path whose newest version (as its metadata says) takes other inputs or
    answers with other classes: TF Serving would switch the model name's clients to it, and their requests or
    label names would no longer fit. A base path of other SavedModels (no metadata of ours) is not judged."""
    versions = existing_versions(export_dir)
    path = versions and io_utils.join(export_dir, str(versions[-1]), "assets.extra", METADATA_FILE)
    if not path or not io_utils.exists(path):
        return
    try:
        with io_utils.open(path, encoding="utf-8") as f:
            theirs = json.load(f)
    except ValueError:
        theirs = None
    if not isinstance(theirs, dict):
        return
    changed = {k: (theirs.get(k), getattr(info, k)) for k in _INTERFACE if theirs.get(k) != getattr(info, k)}
    if changed:
        raise InputError(f"{export_dir} serves another model: its version {versions[-1]} has "
                         + ", ".join(f"{k} {a!r} where this export has {b!r}" for k, (a, b) in changed.items())
                         + "; TF Serving would switch that model name's clients to it. Export to a new base path "
                           "(another model name), or move the old versions away first")


def export_source(checkpoint: str, spiece_model_file: Optional[str]) -> dict:
    """``source.json``: the checkpoint (its ``.index`` holds every tensor's checksum) and SentencePiece model."""
    from xlnet_tf.tokenization import file_sha256

    return dict(checkpoint=checkpoint, checkpoint_sha256=file_sha256(checkpoint + ".index"),
                spiece_sha256=file_sha256(spiece_model_file) if spiece_model_file else None)


def existing_export(export_dir: str, info: ServingInfo, source: dict) -> Optional[str]:
    """The newest version under ``export_dir`` if it is this export already: the same metadata but for its
    version, written from the same checkpoint and SentencePiece model (``source``'s digests: a run directory
    moved elsewhere holds the same checkpoint); else None."""
    versions = existing_versions(export_dir)
    if not versions:
        return None
    target = io_utils.join(export_dir, str(versions[-1]))
    try:
        written = [io_utils.read_json(io_utils.join(target, "assets.extra", name))
                   for name in (METADATA_FILE, SOURCE_FILE)]
    except (OSError, ValueError):  # none (an older export, another writer's), or damaged: not this one
        return None
    digests = [k for k in source if k.endswith("sha256")]
    same = written[0] == info.to_json(versions[-1]) and all(written[1].get(k) == source[k] for k in digests)
    return target if same else None


def next_version(export_dir: str, global_step: int) -> int:
    """The version for a new export: the global step (a Unix timestamp when there is none), or one more than
    the newest existing version if that is not higher (versions only go up; none is overwritten)."""
    wanted = int(global_step) if global_step and global_step > 0 else int(time.time())
    versions = existing_versions(export_dir)
    if versions and wanted <= versions[-1]:
        chosen = versions[-1] + 1
        logging.warning("%s: version %d %s; writing version %d instead (versions only go up, TF Serving serves "
                        "the highest; the step is in the export's metadata)", export_dir, wanted,
                        "exists" if wanted in versions else f"is below the newest ({versions[-1]})", chosen)
        return chosen
    return wanted


# -- 16-bit weights ---------------------------------------------------------------------------------------------
class _Reads(keras.StatelessScope):
    """Reads each variable of ``reads`` ((variable, tensor) pairs) as that tensor, of any dtype (``StatelessScope``
    converts a value to its variable's dtype on the way in; this scope answers the read itself)."""

    def __init__(self, reads: list):
        super().__init__()
        self._reads = {id(variable): tensor for variable, tensor in reads}

    def get_current_value(self, variable):
        return self._reads.get(id(variable))


# Ops a variable's value may pass through on its way to a cast without the cast's place mattering.
_DTYPE_FREE = ("Identity", "Reshape")


def _cast_to_16_bits(tensor, dtype) -> bool:
    """Whether every use of ``tensor`` reaches a cast to ``dtype``, through _DTYPE_FREE ops only."""
    uses = tensor.consumers()
    return bool(uses) and all(
        (use.type == "Cast" and use.get_attr("DstT") == dtype)
        or (use.type in _DTYPE_FREE and use.inputs[0] is tensor and _cast_to_16_bits(use.outputs[0], dtype))
        for use in uses)


def read_in_16_bits(model, forward, signature: list) -> list:
    """The float32 variables of ``model`` that ``forward`` (a function calling the model, traced here with
    ``signature``'s inputs) only ever reads cast to the model's 16-bit compute dtype: stored in that dtype, they
    give the same graph less the casts, the same results to the bit. [] for a float32 model (not traced), or when
    the graph holds control flow or function calls (reads inside them are not seen here)."""
    dtype = tf.as_dtype(model.compute_dtype)
    if dtype not in (tf.bfloat16, tf.float16) or model.variable_dtype != "float32":
        return []
    graph = tf.function(forward, autograph=False).get_concrete_function(*signature).graph
    if any(op.type in ("While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall")
           for op in graph.get_operations()):
        return []
    outside = {id(inside): outside for outside, inside in graph.captures}
    verdict = {}  # id(handle) -> every read so far casts
    for op in graph.get_operations():
        if op.type == "ReadVariableOp" and id(op.inputs[0]) in outside:
            key = id(outside[id(op.inputs[0])])
            verdict[key] = verdict.get(key, True) and _cast_to_16_bits(op.outputs[0], dtype)
    return [v for v in model.weights if v.dtype == "float32" and verdict.get(id(v.value.handle))]


# -- signatures -------------------------------------------------------------------------------------------------
class ServingModule(tf.Module):
    """The exported object: ``model`` (inference mode), the ``preprocessor`` (an ``XLNetPreprocessor``, or None
    for an export without raw-text signature) and the metadata, with the three signature functions; what the
    signatures take and return is the task family's (``info.family``).

    A model computing in 16 bits (``mixed_bfloat16``) reads most of its float32 weights cast to bfloat16 (every
    projection's kernel) at every call: an export stores those in bfloat16 (``weights_16bit``; ``read_in_16_bits``
    finds them), the rest as they are (``weights_32bit``), and its signatures read them so: the same results to the
    bit, without the casts (a batch of one sentence waits for them: bench/reports/serving.md) and in less memory.
    The model itself is then not saved as an object (its float32 copies of those weights would be)."""

    def __init__(self, model, info: ServingInfo, version: int, preprocessor=None):
        super().__init__(name="xlnet_serving")
        self.preprocessor, self.info = preprocessor, info
        hooks = family_of(info).serving
        ids = hooks.ids_spec(info)
        names = list(ids)

        def ids_outputs(*values):
            return hooks.outputs_from_ids(model, dict(zip(names, values)), info)
        with kernels.use("plain"):  # traced as the signatures are, to find the casts
            cast = read_in_16_bits(model, ids_outputs, list(ids.values()))
        if cast:
            self.weights_16bit = [tf.Variable(tf.cast(v.value, model.compute_dtype), trainable=False,
                                              name=v.path.replace("/", "_")) for v in cast]
            copied = {id(v) for v in cast}
            self.weights_32bit = [v for v in model.weights if id(v) not in copied]
        else:
            self.model = model

        def as_stored(fn):  # fn with the model's reads of the 16-bit weights answered by their copies
            def call(*args):
                with _Reads([(v, w.read_value()) for v, w in zip(cast, self.weights_16bit)]):
                    return fn(*args)
            return call if cast else fn
        # autograph=False: nothing here branches on tensors, and autograph's cache of converted closures
        # (keyed by code object) can hand one module's traced branch to another's.
        self.serve_ids = tf.function(self._checked(as_stored(ids_outputs), ids), input_signature=list(ids.values()),
                                     autograph=False)
        if preprocessor is not None:
            text = {n: tf.TensorSpec(shape, tf.string, n) for n, shape in hooks.text_inputs(info).items()}
            texts = list(text)

            def serve(*values):
                return hooks.outputs_from_text(model, self.preprocessor, dict(zip(texts, values)), info)
            self.serve_text = tf.function(self._checked(as_stored(serve), text),
                                          input_signature=list(text.values()), autograph=False)
        constants = dict(kind=info.kind, task=info.task, labels=list(info.labels or []),
                         max_seq_length=info.max_seq_length, lower_case=info.lower_case,
                         global_step=np.int64(info.global_step), version=np.int64(version), pair=info.pair)
        constants.update(info.extras)

        def metadata():
            return {k: tf.constant(v, tf.string) if k == "labels" else tf.constant(v) for k, v in constants.items()}
        self.metadata = tf.function(metadata, input_signature=[], autograph=False)

    # -- inputs checked (raw text: invalid UTF-8 is not an error, the preprocessor replaces bad bytes with U+FFFD) -
    @staticmethod
    def _checked(serve, specs: dict):
        """``serve`` after checking the inputs ``specs`` (name -> TensorSpec): each has its declared shape, and
        all have one batch size (a clear InvalidArgumentError). The shape check is an EnsureShape op, run on the
        tensor as sent: TF Serving feeds the graph without checking the signature's shapes (a [2, 2] tensor for a
        [None] input would be 4 examples), and a rank check on the traced tensor is folded away, since its traced
        shape is the declared one."""
        names = list(specs)

        def checked(*values):
            values = [tf.ensure_shape(v, specs[name].shape, name=f"{name}_shape_as_declared")
                      for name, v in zip(names, values)]
            first = tf.shape(values[0])[0]
            checks = [tf.debugging.assert_equal(
                tf.shape(v)[0], first, message=f"{', '.join(names)} must have the same batch size (got "
                                               f"{names[0]} and {name})") for name, v in zip(names[1:], values[1:])]
            with tf.control_dependencies(checks):
                return serve(*[tf.identity(v) for v in values])
        return checked


def write_serving_model(model, export_dir: str, info: ServingInfo, spiece_model_file: Optional[str] = None,
                        preprocessor=None, source: Optional[dict] = None) -> str:
    """Writes ``model`` as ``<export_dir>/<version>/`` (see the module docstring) and returns that directory.

    ``preprocessor`` (an ``XLNetPreprocessor`` of ``spiece_model_file``) adds the raw-text ``serving_default``;
    without it ``serve_ids`` is the default signature too. The preprocessor's SentencePiece model (else
    ``spiece_model_file``) is written to ``assets.extra/spiece.model`` for clients; ``source``
    (``export_source``), what the model was read from, to ``assets.extra/source.json``."""
    if io_utils.exists(io_utils.join(export_dir, "saved_model.pb")):
        logging.warning("%s holds a SavedModel in the old flat layout; TF Serving ignores it next to the numbered "
                        "versions written now", export_dir)
    check_same_interface(export_dir, info)
    version = next_version(export_dir, info.global_step)
    target = os.path.join(export_dir, str(version))
    module = ServingModule(model, info, version, preprocessor)
    # saved_model.pb last: where a directory is copied file by file (gs://), a version is loadable once it is there.
    with atomic_path(target, last=("saved_model.pb",)) as tmp, kernels.use("plain"):
        signatures = {"serve_ids": module.serve_ids, "metadata": module.metadata}
        signatures["serving_default"] = module.serve_text if preprocessor is not None else module.serve_ids
        tf.saved_model.save(module, tmp, signatures=signatures)
        extra = os.path.join(tmp, "assets.extra")
        io_utils.makedirs(extra)
        write_json_atomic(os.path.join(extra, METADATA_FILE), info.to_json(version))
        write_json_atomic(os.path.join(extra, "labels.json"), {"kind": info.kind, "labels": info.labels})
        if source is not None:
            write_json_atomic(os.path.join(extra, SOURCE_FILE), source)
        if preprocessor is not None:  # the very model the raw-text signature holds
            with io_utils.open(os.path.join(extra, "spiece.model"), "wb") as f:
                f.write(preprocessor.spiece_model)
        elif spiece_model_file:
            io_utils.copy(spiece_model_file, os.path.join(extra, "spiece.model"))
        if io_utils.exists(target):  # another export took this version meanwhile: never replace it
            raise FileExistsError(f"{target}: version {version} appeared while exporting; export again")
    logging.info("exported version %d (step %d) to %s", version, info.global_step, target)
    return target


def preprocessor_for(info: ServingInfo, spiece_model_file: Optional[str]):
    """The in-graph ``XLNetPreprocessor`` for ``info`` (None without a SentencePiece model: ids only)."""
    if not spiece_model_file:
        return None
    from xlnet_tf.preprocessing import XLNetPreprocessor

    return XLNetPreprocessor.from_file(spiece_model_file, seq_length=info.max_seq_length,
                                       lower_case=info.lower_case, **family_of(info).serving.preprocessor_kwargs(info))


def export_serving(model, export_dir: str, info: ServingInfo, spiece_model_file: Optional[str],
                   checkpoint: Optional[str] = None) -> str:
    """``write_serving_model`` with the raw-text signature built from ``spiece_model_file``, recording the
    ``checkpoint`` the model was restored from."""
    return write_serving_model(model, export_dir, info, spiece_model_file, preprocessor_for(info, spiece_model_file),
                               export_source(checkpoint, spiece_model_file) if checkpoint else None)


# -- the original release layout --------------------------------------------------------------------------------
def write_release(model, export_dir: str, config, spiece_model_file: Optional[str]) -> str:
    """Writes the original release layout at ``export_dir``: ``xlnet_model.ckpt`` (the TF1 variable names of
    ``model.tf1_variables()``: the network, plus ``model/lm_loss/bias`` for a pretrainer or the original
    run_classifier/run_squad/run_race head scopes for a fine-tuned model), ``xlnet_config.json`` (the release's
    keys) and ``spiece.model``. Built under a temporary name and renamed; an existing release is not replaced."""
    from xlnet_tf.checkpoint import write_tf1_checkpoint

    if io_utils.exists(io_utils.join(export_dir, "xlnet_model.ckpt.index")):
        raise FileExistsError(f"--export_dir={export_dir} already holds a release (xlnet_model.ckpt); choose "
                              "another directory or remove it")
    if io_utils.isdir(export_dir) and io_utils.listdir(export_dir):
        raise FileExistsError(f"--export_dir={export_dir} is not empty; a release export writes a directory of "
                              "its own")
    with atomic_path(export_dir, last=("xlnet_model.ckpt.index",)) as tmp:
        write_tf1_checkpoint({n: v.numpy() for n, v in model.tf1_variables().items()},
                             os.path.join(tmp, "xlnet_model.ckpt"))
        config.to_json(os.path.join(tmp, "xlnet_config.json"), checkpoint_keys_only=True)
        if spiece_model_file:
            io_utils.copy(spiece_model_file, os.path.join(tmp, "spiece.model"))
    return export_dir


def custom_ops(saved_model_dir: str) -> dict:
    """The ops of the SavedModel at ``saved_model_dir`` that TensorFlow does not define, each mapped to the
    tensorflow-text kernel library that does (``sentencepiece_tokenizer``, ``normalize_ops``, ...; its build target
    is ``//tensorflow_text:<library>_cc``), or to None if none does."""
    import glob

    import tensorflow_text
    from google.protobuf import message
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(saved_model_dir, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        raise InputError(f"{saved_model_dir}: no saved_model.pb (give an export's version directory)")
    saved = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        saved.ParseFromString(data)
    except message.DecodeError as e:
        raise InputError(f"{path}: not a SavedModel (truncated or corrupt: {e})") from None
    ops = set()
    for graph in saved.meta_graphs:
        ops.update(node.op for node in graph.graph_def.node)
        for function in graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    # tf.raw_ops has every op TensorFlow itself registers; tensorflow-text's kernels come as op libraries, one per
    # feature, whose modules name their ops.
    foreign = sorted(op for op in ops if not hasattr(tf.raw_ops, op))
    libraries = sorted(glob.glob(os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops", "_*.so")))
    found = {}
    for library in libraries:
        module = tf.load_op_library(library)
        name = os.path.basename(library)[1:-len(".so")]
        # A namespaced op ("TFText>FastSentencepieceTokenize") is wrapped with "_" for ">".
        found.update({op: name for op in foreign if op not in found and hasattr(module, op.replace(">", "_"))})
    return {op: found.get(op) for op in foreign}
