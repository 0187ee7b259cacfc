"""Reading the original TF1 release checkpoints (``xlnet_cased_L-24_H-1024_A-16``, ``L-12_H-768_A-12``), native
checkpoints, and HuggingFace XLNet directories (through ``xlnet_tf.hf``'s TF1 names).

Each model class lists its variables under their TF1 names (``tf1_variables``); loading checks every one of
them against the checkpoint before assigning any, so a wrong file never leaves a half-loaded model.

Every read of a model from a checkpoint is here: the pretrained network (``load_pretrained``, ``warm_start``), a
trained model for evaluation, prediction and export (``restore_for_inference``), a task model from a fine-tuned
checkpoint of any format, with one set of rules for whether its head fits (``load_fine_tuned``: ``warm_start``'s HF
head, ``load_task_weights``, ``Task.restore``'s ``--init_checkpoint``). Resuming a run's whole training state
(optimizer, step, dropout seeds) is ``xlnet_tf.training.setup``'s; which checkpoint a task reads, by its flags, is
``tasks.base.Task.restore``'s.
"""

from __future__ import annotations

import os
import re

from typing import NamedTuple, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError, MissingInputError

# Optimizer state and bookkeeping that the original wrote next to the weights (model_utils.clean_ckpt).
_IGNORED = re.compile(r"(^global_step$)|(/adam_[mv]$)|(/Adam(_\d+)?$)|(/Momentum$)|(^beta[12]_power)")


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix, a directory (latest checkpoint, or the release's ``xlnet_model.ckpt``)
    or a file of the bundle (``xlnet_model.ckpt.index``)."""
    path = os.fspath(path)
    # A prefix with its .index is a checkpoint even where isdir() matches prefixes (ram://'s isdir does).
    if tf.io.gfile.isdir(path) and not tf.io.gfile.exists(path + ".index"):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        candidate = os.path.join(path, "xlnet_model.ckpt")
        if tf.io.gfile.exists(candidate + ".index"):
            return candidate
        from xlnet_tf import hf

        not_hf = hf.why_not_xlnet(path)  # an HF directory whose config.json is damaged or of another model
        if not_hf:
            raise InputError(f"{path}: {not_hf}")
        if hf.is_hf_dir(path):
            raise InputError(f"{path} is a HuggingFace XLNet directory (config.json, model_type 'xlnet'), not a "
                             f"TensorFlow checkpoint: {_READS_HF}")
        raise MissingInputError(f"{path}: no checkpoint in this directory (no 'checkpoint' file and no "
                                "xlnet_model.ckpt.index)")
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    path = re.sub(r"\.data-\d{5}-of-\d{5}$", "", path)
    if not tf.io.gfile.exists(path + ".index"):
        other = _other_format(path)
        if other:
            raise InputError(f"{path} is not a TensorFlow checkpoint (a prefix with its .index): it is {other}")
        raise MissingInputError(f"{path}: no checkpoint here ({path}.index does not exist)")
    return path


_READS_HF = "xlnet_tf.load_pretrained(model, path) or xlnet_tf.load_network(path) reads it"


def _other_format(path: str) -> Optional[str]:
    """What another format's file at ``path`` is and what reads it, or None: a user who names the file Keras or
    HuggingFace wrote gets the call that reads it, not only that no checkpoint is there."""
    if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
        return None
    name = os.path.basename(path)
    if name.endswith(".keras"):
        return "a Keras model file: keras.models.load_model(path) reads it"
    if name.endswith(".h5"):
        return "a Keras weights file: model.load_weights(path) reads it into a model of the same config"
    if name.endswith((".safetensors", ".bin")):
        return f"a HuggingFace weights file: name its directory (with config.json); {_READS_HF}"
    return None


# What TensorFlow raises for a truncated, corrupt or foreign file: "not an sstable", "Read less bytes than
# requested", a failed CRC check...
_UNREADABLE = (tf.errors.OpError, IndexError, UnicodeDecodeError)


def _unreadable(prefix: str, error: Exception) -> InputError:
    return InputError(f"{prefix}: unreadable checkpoint (truncated, corrupt, or not a TensorFlow checkpoint): "
                      f"{_first_line(error)}")


def checkpoint_reader(path: str) -> tf.train.CheckpointReader:
    """``tf.train.load_checkpoint(path)``, reading a prefix that has its ``.index`` directly (load_checkpoint
    takes a prefix for a directory where isdir() matches prefixes, as on ram://)."""
    if tf.io.gfile.exists(path + ".index"):
        return tf.compat.v1.train.NewCheckpointReader(path)
    return tf.train.load_checkpoint(path)


def open_checkpoint(prefix: str) -> tf.train.CheckpointReader:
    """``checkpoint_reader`` with a ValueError naming the checkpoint if it cannot be read."""
    try:
        return checkpoint_reader(prefix)
    except _UNREADABLE as error:
        raise _unreadable(prefix, error) from None


def load_original_checkpoint(model, ckpt_prefix: str) -> list[str]:
    """Loads a checkpoint in the original release's TF1 layout into ``model``.

    ``model`` is anything with ``tf1_variables()`` (``XLNetModel``, ``XLNetPretrainer``, the fine-tuning
    models). Every model variable must be in the checkpoint with its exact shape; otherwise a ``ValueError``
    names each missing or mis-shaped variable and nothing is assigned. Optimizer slots and ``global_step`` are
    ignored. Returns the checkpoint's other variables that the model did not use (e.g. a fine-tuning head when
    loading into the bare network).
    """
    prefix = resolve_checkpoint(ckpt_prefix)
    reader = open_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in shapes:  # (is_tf1_checkpoint) every variable would be listed as missing
        raise InputError(f"{prefix} is an xlnet_tf checkpoint, not the original release's TF1 layout: load it with "
                         "xlnet_tf.load_pretrained (which reads either), or build the model from it with "
                         "xlnet_tf.load_network")

    def read(names):
        try:
            return {name: reader.get_tensor(name) for name in names}
        except _UNREADABLE as error:
            raise _unreadable(prefix, error) from None

    assign_tf1(model, shapes, read, prefix)
    return sorted(n for n in shapes if n not in model.tf1_variables() and not _IGNORED.search(n))


def assign_tf1(model, shapes: dict, read, source: str) -> None:
    """Assigns ``read(names)`` ({TF1 name: array}) to ``model.tf1_variables()`` after checking that every one of
    them is in ``shapes`` ({TF1 name: shape}) with its shape and a floating dtype: an InputError naming ``source``
    lists each missing, mis-shaped or non-float variable, and nothing is assigned."""
    wanted = model.tf1_variables()
    problems = []
    for name, var in wanted.items():
        if name not in shapes:
            problems.append(f"missing variable {name} (model expects shape {tuple(var.shape)})")
        elif tuple(shapes[name]) != tuple(var.shape):
            hint = ""
            if name.rsplit("/", 1)[-1] in ("r_w_bias", "r_r_bias", "r_s_bias"):
                hint = " (does the config's untie_r match the checkpoint?)"
            problems.append(f"{name}: checkpoint shape {tuple(shapes[name])} != model shape "
                            f"{tuple(var.shape)}{hint}")
    if problems:
        raise InputError(f"{source}: cannot load into {type(model).__name__}:\n  " + "\n  ".join(problems))
    values = read(list(wanted))
    converted, wrong = {}, []
    for name, var in wanted.items():  # every value converted before any is assigned: nothing half-loaded
        value = np.asarray(values[name])
        if not _floating(value.dtype):  # TF's own restore refuses a dtype mismatch too
            wrong.append(f"{name}: dtype {value.dtype} (model variable {var.dtype})")
        else:
            converted[name] = value.astype(var.dtype)
    if wrong:
        raise InputError(f"{source}: cannot load into {type(model).__name__}, not floating-point weights:\n  "
                         + "\n  ".join(wrong))
    for name, var in wanted.items():
        var.assign(converted[name])


def _floating(dtype) -> bool:
    """Whether weights of ``dtype`` are numbers to load: bfloat16 (ml_dtypes', as TensorFlow reads a bf16
    checkpoint) is, though numpy does not call it floating."""
    try:
        return tf.as_dtype(dtype).is_floating
    except TypeError:
        return False


def assign_arrays(model, tensors: dict, source: str) -> None:
    """``assign_tf1`` from {TF1 name: array} in memory (an HF checkpoint's ``tf1_tensors``)."""
    assign_tf1(model, {n: np.shape(v) for n, v in tensors.items()},
               lambda names: {n: tensors[n] for n in names}, source)


def load_hf_pretrained(model, checkpoint) -> None:
    """The network (and the LM bias, where both have one) of ``model`` from an ``hf.HFCheckpoint``; a head the
    checkpoint has is not read (nor checked, where its task family is not loaded)."""
    tensors = checkpoint.tf1_tensors(network_only=True)
    backbone = getattr(model, "xlnet", model)
    with_bias = hasattr(model, "lm_bias") and "model/lm_loss/bias" in tensors
    if hasattr(model, "lm_bias") and not with_bias:
        logging.info("%s: no LM head (lm_loss.bias); the LM bias starts at zero", checkpoint.source)
    assign_arrays(model if with_bias else backbone, tensors, checkpoint.source)


def hf_task_tensors(model, checkpoint, labels=None) -> tuple:
    """``(tensors, None)``: an HF checkpoint's weights, head included, for the task model ``model`` (its head's
    classes put in the order of ``labels``, the task's, where the checkpoint names the same labels in another);
    or ``(None, why)`` when its head is not this model's: another kind, another number of labels, other label
    names, other shapes. ``(None, None)``: the checkpoint has no task head (a bare or LM model)."""
    from xlnet_tf import hf

    kind = type(model).__name__
    try:
        head = checkpoint.head
    except InputError as error:  # an architecture of a family not loaded (or none named): a head, not this model's
        return None, _last_line(error)
    if head in (None, "XLNetPretrainer"):
        return None, None
    if head != kind:
        return None, f"it is an {checkpoint.architecture}; this task trains an {kind}"
    regression = bool(getattr(model, "regression", False))
    spec = hf.registered_head(kind)
    if spec is not None and spec.regression and checkpoint.regression != regression:
        return None, f"it is a {'regressor' if checkpoint.regression else 'classifier'}; this task's head is not"
    order = None
    if hf.labelled_head(kind) and not regression:
        if checkpoint.num_labels != model.num_labels:
            return None, f"it has {checkpoint.num_labels} labels, this task {model.num_labels}"
        theirs, ours = checkpoint.labels, [str(label) for label in labels or ()]
        if theirs and ours:
            if sorted(theirs) != sorted(ours):
                return None, f"its labels {theirs[:10]} are not this task's {ours[:10]}"
            order = [theirs.index(label) for label in ours]
    scope = getattr(model, "task_scope", "task")
    try:
        tensors = checkpoint.tf1_tensors(task_scope=scope)
    except InputError as error:
        return None, _last_line(error)
    if order and order != sorted(order):
        for name in list(tensors):
            if re.search(r"_%s/logit/(kernel|bias)$" % re.escape(scope), name):
                tensors[name] = np.take(tensors[name], order, axis=-1)
    shapes = {n: np.shape(v) for n, v in tensors.items()}
    wrong = [n for n, var in model.tf1_variables().items() if tuple(shapes.get(n, ())) != tuple(var.shape)]
    if wrong:
        return None, f"its weights do not fit this {kind} ({', '.join(wrong[:3])})"
    return tensors, None


class FineTuned(NamedTuple):
    """What ``load_fine_tuned`` found. ``read``: the checkpoint the whole model was read from, None if it was not;
    ``head``: the checkpoint's task head (HF's architecture, or its variables' names), None where it has none (a
    pretrained network); ``why``: why that head does not fit the model (None where it has none)."""
    read: Optional[str]
    head: Optional[str] = None
    why: Optional[str] = None


def load_fine_tuned(model, path, labels=None) -> FineTuned:
    """Reads the whole task model ``model`` from ``path`` if it is a fine-tuned checkpoint of its task: the
    original's TF1 layout or a native checkpoint, every variable with its shape; an HF directory (or an
    ``hf.HFCheckpoint``) whose head fits (``hf_task_tensors``: the same kind, regressor or not, the task's
    ``labels`` in any order, or as many unnamed). Nothing is assigned unless all of it fits. A missing checkpoint,
    or a TF1/native one whose index is unreadable, is an InputError naming it; any other reason it is not read is
    the result's ``why``."""
    source = _hf_or_prefix(path)
    if not isinstance(source, str):
        tensors, why = hf_task_tensors(model, source, labels)
        if tensors is None:
            return FineTuned(None, (source.architecture or "config.json names none") if why else None, why)
        assign_arrays(model, tensors, source.source)
        return FineTuned(source.source)
    tf1 = is_tf1_checkpoint(source)  # outside the try: an unreadable index is said as such, not as a misfit
    try:
        if tf1:
            load_original_checkpoint(model, source)
        else:
            read_model(model, source)
        return FineTuned(source)
    except ValueError as whole:
        heads = head_variables(source)
        return FineTuned(None, _listed(heads), _last_line(whole)) if heads else FineTuned(None)


def _hf_or_prefix(path):
    """An ``hf.HFCheckpoint`` for an HF directory (or that checkpoint itself), else the checkpoint's prefix."""
    from xlnet_tf import hf

    if isinstance(path, hf.HFCheckpoint):
        return path
    return hf.HFCheckpoint(path) if hf.is_hf_dir(path) else resolve_checkpoint(path)


def _listed(names: list) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def warm_start(model, path: str, labels=None) -> None:
    """``--init_checkpoint`` into a task model about to be trained: the network (``load_pretrained``), and from an
    HF checkpoint whose head fits (``load_fine_tuned``) its head too. A head that does not fit is not loaded, and a
    warning says which and why: a new head for a new task is right, but not silently. A TF1 or native checkpoint's
    head is never kept: nothing in it names its task's labels."""
    from xlnet_tf import hf

    if not hf.is_hf_dir(path):
        load_pretrained(model, path)
        logging.info("initialised the network from %s", path)
        return
    checkpoint = hf.HFCheckpoint(path)
    found = load_fine_tuned(model, checkpoint, labels)
    if found.read:
        logging.info("initialised the network and the %s head from %s", checkpoint.architecture, path)
        return
    load_pretrained(model, path)
    if found.head:
        logging.warning("--init_checkpoint=%s: its %s head is not loaded (%s); the %s head starts from random "
                        "weights", path, found.head, found.why, type(model).__name__)
    logging.info("initialised the network from %s", path)


def read_model(model, path: str) -> None:
    """Restores ``model``'s weights (nothing else) from the training checkpoint ``path``; an InputError naming it
    if it holds another model (different task or shape) or cannot be read."""
    try:
        tf.train.Checkpoint(model=model).read(path).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:
        raise InputError(f"{path}: not a checkpoint of this model ({_first_line(error)})") from None
    except (tf.errors.OpError, IndexError) as error:
        raise InputError(f"{path}: unreadable checkpoint ({_first_line(error)})") from None


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _last_line(error: Exception) -> str:
    """The particular of a multi-line error (``assign_tf1``'s last problem), the whole of a one-line one."""
    return str(error).strip().splitlines()[-1].strip() if str(error).strip() else type(error).__name__


def write_tf1_checkpoint(tensors: dict[str, np.ndarray], prefix: str) -> str:
    """Writes ``{tf1_name: array}`` as a TF1-style name-based checkpoint bundle (what the release ships).

    Used to export our weights in the original layout and to build test fixtures; readable by the original
    code's ``tf.train.init_from_checkpoint`` and by ``load_original_checkpoint``.
    """
    names = sorted(tensors)
    tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(tensors[n]) for n in names])
    return prefix


