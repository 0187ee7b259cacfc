"""XLNet configuration: the checkpoint-tied shape plus the run-time knobs.

The original release splits these in two (``XLNetConfig`` for what the weights fix, ``RunConfig`` for the
rest). Here they live in one validated object: ``XLNetConfig.from_json`` reads the release's
``xlnet_config.json`` and takes the run-time knobs as keyword overrides.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional

from xlnet_tf.errors import InputError
from xlnet_tf import io_utils
from xlnet_tf.io_utils import write_json_atomic

# Keys of the original release's xlnet_config.json: they are tied to the checkpoint.
CHECKPOINT_KEYS = ("d_head", "d_inner", "d_model", "ff_activation", "n_head", "n_layer", "n_token", "untie_r")
# How a fine-tuning head summarises a sequence (models.heads.SequenceSummary; --summary_type). Here, not in
# heads.py, so that settings validation has it without importing TensorFlow.
SUMMARY_TYPES = ("last", "first", "mean")
# 'gelu' is the original's tanh approximation; 'gelu_exact' the erf GELU of HuggingFace's XLNet checkpoints.
FF_ACTIVATIONS = ("gelu", "gelu_exact", "relu")
# HuggingFace's ff_activation names -> ours: its "gelu" is the erf GELU, the original's is its "gelu_new".
HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu"}


@dataclasses.dataclass(frozen=True)
class XLNetConfig:
    """Shape and run-time settings of an XLNet network.

    Checkpoint-tied (as in the release's ``xlnet_config.json``):
      n_token: vocabulary size.        n_layer: number of layers.
      d_model: hidden size.            n_head / d_head: attention heads and their width.
      d_inner: feed-forward width.     ff_activation: 'gelu' (tanh approximation), 'gelu_exact' (erf, HF's
                                       "gelu") or 'relu'.
      untie_r: one set of r_w/r_r/r_s biases per layer (True for the released models) or one shared set.
    Run-time:
      mem_len: Transformer-XL memory kept per layer (0 = none).
      reuse_len: leading positions of a segment that are cached as memory (None = all).
      clamp_len: clip relative distances to +-clamp_len (-1 = no clipping).
      same_length: with attn_type 'uni', every position attends to the same number of keys.
      bi_data: the batch's first half is read forward, the second half backward (pretraining).
      attn_type: 'bi' (XLNet) or 'uni' (Transformer-XL causal attention).
      dropout, dropatt: dropout on hidden states and on attention probabilities.
      initializer_range: std of the normal initializer of freshly created weights.
    """

    n_token: int = 32000
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_head: int = 64
    d_inner: int = 3072
    ff_activation: str = "gelu"
    untie_r: bool = True
    mem_len: int = 0
    reuse_len: Optional[int] = None
    clamp_len: int = -1
    same_length: bool = False
    bi_data: bool = False
    attn_type: str = "bi"
    dropout: float = 0.1
    dropatt: float = 0.1
    initializer_range: float = 0.02

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = _python_scalar(getattr(self, field.name))
            object.__setattr__(self, field.name, value)  # frozen: the dataclass's own way round it
            _check_type(field.name, value, field.type)
            if isinstance(value, float) and not math.isfinite(value):
                raise InputError(f"XLNetConfig: {field.name} must be a finite number, got {value}")
        for name in ("n_token", "n_layer", "d_model", "n_head", "d_head", "d_inner"):
            if getattr(self, name) <= 0:
                raise InputError(f"XLNetConfig: {name} must be positive, got {getattr(self, name)}")
        if self.d_model % 2:
            raise InputError(f"XLNetConfig: d_model must be even for the sinusoid encoding, got {self.d_model}")
        if self.ff_activation not in FF_ACTIVATIONS:
            raise InputError(f"XLNetConfig: ff_activation must be one of {', '.join(FF_ACTIVATIONS)}, got "
                             f"{self.ff_activation!r}")
        if self.attn_type not in ("bi", "uni"):
            raise InputError(f"XLNetConfig: attn_type must be 'bi' or 'uni', got {self.attn_type!r}")
        if self.mem_len < 0:
            raise InputError(f"XLNetConfig: mem_len must be >= 0, got {self.mem_len}")
        if self.reuse_len is not None and self.reuse_len < 0:
            raise InputError(f"XLNetConfig: reuse_len must be >= 0 or None, got {self.reuse_len}")
        if self.clamp_len == 0 or self.clamp_len < -1:
            raise InputError(f"XLNetConfig: clamp_len must be -1 (off) or positive, got {self.clamp_len}")
        for name in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise InputError(f"XLNetConfig: {name} must be in [0, 1), got {getattr(self, name)}")
        if self.initializer_range <= 0:
            raise InputError(f"XLNetConfig: initializer_range must be positive, got {self.initializer_range}")

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config", **overrides) -> "XLNetConfig":
        """Builds a config from a dict (e.g. a parsed xlnet_config.json) plus keyword overrides."""
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(values, dict):
            raise InputError(f"{source}: an XLNet config is a dict of settings, got {type(values).__name__}")
        merged = dict(values)
        merged.update(overrides)
        unknown = sorted(set(merged) - known)
        if unknown:
            raise InputError(f"{source}: unknown XLNet config key(s) {unknown}; known keys: {sorted(known)}")
        try:
            return cls(**merged)
        except ValueError as e:
            raise InputError(f"{source}: {e}") from None

    @classmethod
    def from_json(cls, path: str | os.PathLike, **overrides) -> "XLNetConfig":
        """Reads an ``xlnet_config.json`` (the release's or ours) or a HuggingFace XLNet ``config.json``; run-time
        knobs come as keyword overrides.

        Example: ``XLNetConfig.from_json("xlnet_cased_L-12_H-768_A-12/xlnet_config.json", mem_len=384)``.
        """
        path = os.fspath(path)
        values = io_utils.read_mapping(path, "json", missing=None, expected="a JSON object", finite=True)
        if values.get("model_type") == "xlnet":  # a HuggingFace config.json
            return cls.from_hf(values, path, **overrides)
        # The original's train.py carries an unused d_embed flag that some configs include.
        values.pop("d_embed", None)
        return cls.from_dict(values, source=path, **overrides)

    @classmethod
    def from_hf(cls, c: dict[str, Any], source: str = "config.json", **overrides) -> "XLNetConfig":
        """The config of a HuggingFace XLNet ``config.json`` (its parsed values ``c``); an InputError naming
        ``source`` for a setting this stack computes differently (LayerNorm epsilon, activation)."""
        activation = c.get("ff_activation", "gelu")
        if activation not in HF_ACTIVATIONS:
            raise InputError(f"{source}: ff_activation {activation!r} is not one of {sorted(HF_ACTIVATIONS)}")
        bad = io_utils.non_finite_keys(c)
        if bad:
            raise InputError(f"{source}: {', '.join(bad[:5])} is not a finite number (NaN or infinity)")
        eps = c.get("layer_norm_eps", 1e-12)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or abs(float(eps) - 1e-12) > 1e-15:
            raise InputError(f"{source}: layer_norm_eps {c['layer_norm_eps']} (this stack's LayerNorms use "
                             "XLNet's 1e-12)")
        clamp_len = c.get("clamp_len") or -1
        if not isinstance(clamp_len, (int, float)) or isinstance(clamp_len, bool):
            raise InputError(f"{source}: clamp_len must be a number, got {clamp_len!r}")
        # HF's null (or 0) mem_len keeps every past state when memory is asked for (use_mems): no fixed memory,
        # which here is 0; its dropout is also the attention probabilities' (it has no dropatt).
        mem_len, reuse_len, dropout = c.get("mem_len") or 0, c.get("reuse_len") or None, c.get("dropout", 0.1)
        values = dict(n_token=c.get("vocab_size", 32000), n_layer=c.get("n_layer", 24),
                      d_model=c.get("d_model", 1024), n_head=c.get("n_head", 16), d_inner=c.get("d_inner", 4096),
                      ff_activation=HF_ACTIVATIONS[activation], untie_r=True,  # HF keeps r_*_bias per layer
                      attn_type=c.get("attn_type", "bi"), bi_data=bool(c.get("bi_data", False)),
                      clamp_len=clamp_len if clamp_len > 0 else -1, same_length=bool(c.get("same_length", False)),
                      initializer_range=c.get("initializer_range", 0.02), mem_len=mem_len, reuse_len=reuse_len,
                      dropout=dropout, dropatt=dropout)
        d_model, n_head = values["d_model"], values["n_head"]
        if isinstance(d_model, int) and isinstance(n_head, int) and n_head > 0:
            # HF derives d_head and refuses what it cannot: a d_model heads do not divide, another d_head
            if d_model % n_head:
                raise InputError(f"{source}: d_model {d_model} is not a multiple of n_head {n_head} (HuggingFace "
                                 "refuses it too)")
            if c.get("d_head", d_model // n_head) != d_model // n_head:
                raise InputError(f"{source}: d_head {c['d_head']!r} is not d_model / n_head = {d_model // n_head} "
                                 "(HuggingFace refuses it too)")
            values["d_head"] = d_model // n_head
        return cls.from_dict(values, source=source, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | os.PathLike, checkpoint_keys_only: bool = False) -> None:
        """Writes the config as JSON (atomically). ``checkpoint_keys_only`` writes the release's layout."""
        values = self.to_dict()
        if checkpoint_keys_only:
            values = {k: values[k] for k in CHECKPOINT_KEYS}
        path = os.fspath(path)
        if io_utils.probe(path, "dir"):
            raise InputError(f"{path}: is a directory; XLNetConfig.to_json writes a file (e.g. "
                             f"{io_utils.join(path, 'xlnet_config.json')})")
        write_json_atomic(path, values)

    def replace(self, **changes) -> "XLNetConfig":
        return self.from_dict(self.to_dict(), source="XLNetConfig.replace", **changes)


def _python_scalar(value: Any) -> Any:
    """A numpy scalar (a config built from arrays' values) as the Python one its checks, equality and JSON read;
    others as they are. (numpy is not imported here: settings read configs before the heavy imports.)"""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def _check_type(name: str, value: Any, annotation: str) -> None:
    """Rejects values of the wrong type (JSON gives us floats for ints, strings for bools, ...)."""
    annotation = str(annotation)
    optional = annotation.startswith("Optional[")
    if optional:
        if value is None:
            return
        annotation = annotation[len("Optional["):-1]
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
    }[annotation]
    if not ok:
        raise InputError(f"XLNetConfig: {name} must be {'an optional ' if optional else ''}{annotation}, "
                         f"got {value!r} ({type(value).__name__})")
