"""HuggingFace (``transformers``) XLNet checkpoints in and out, without PyTorch.

An HF XLNet directory holds ``config.json`` (``model_type: xlnet``), the weights (``model.safetensors``, sharded
``model-0000N-of-0000M.safetensors`` with ``model.safetensors.index.json``, or PyTorch's ``pytorch_model.bin``),
``spiece.model`` and ``tokenizer_config.json`` (``do_lower_case``, ``remove_space``, ``keep_accents``).
``HFCheckpoint`` reads one: ``xlnet_config()`` is the ``XLNetConfig``, ``tf1_tensors()`` every weight under the
original release's TF1 name (what the models' ``tf1_variables`` use), so the backbone and the head of
``XLNetLMHeadModel`` load into ``XLNetPretrainer`` with the checks of a release checkpoint. A tensor the mapping
does not know is an error naming it. A task family's head registers its HF names (``register_head``) when the
family loads: classification's ``XLNetClassifier`` is ``XLNetForSequenceClassification``, RACE's
``XLNetMultipleChoice`` ``XLNetForMultipleChoice``, SQuAD's ``XLNetSquad`` ``XLNetForQuestionAnswering``, tagging's
``XLNetTagger`` ``XLNetForTokenClassification``. ``XLNetForQuestionAnsweringSimple``
has no head here (one per-token projection of the sequence output): ``token_head`` returns its arrays.
``save_hf`` writes the other direction.

The heads' math was checked against ``modeling_xlnet.py``, not only their names: HF's ``XLNetSequenceSummary``
(``summary_type`` last/first/mean, projection, tanh) is ``SequenceSummary``; its ``PoolerEndLogits`` and
``PoolerAnswerClass`` concatenate in the original's order. Differences that are not weights: HF's "gelu" is the
exact erf GELU (``ff_activation='gelu_exact'`` here; the original and our "gelu" use the tanh approximation, HF's
"gelu_new"); HF's SQuAD head reports probabilities under the name ``*_log_probs`` in inference, and in training
its answer class reads the start token's state where the original (and ``XLNetSquad``) reads the start-probability
weighted sum; HF's ``end_top_*`` are laid out [end_n_top, start_n_top], ours [start_n_top, end_n_top].

``hf://owner/name[@revision]`` names a model on the HuggingFace Hub: ``resolve`` (``hf.hub``) finds it in the HF
cache or, when the machine is online, downloads it there with ``huggingface_hub`` (the ``hf`` extra). Nothing else
downloads. The weight files are read by ``hf.weight_files`` (safetensors; PyTorch's pickles, restricted).

No TensorFlow here: settings checks read HF configs before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError
from xlnet_tf.hf.hub import is_hub, resolve  # noqa: F401 (hf.resolve: the API)
from xlnet_tf.hf.weight_files import read_json, read_weights  # noqa: F401 (hf.read_weights: the API)
from xlnet_tf.registry import Registry

# HF architecture -> the model of this stack that carries its head (xlnet_tf.models), by class name; "per_token":
# a per-token projection with no model here (XLNetForQuestionAnsweringSimple's start/end logits; ``token_head``).
# The task families' heads are in HEADS.
ARCHITECTURES = {
    "XLNetModel": None, "XLNetLMHeadModel": "XLNetPretrainer", "XLNetForQuestionAnsweringSimple": "per_token",
}
# The module of each head in the HF weights, to tell the head from the weights when config.json names none.
_HF_REGRESSION = "regression"  # HF's problem_type of a regressor (``HFHead.regression``)
_HEAD_MODULES = {"lm_loss": "XLNetPretrainer", "qa_outputs": "per_token"}
# Our ff_activation -> HF's (config.HF_ACTIVATIONS is the other way).
_HF_ACTIVATIONS = {"gelu_exact": "gelu", "gelu": "gelu_new", "relu": "relu"}

# One layer: HF name -> (TF1 name, transposed). HF's attention projections are [d_model, n_head, d_head] like the
# original's; its Linear weights are [out, in], the original's kernels [in, out].
_LAYER = {
    "rel_attn.q": ("rel_attn/q/kernel", False), "rel_attn.k": ("rel_attn/k/kernel", False),
    "rel_attn.v": ("rel_attn/v/kernel", False), "rel_attn.o": ("rel_attn/o/kernel", False),
    "rel_attn.r": ("rel_attn/r/kernel", False),
    "rel_attn.layer_norm.weight": ("rel_attn/LayerNorm/gamma", False),
    "rel_attn.layer_norm.bias": ("rel_attn/LayerNorm/beta", False),
    "ff.layer_1.weight": ("ff/layer_1/kernel", True), "ff.layer_1.bias": ("ff/layer_1/bias", False),
    "ff.layer_2.weight": ("ff/layer_2/kernel", True), "ff.layer_2.bias": ("ff/layer_2/bias", False),
    "ff.layer_norm.weight": ("ff/LayerNorm/gamma", False), "ff.layer_norm.bias": ("ff/LayerNorm/beta", False),
}
# Per-layer in HF, stacked [n_layer, ...] in the original (r_*_bias shared by all layers when untie_r is false).
_STACKED = ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")
# The sequence summary's projection, in every head that reads one (its mapping includes these; ``HFHead.summary``).
SUMMARY_NAMES = {"sequence_summary.summary.weight": ("model/sequnece_summary/summary/kernel", True),
                 "sequence_summary.summary.bias": ("model/sequnece_summary/summary/bias", False)}
_HEADS = {
    "XLNetPretrainer": {"lm_loss.bias": ("model/lm_loss/bias", False)},
}


@dataclasses.dataclass(frozen=True)
class HFHead:
    """The HF names of a task family's head: ``head`` (the class name of its Keras model), ``architecture`` (HF's
    class), ``module`` (its weights' first name component, telling the head when config.json names no
    architecture; None if another head's weights have it too), ``mapping(task_scope, regression)`` ({HF name:
    (TF1 name, transposed)}), ``labelled`` (config.json's id2label names its classes, as a sequence classifier's),
    ``per_token`` (``token_head`` reads it), ``summary`` (its mapping includes ``SUMMARY_NAMES``, left out where
    config.json's ``summary_use_proj`` is false), ``regression`` (config.json's ``problem_type``, or one label,
    makes it a regressor: ``HFCheckpoint.regression`` picks the mapping, ``hf_config`` writes it)."""
    head: str
    architecture: str
    module: Optional[str]
    mapping: Callable[[str, bool], dict]
    labelled: bool = False
    per_token: bool = False
    summary: bool = False
    regression: bool = False


def _head_problems(spec) -> list:
    """An architecture or module of the heads that are no task family's (the tables above) is not another head's."""
    if not isinstance(spec, HFHead):
        return [f"expected an HFHead, got {type(spec).__name__}"]
    if (spec.architecture in ARCHITECTURES and ARCHITECTURES[spec.architecture] != spec.head) or (
            spec.module is not None and _HEAD_MODULES.get(spec.module, spec.head) != spec.head):
        return [f"{spec.head}: architecture {spec.architecture!r} or module {spec.module!r} is another head's"]
    return []


def _head_claims(spec, other) -> str:
    claimed = [f"architecture {spec.architecture!r}"] if spec.architecture == other.architecture else []
    claimed += [f"module {spec.module!r}"] if spec.module is not None and spec.module == other.module else []
    return " and ".join(claimed)


# head (the Keras model's class name) -> HFHead, of the task families loaded (xlnet_tf.registry; registering the
# same head again replaces it)
HEADS = Registry("HF head", "hf.register_head", "hf.HFHead", check=_head_problems, clash=_head_claims, key="head")


def register_head(spec: HFHead) -> None:
    """Makes ``spec``'s architecture readable and writable; an architecture or module another head has is a
    ValueError (registering the same head again replaces it)."""
    HEADS.register(spec)


def registered_head(head: Optional[str]) -> Optional[HFHead]:
    """The registered ``HFHead`` of the model class named ``head`` (None for ``ARCHITECTURES``' and unknown ones)."""
    return HEADS.get(head)


def _architectures() -> dict:
    return {**ARCHITECTURES, **{s.architecture: s.head for s in HEADS.values()}}


def labelled_head(head: Optional[str]) -> bool:
    """Whether config.json's id2label names the classes of the model class named ``head``."""
    spec = registered_head(head)
    return spec is not None and spec.labelled


def _head_mapping(head: Optional[str], task_scope: str = "task", regression: bool = False) -> dict:
    """{HF name: (TF1 name, transposed)} of ``head``'s weights; the task heads' TF1 names hold their scope."""
    if head in HEADS:
        return HEADS[head].mapping(task_scope, regression)
    return _HEADS.get(head, {})


# -- reading ------------------------------------------------------------------------------------------------------
def is_hf_dir(path) -> bool:
    """Whether ``path`` (a directory, or ``hf://...``) is an HF XLNet model: its config.json says model_type
    xlnet. ``hf://`` always is (it is resolved when read)."""
    if path is None:
        return False
    path = os.fspath(path)
    if is_hub(path):
        return True
    config = io_utils.join(path, "config.json")
    if not (io_utils.probe(path, "dir") and io_utils.probe(config)):
        return False
    try:
        return io_utils.read_json(config).get("model_type") == "xlnet"
    except (ValueError, AttributeError, OSError):
        return False


def why_not_xlnet(path) -> Optional[str]:
    """For a directory whose config.json does not make it an HF XLNet model (``is_hf_dir`` False): why, naming the
    file (not valid JSON, with the place; another model_type). None where it has no config.json, or is one."""
    config = io_utils.join(os.fspath(path), "config.json")
    if is_hub(os.fspath(path)) or not io_utils.probe(config):
        return None
    try:
        model_type = read_json(config).get("model_type")
    except InputError as error:
        return str(error)
    return None if model_type == "xlnet" else f"{config}: model_type is {model_type!r}, not 'xlnet'"


class HFCheckpoint:
    """An HF XLNet directory (or ``hf://`` model), read once: ``config`` (config.json as a dict), ``head`` (the
    class name of the model that carries its head: ``XLNetPretrainer`` or a registered head's, e.g.
    ``XLNetClassifier``; ``per_token`` for a per-token projection with no model here; None for a bare network),
    ``weights`` ({HF name: array}, without the ``transformer.`` prefix of the backbone's)."""

    def __init__(self, path: str):
        self.source = os.fspath(path)
        self.path = resolve(self.source)
        config_path = io_utils.join(self.path, "config.json")
        if not io_utils.exists(config_path):
            raise InputError(f"{self.source}: no config.json (not a HuggingFace model directory)")
        self.config = read_json(config_path)
        if self.config.get("model_type") != "xlnet":
            raise InputError(f"{config_path}: model_type is {self.config.get('model_type')!r}, not 'xlnet'")
        self._weights = None

    @property
    def weights(self) -> dict:
        """{HF name: float32 array}, read on first use (a config alone does not read the weights)."""
        if self._weights is None:
            self._weights = read_weights(self.path)
        return self._weights

    @property
    def head(self) -> Optional[str]:
        return self._head()

    @property
    def architecture(self) -> Optional[str]:
        names = self.config.get("architectures") or []
        return names[0] if names else None

    def _head(self) -> Optional[str]:
        if self.architecture is not None:
            known = _architectures()
            if self.architecture not in known:
                raise InputError(f"{self.path}/config.json: architecture {self.architecture!r} is not one this "
                                 f"stack reads ({', '.join(known)}; a task family's head is known once the family "
                                 "is loaded)")
            return known[self.architecture]
        modules = {name.split(".", 1)[0] for name in self.weights}
        for module, head in {**_HEAD_MODULES, **{s.module: s.head for s in HEADS.values() if s.module}}.items():
            if module in modules:
                return head
        # heads whose weights only config.json tells apart (module None): classification's and multiple choice's
        alike = [s.architecture for s in HEADS.values() if s.module is None and _own_modules(s) <= modules]
        if alike:
            raise InputError(f"{self.path}/config.json: no 'architectures': say {' or '.join(alike)}")
        return None

    @property
    def regression(self) -> bool:
        """An HF head that may be a regressor (``HFHead.regression``, a sequence classifier's) is one with one
        label, unless its problem_type says otherwise."""
        problem = self.config.get("problem_type")
        return problem == _HF_REGRESSION or (problem is None and self.num_labels == 1)

    @property
    def num_labels(self) -> int:
        if "id2label" in self.config:
            return len(self.config["id2label"])
        return int(self.config.get("num_labels", 2))

    @property
    def labels(self) -> Optional[list]:
        """The label names by index (config.json's id2label), None where HF's defaults (LABEL_0...) stand."""
        id2label = self.config.get("id2label") or {}
        names = [id2label.get(str(i), id2label.get(i)) for i in range(len(id2label))]
        return None if all(n == f"LABEL_{i}" for i, n in enumerate(names)) else names

    def xlnet_config(self, **overrides):
        """The ``XLNetConfig`` of config.json (run-time knobs as keyword overrides); an InputError names a
        setting this stack computes differently (activation, LayerNorm epsilon, summary)."""
        from xlnet_tf.config import XLNetConfig

        return XLNetConfig.from_hf(self.config, f"{self.path}/config.json", **overrides)

    def summary(self) -> dict:
        """``summary_type``/``use_summ_proj`` of the classification and multiple-choice heads; an InputError for a
        summary this stack does not compute."""
        c, where = self.config, f"{self.path}/config.json"
        kind = c.get("summary_type", "last")
        if kind not in ("last", "first", "mean"):
            raise InputError(f"{where}: summary_type {kind!r} (this stack has 'last', 'first' and 'mean')")
        use_proj = bool(c.get("summary_use_proj", True))
        if use_proj and c.get("summary_proj_to_labels"):
            raise InputError(f"{where}: summary_proj_to_labels projects the summary to the labels; this stack's "
                             "summary projection keeps d_model")
        activation = c.get("summary_activation", "tanh")
        identity = activation in (None, "", "linear", "identity")
        if (activation != "tanh") if use_proj else not identity:  # HF applies the activation even without a projection
            raise InputError(f"{where}: summary_activation {activation!r} with summary_use_proj {use_proj} (this "
                             "stack: tanh after the projection, nothing without one)")
        return {"summary_type": kind, "use_summ_proj": use_proj}

    def tokenizer(self) -> dict:
        """``spiece_model`` (path) and the XLNetPreprocessor's casing arguments from tokenizer_config.json."""
        spiece = io_utils.join(self.path, "spiece.model")
        if not io_utils.exists(spiece):
            raise InputError(f"{self.source}: no spiece.model (XLNet's SentencePiece model) in this directory")
        values = {}
        path = io_utils.join(self.path, "tokenizer_config.json")
        if io_utils.exists(path):
            values = read_json(path)
        return {"spiece_model": spiece, "lower_case": bool(values.get("do_lower_case", False)),
                "remove_space": bool(values.get("remove_space", True)),
                "keep_accents": bool(values.get("keep_accents", False))}

    def tf1_tensors(self, task_scope: str = "task", network_only: bool = False) -> dict:
        """Every weight under its TF1 name (the backbone's ``model/transformer/...``, the head's as the matching
        model names it; ``task_scope`` for a sequence classifier). A token head (``token_head``) is left out. An
        InputError names any weight the mapping does not account for or a missing one. ``network_only``: the
        head of a task family that is not loaded (its names unregistered) is not read, the network is."""
        n_layer = self.xlnet_config().n_layer
        weights = dict(self.weights)
        where = f"{self.path}: {self.architecture or 'XLNet'}"
        out = {}

        def take(name):
            if name not in weights:
                raise InputError(f"{where}: weight {name!r} is missing")
            return weights.pop(name)

        t = "model/transformer/"
        out[t + "word_embedding/lookup_table"] = take("word_embedding.weight")
        out[t + "mask_emb/mask_emb"] = take("mask_emb")
        stacked = {name: [] for name in _STACKED}
        for i in range(n_layer):
            for hf_name, (tf1_name, transpose) in _LAYER.items():
                value = take(f"layer.{i}.{hf_name}")
                out[f"{t}layer_{i}/{tf1_name}"] = value.T if transpose else value
            for name in _STACKED:
                stacked[name].append(take(f"layer.{i}.rel_attn.{name}"))
        for name, values in stacked.items():
            out[t + name] = np.stack(values)
        if network_only and self.architecture is not None and self.architecture not in _architectures():
            return out
        head = self.head_mapping(task_scope)
        for hf_name, (tf1_name, transpose) in head.items():
            value = take(hf_name)
            out[tf1_name] = value.T if transpose else value
        if self.head == "XLNetPretrainer":
            tied = weights.pop("lm_loss.weight", None)  # tied to the embedding (safetensors drops the copy)
            if tied is not None and not np.array_equal(tied, out[t + "word_embedding/lookup_table"]):
                raise InputError(f"{where}: lm_loss.weight differs from word_embedding.weight (XLNet ties them)")
        if self.head == "per_token":
            for name in _token_module(self.weights):
                weights.pop(name, None)
        if weights:
            raise InputError(f"{where}: weight(s) this stack does not map: {', '.join(sorted(weights))}")
        return out

    def head_mapping(self, task_scope: str = "task") -> dict:
        """The head's {HF name: (TF1 name, transposed)}."""
        spec = registered_head(self.head)
        mapping = _head_mapping(self.head, task_scope, spec is not None and spec.regression and self.regression)
        if spec is not None and spec.summary and not self.summary()["use_summ_proj"]:
            mapping = {k: v for k, v in mapping.items() if k not in SUMMARY_NAMES}
        return mapping

    def token_head(self) -> dict:
        """The per-token projection of ``XLNetForTokenClassification`` (``classifier``) or
        ``XLNetForQuestionAnsweringSimple`` (``qa_outputs``): ``{"kernel": [d_model, num_labels], "bias":
        [num_labels]}``, applied as ``sequence_output @ kernel + bias`` (QA: column 0 start, 1 end logits).
        A token-tagging task model assigns these to its output layer."""
        spec = registered_head(self.head)
        if self.head != "per_token" and not (spec is not None and spec.per_token):
            raise InputError(f"{self.path}: {self.architecture or 'this model'} has no per-token head")
        module = _token_module(self.weights)
        return {"kernel": self.weights[module[0]].T, "bias": self.weights[module[1]]}


def token_head(path: str) -> dict:
    """``HFCheckpoint(path).token_head()``: the token-classification (or simple QA) projection's arrays."""
    return HFCheckpoint(path).token_head()


def _own_modules(spec: HFHead) -> set:
    """The first name components of ``spec``'s weights besides the sequence summary's."""
    return {name.split(".", 1)[0] for name in spec.mapping("task", False) if name not in SUMMARY_NAMES}


def _token_module(weights: dict) -> tuple:
    for module in ("classifier", "qa_outputs"):
        if f"{module}.weight" in weights:
            return f"{module}.weight", f"{module}.bias"
    raise InputError("token head: neither classifier.weight nor qa_outputs.weight is in the weights")


# -- writing ------------------------------------------------------------------------------------------------------
def hf_state(tf1: dict, config, head: Optional[str] = None, task_scope: str = "task", regression: bool = False,
             token_arrays: Optional[dict] = None) -> dict:
    """The inverse of ``HFCheckpoint.tf1_tensors``: {HF name: array} from {TF1 name: array} (a model's
    ``tf1_variables`` values). ``head`` as ``HFCheckpoint.head`` names it; a token head takes ``token_arrays``
    (``{"kernel", "bias"}``)."""
    t = "model/transformer/"
    prefix = "" if head is None else "transformer."
    state = {prefix + "word_embedding.weight": tf1[t + "word_embedding/lookup_table"],
             prefix + "mask_emb": tf1[t + "mask_emb/mask_emb"]}
    for i in range(config.n_layer):
        for hf_name, (tf1_name, transpose) in _LAYER.items():
            value = tf1[f"{t}layer_{i}/{tf1_name}"]
            state[f"{prefix}layer.{i}.{hf_name}"] = value.T if transpose else value
        for name in _STACKED:
            value = tf1[t + name]
            shared = name != "seg_embed" and not config.untie_r  # one set for all layers: HF repeats it
            state[f"{prefix}layer.{i}.rel_attn.{name}"] = value if shared else value[i]
    mapping = _head_mapping(head, task_scope, regression)
    for hf_name, (tf1_name, transpose) in mapping.items():
        if hf_name in SUMMARY_NAMES and tf1_name not in tf1:  # use_summ_proj=False: no summary projection
            continue
        state[hf_name] = tf1[tf1_name].T if transpose else tf1[tf1_name]
    if head == "XLNetPretrainer":
        state["lm_loss.weight"] = state["transformer.word_embedding.weight"]
    if head == "per_token":
        state["classifier.weight"], state["classifier.bias"] = token_arrays["kernel"].T, token_arrays["bias"]
    return {name: np.ascontiguousarray(value, np.float32) for name, value in state.items()}


def hf_config(config, architecture: str = "XLNetModel", labels: Optional[list] = None, regression: bool = False,
              summary_type: str = "last", use_summ_proj: bool = True, start_n_top: int = 5,
              end_n_top: int = 5) -> dict:
    """config.json of an ``XLNetConfig`` with the head ``architecture``; raises for what HF cannot compute."""
    if config.ff_activation not in _HF_ACTIVATIONS:
        raise InputError(f"ff_activation {config.ff_activation!r} has no HF equivalent")
    values = {"architectures": [architecture], "model_type": "xlnet", "vocab_size": config.n_token,
              "d_model": config.d_model, "n_layer": config.n_layer, "n_head": config.n_head,
              "d_inner": config.d_inner, "ff_activation": _HF_ACTIVATIONS[config.ff_activation], "untie_r": True,
              "attn_type": config.attn_type, "bi_data": config.bi_data, "clamp_len": config.clamp_len,
              "same_length": config.same_length, "initializer_range": config.initializer_range,
              "layer_norm_eps": 1e-12, "dropout": config.dropout,
              "mem_len": config.mem_len or None, "reuse_len": config.reuse_len,  # HF's null: no fixed memory
              "summary_type": summary_type, "summary_use_proj": use_summ_proj,
              "summary_activation": "tanh" if use_summ_proj else "linear",
              "summary_last_dropout": config.dropout, "start_n_top": start_n_top, "end_n_top": end_n_top,
              "pad_token_id": 5, "bos_token_id": 1, "eos_token_id": 2}
    if config.d_head * config.n_head != config.d_model:
        raise InputError(f"d_head={config.d_head} * n_head={config.n_head} != d_model={config.d_model}: HF's "
                         "XLNet derives d_head = d_model / n_head")
    if labels is not None:
        values["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
        values["label2id"] = {str(label): i for i, label in enumerate(labels)}
    if any(s.architecture == architecture and s.regression for s in HEADS.values()):
        values["problem_type"] = _HF_REGRESSION if regression else "single_label_classification"
    return values


def save_hf(output_dir: str, state: dict, config_json: dict, spiece_model: Optional[str] = None,
            lower_case: bool = False) -> str:
    """Writes an HF directory (config.json, model.safetensors, spiece.model, tokenizer_config.json) atomically;
    refuses an existing ``output_dir``."""
    from safetensors.numpy import save

    if io_utils.exists(output_dir):
        raise InputError(f"{output_dir} already exists; refusing to overwrite it")
    tokenizer = {"tokenizer_class": "XLNetTokenizer", "do_lower_case": lower_case, "remove_space": True,
                 "keep_accents": False, "padding_side": "left"}
    with io_utils.atomic_path(output_dir, last=("config.json",)) as tmp:
        io_utils.write_bytes_atomic(io_utils.join(tmp, "model.safetensors"), save(state, metadata={"format": "pt"}))
        io_utils.write_json_atomic(io_utils.join(tmp, "tokenizer_config.json"), tokenizer)
        if spiece_model:
            io_utils.copy(spiece_model, io_utils.join(tmp, "spiece.model"))
        io_utils.write_json_atomic(io_utils.join(tmp, "config.json"), config_json)
    return output_dir


def save_model(model, output_dir: str, spiece_model: Optional[str] = None, lower_case: bool = False,
               labels: Optional[list] = None, token_arrays: Optional[dict] = None) -> str:
    """Writes ``model`` (``XLNetModel``, ``XLNetPretrainer``, a registered head's model (``XLNetClassifier``,
    ``XLNetMultipleChoice``, ``XLNetSquad``, ``XLNetTagger``); an ``XLNetModel`` with ``token_arrays`` as
    ``XLNetForTokenClassification``) as an HF directory that ``transformers``' ``AutoModel*.from_pretrained`` loads.
    ``labels`` name a classifier's or tagger's classes (config.json's id2label)."""
    kind = type(model).__name__
    # model class -> (head, architecture): ARCHITECTURES' models (a per-token head has none; the bare network's class
    # is named as its architecture) and the registered heads
    heads = {head or architecture: (head, architecture) for architecture, head in ARCHITECTURES.items()
             if head != "per_token"}
    heads.update((s.head, (s.head, s.architecture)) for s in HEADS.values())
    if kind not in heads:
        raise InputError(f"{kind}: no HuggingFace XLNet class matches this model")
    if getattr(model, "num_segments", 1) > 1:
        # HF's classes read a text in one pass: the weights would load and predict other classes, no error said.
        raise InputError(f"{kind} reads a document in {model.num_segments} segments through memory "
                         "(--long_document=memory), which no HuggingFace XLNet class computes: export it as a "
                         "SavedModel (--format=saved_model)")
    head, architecture = heads[kind]
    if token_arrays is not None:
        if kind != "XLNetModel":
            raise InputError("token_arrays: a token head goes on an XLNetModel (the backbone)")
        head, architecture = "per_token", "XLNetForTokenClassification"
        labels = labels or [f"LABEL_{i}" for i in range(np.shape(token_arrays["bias"])[0])]
    tf1 = {name: np.asarray(var.numpy(), np.float32) for name, var in model.tf1_variables().items()}
    config = model.config
    regression = bool(getattr(model, "regression", False))
    if labelled_head(head):
        labels = labels or [f"LABEL_{i}" for i in range(model.num_labels)]
    extra = {}
    for name in ("summary_type", "start_n_top", "end_n_top"):
        if hasattr(model, name):
            extra[name] = getattr(model, name)
    if hasattr(model, "use_summ_proj"):
        extra["use_summ_proj"] = model.use_summ_proj
    state = hf_state(tf1, config, head, getattr(model, "task_scope", "task"), regression, token_arrays)
    return save_hf(output_dir, state, hf_config(config, architecture, labels, regression, **extra), spiece_model,
                   lower_case)