def is_tf1_checkpoint(prefix: str) -> bool:
    """True for a name-based (TF1) checkpoint, False for an object-based one written by ``tf.train.Checkpoint``."""
    return "_CHECKPOINTABLE_OBJECT_GRAPH" not in open_checkpoint(prefix).get_variable_to_shape_map()


def native_checkpoint(model) -> tf.train.Checkpoint:
    """The object-based checkpoint layout every xlnet_tf model shares: ``model/xlnet/...`` for the network
    (and ``model/lm_bias`` for the pretrainer), so a pretraining checkpoint restores into any task model."""
    backbone = getattr(model, "xlnet", model)
    parts = {"xlnet": backbone}
    if hasattr(model, "lm_bias"):
        parts["lm_bias"] = model.lm_bias
    return tf.train.Checkpoint(model=tf.train.Checkpoint(**parts))


def _staged_pretrained(path: str, config, lm_bias: bool, dtype=None):
    """A fresh network of ``config`` (an ``XLNetPretrainer`` if ``lm_bias``, else an ``XLNetModel``) holding the
    pretrained weights of ``path``, any format (release, native, a HuggingFace directory or ``hf://`` name); an
    InputError naming the checkpoint if it is unreadable or does not fit ``config``. Loading into this copy first
    leaves the caller's model untouched by a bad file."""
    from xlnet_tf import hf
    from xlnet_tf.models.xlnet import XLNetModel, XLNetPretrainer

    staging = (XLNetPretrainer if lm_bias else XLNetModel)(config, dtype=dtype)
    if hf.is_hf_dir(path):
        load_hf_pretrained(staging, hf.HFCheckpoint(path))
        return staging
    prefix = resolve_checkpoint(path)
    if is_tf1_checkpoint(prefix):
        load_original_checkpoint(staging, prefix)
        return staging
    status = None
    try:
        status = native_checkpoint(staging).read(prefix)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise InputError(f"{prefix}: checkpoint does not hold every XLNet variable of this model "
                         f"(different config?): {_first_line(e)}") from None
    except _UNREADABLE as error:
        raise _unreadable(prefix, error) from None
    finally:
        if status is not None:
            status.expect_partial()
    return staging


def check_pretrained(path: str, config) -> None:
    """Reads the pretrained network of ``path`` into a throwaway copy of ``config``'s network: an InputError now if
    the checkpoint is unreadable (damaged index or data) or of another config, before minutes of other work."""
    _staged_pretrained(path, config, lm_bias=False)


def load_pretrained(model, path: str) -> None:
    """Loads pretrained XLNet weights from either format: the original TF1 release or our native checkpoints
    (``xlnet-convert-checkpoint`` output, pretraining output). Only the network (and the LM bias, if ``model``
    has one) is read; task heads keep their fresh initialisation. A HuggingFace XLNet directory or ``hf://`` name
    (``xlnet_tf.hf``) is read too."""
    from xlnet_tf import hf

    backbone = getattr(model, "xlnet", model)
    lm_bias = hasattr(model, "lm_bias")
    staging = _staged_pretrained(path, backbone.config, lm_bias)
    targets = backbone.weights + ([model.lm_bias] if lm_bias else [])
    sources = getattr(staging, "xlnet", staging).weights + ([staging.lm_bias] if lm_bias else [])
    for source, target in zip(sources, targets):
        target.assign(source)
    if not hf.is_hf_dir(path):
        _log_objective(path)


def config_next_to(path: str) -> str:
    """The ``xlnet_config.json`` in a checkpoint's directory (a release, ``xlnet-convert-checkpoint``'s output);
    an InputError asking for ``config=`` where there is none."""
    found = io_utils.beside(path, "xlnet_config.json")
    if found is None:
        raise InputError(f"config: {path} has no xlnet_config.json next to it; pass config= (the model's "
                         "xlnet_config.json or an XLNetConfig)")
    return found


def load_network(path: str, config=None, *, pretrainer: bool = False, dtype=None, **overrides):
    """An ``XLNetModel`` (``pretrainer=True``: an ``XLNetPretrainer``, LM bias included) holding the pretrained
    weights of ``path``, in one call: a release directory, a native checkpoint (directory or prefix), a HuggingFace
    directory or ``hf://`` name. ``config``: an ``XLNetConfig``, a dict or a JSON file, else the checkpoint's own
    (``xlnet_config.json`` next to it; an HF directory's ``config.json``); ``overrides`` set run-time fields
    (``dropout=0.0``, ``mem_len=384``, ...); ``dtype``: a Keras dtype policy (``"mixed_bfloat16"``)."""
    from xlnet_tf import hf
    from xlnet_tf.config import XLNetConfig

    is_hf = hf.is_hf_dir(path)
    if isinstance(config, XLNetConfig):
        config = config.replace(**overrides)
    elif isinstance(config, dict):
        config = XLNetConfig.from_dict(config, **overrides)
    elif config is not None:
        config = XLNetConfig.from_json(config, **overrides)
    elif is_hf:
        config = hf.HFCheckpoint(path).xlnet_config(**overrides)
    else:
        config = XLNetConfig.from_json(config_next_to(path), **overrides)
    model = _staged_pretrained(path, config, pretrainer, dtype)
    if not is_hf:
        _log_objective(path)
    return model


def _log_objective(path: str) -> None:
    objective = pretraining_objective(path)
    if objective:
        logging.info("%s: pretrained with --objective=%s", path, objective)


def pretraining_objective(path: str):
    """The objective a pretraining checkpoint records ('plm', 'pmlm', 'mpnet'), or None (another checkpoint).
    Fine-tuning does not need it: every objective trains the same network."""
    try:
        value = checkpoint_reader(resolve_checkpoint(path)).get_tensor(
            "model/objective/.ATTRIBUTES/VARIABLE_VALUE")
    except (tf.errors.NotFoundError, ValueError):
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


# -- a trained model for inference, a task model from any checkpoint --------------------------------------------
def restore_for_inference(model, model_dir: str, checkpoint_path: Optional[str] = None) -> str:
    """Restores a trained model (weights only) from ``checkpoint_path`` or the latest in ``model_dir``: a native
    checkpoint, or a fine-tuned one in the original TF1 layout (a ``--format=release`` export or conversion, the
    original code's run_classifier output), read by its TF1 names (a missing head variable is named)."""
    path = checkpoint_path or tf.train.latest_checkpoint(model_dir)
    if not path and tf.io.gfile.exists(os.path.join(model_dir, "xlnet_model.ckpt.index")):  # a release directory
        path = checkpoint_path = os.path.join(model_dir, "xlnet_model.ckpt")
    if not path:
        raise MissingInputError(f"--model_dir={model_dir} holds no fine-tuned checkpoint to evaluate, predict or "
                                "export with: train first (--do_train) or name one with --predict_ckpt "
                                "(--init_checkpoint is the starting point of training, not read without it)")
    if checkpoint_path:
        path = resolve_checkpoint(checkpoint_path)
        if is_tf1_checkpoint(path):
            load_original_checkpoint(model, path)
            return path
    read_model(model, path)
    return path


def load_task_weights(network: keras.Model, path: str, new_head: bool = False) -> str:
    """Loads a checkpoint into a task model (``XLNetClassifier``, ``XLNetMultipleChoice``, ``XLNetSquad``): the
    whole model if the checkpoint holds this task's head (``load_fine_tuned``: fine-tuned in the TF1 layout of the
    original code, by ``run_classifier.py``, or an HF model with this task's head), else only the network (a
    pretrained release, conversion, pretraining checkpoint or HF base model; the head keeps its fresh
    initialisation). A checkpoint fine-tuned for another task (another head, number of labels, regression) is
    refused, saying why. ``new_head``: the network only, a new head whatever the checkpoint holds (e.g. RTE from an
    MNLI model; a head that fits is another task's too). Returns "fine-tuned" or "pretrained"; a ValueError names
    the checkpoint if neither fits. ``path`` may be an ``hf.HFCheckpoint``."""
    source = _hf_or_prefix(path)
    found = FineTuned(None) if new_head else load_fine_tuned(network, source)
    if found.read:
        return "fine-tuned"
    # The network alone first: where it does not fit either (another config), that, not the head, is what to fix.
    if isinstance(source, str):
        load_pretrained(network, source)  # raises, naming the checkpoint, if the network does not fit
    else:
        load_hf_pretrained(network, source)
        source = source.source
    if found.head:
        raise InputError(f"{source}: fine-tuned for another task: its head ({found.head}) does not fit this "
                         f"{type(network).__name__} ({found.why}); pass new_head=True to start a new head on its "
                         "network")
    logging.info("%s: the network is loaded, the %s head starts from random weights (%s)", source,
                 type(network).__name__, "new_head=True" if new_head else "it has no task head")
    return "pretrained"


# The original run_race.py's and run_squad.py's head scopes, outside model/.
_TF1_TOP_LEVEL_HEADS = ("logits/", "start_logits/", "end_logits/", "answer_class/")


def head_variables(prefix: str) -> list:
    """The variables of a task head in the checkpoint ``prefix``: neither the network's (``transformer``) nor
    pretraining's (LM bias, objective), nor training state (optimizer, step, dropout seeds)."""
    names = [name for name, _ in tf.train.list_variables(prefix)]
    if is_tf1_checkpoint(prefix):  # run_classifier.py's heads are under model/, run_race.py's and run_squad.py's not
        return [n for n in names if (n.startswith(("model/",) + _TF1_TOP_LEVEL_HEADS)
                                     and not n.startswith(("model/transformer/", "model/lm_loss/")))]
    # Native checkpoints: the model's weights are saved as "weights/<original name, - for />" (optimizer slots
    # repeat the names under them).
    found = (re.search(r"(?:^|/)(weights/(?!transformer-)[^/]+)", name) for name in names
             if not name.startswith("optimizer/"))
    return sorted({match.group(1) for match in found if match})
