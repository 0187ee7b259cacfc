"""Typed settings: how a setting is declared, what pretraining and fine-tuning share (``RunSettings``) and what
each adds.

Field names are the flag names of the command-line tools, field defaults the flags' defaults, and each field
carries its help text (``setting``): ``xlnet_tf.cli.flags`` defines one flag per field from these classes and
builds them from the parsed flags. The library takes these objects, never the flags. ``validate()`` reports every
inconsistency at once as a ``SettingsError`` (an ``xlnet_tf.errors.InputError``) before any work; this module
does not import TensorFlow, so a tool checks its settings before TensorFlow loads. Paths may be URIs (gs://,
file://, ...): a local path is checked at once, a URI once TensorFlow is loaded (``io_utils.probe``; the library
validates its settings again then), with the same message.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, ClassVar, Collection, Mapping, Optional

from xlnet_tf import io_utils
from xlnet_tf.data.manifest import manifest_name
from xlnet_tf.errors import InputError
from xlnet_tf.objectives import OBJECTIVES

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")
DECAY_METHODS = ("poly", "cos")


class SettingsError(InputError):
    """Settings, or inputs they name, that cannot work; the tools report it as a usage error."""


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a number setting may take: ``minimum``/``maximum`` inclusive, ``above``/``below`` exclusive."""

    minimum: Optional[float] = None
    above: Optional[float] = None
    maximum: Optional[float] = None
    below: Optional[float] = None

    def holds(self, value) -> bool:
        return not ((self.minimum is not None and value < self.minimum) or (self.above is not None and
                    value <= self.above) or (self.maximum is not None and value > self.maximum) or
                    (self.below is not None and value >= self.below))

    def __str__(self) -> str:
        """As the errors say it: "positive", ">= 1", "< 1", "in [0, 1)"."""
        low = f"[{self.minimum}" if self.minimum is not None else f"({self.above}" if self.above is not None else ""
        high = f"{self.maximum}]" if self.maximum is not None else f"{self.below})" if self.below is not None else ""
        if low and high:
            return f"in {low}, {high}"
        if high:
            return f"<= {self.maximum}" if self.maximum is not None else f"< {self.below}"
        if self.minimum is not None:
            return f">= {self.minimum}"
        return "positive" if self.above == 0 else f"> {self.above}"


def setting(default, help: str, *, choices: Optional[Collection] = None, positional=False,  # noqa: A002
            minimum=None, above=None, maximum=None, below=None):
    """A settings field with its flag's help and, for ``choices`` (values, or a registry whose keys are read when
    the flag is defined), an enum flag. ``positional``: a command-line argument, not a flag (``python -m
    xlnet_tf.cli.jobs finetune JOB.yaml``); ``positional="rest"`` (the last field): every remaining argument, as a
    tuple (a command to run, after ``--``). ``minimum``/``maximum`` (inclusive), ``above``/``below``
    (exclusive): the values a number may take (``Bounds``; ``validate`` names a value outside them, None passes).
    A subclass that only changes a default writes a plain default: the help and bounds are the base class's."""
    metadata = dict(help=help, choices=choices, positional=positional)
    if any(b is not None for b in (minimum, above, maximum, below)):
        metadata["bounds"] = Bounds(minimum, above, maximum, below)
    return dataclasses.field(default=default, metadata=metadata)


def field_metadata(settings_cls, name: str, required: bool = True) -> dict:
    """The ``setting`` metadata (help, choices, positional, bounds) of field ``name``: the nearest class in the
    MRO that declares it with a help (a subclass overriding only the default keeps its base's). A field without
    one raises TypeError (a flag needs a help), or gives {} where not ``required``."""
    for klass in settings_cls.__mro__:
        field = getattr(klass, "__dataclass_fields__", {}).get(name)
        if field is not None and field.metadata.get("help"):
            return dict(field.metadata)
    if not required:
        return {}
    raise TypeError(f"{settings_cls.__name__}.{name} has no help: declare it with setting(default, help)")


def setting_of(settings_cls, name: str, default=dataclasses.MISSING, help_suffix: str = ""):  # noqa: A002
    """The field ``name`` of ``settings_cls`` again (its help, choices and, unless given, default), for a settings
    class that has it without inheriting it: one definition, one default. ``help_suffix``: what the flag means
    besides, e.g. where its default comes from."""
    field = {f.name: f for f in dataclasses.fields(settings_cls)}[name]
    return dataclasses.field(default=field.default if default is dataclasses.MISSING else default,
                             metadata=dict(field.metadata, help=field.metadata["help"] + help_suffix))


def out_of_bounds(settings_cls, name: str, value) -> Optional[str]:
    """"must be ..." where the number ``value`` is outside the ``Bounds`` of field ``name``, else None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    bounds = field_metadata(settings_cls, name, required=False).get("bounds")
    return None if bounds is None or bounds.holds(value) else f"must be {bounds}"


def not_a_choice(settings_cls, name: str, value) -> Optional[str]:
    """"must be one of ..." where ``value`` is not among the ``choices`` of field ``name`` (read now: a registry
    has the modules loaded since the flag was defined), else None. None passes: the field's "unset"."""
    choices = field_metadata(settings_cls, name, required=False).get("choices")
    if choices is None or value is None or value in choices:
        return None
    return f"must be one of {', '.join(map(str, choices))}"


@dataclasses.dataclass(frozen=True)
class Alias:
    """An original flag name kept for old command lines (declared in a settings class's ``ORIGINAL_FLAGS``): a
    flag of ``target``'s type that sets ``target`` when given (``Alias("data_dir", ...)`` for
    ``--record_info_dir``), or, with ``value``, a boolean switch that sets ``target`` to ``value``
    (``Alias("strategy", ..., value="tpu")`` for ``--use_tpu``)."""

    target: str
    help: str
    value: Any = None


@dataclasses.dataclass(frozen=True)
class Ignored:
    """An original flag that is accepted and has no effect (declared in ``ORIGINAL_FLAGS``); ``kind`` is its type
    where ``default`` does not say it (None)."""

    default: Any
    help: str
    kind: Optional[type] = None


def path_missing(path: str, kind: str = "exists") -> bool:
    """True if ``path`` certainly does not exist (``kind`` "dir": is not a directory); a URI counts as present
    until TensorFlow is loaded (``io_utils.probe``)."""
    return io_utils.probe(path, kind) is False


def output_dir_problem(path: str) -> Optional[str]:
    """Why the tool could not write into the directory ``path`` (it, or a parent, is a file; the nearest existing
    parent is not writable), or None. Local paths only: an object store's permissions show on the first write."""
    if io_utils.is_uri(path):
        return None
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        return "is a file, not a directory"
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write in {parent} (permission denied)"
    return None


def checkpoint_exists(path: str) -> bool:
    """A checkpoint prefix, a directory of checkpoints (a URI: see ``missing``) or a HuggingFace model."""
    from xlnet_tf import hf

    return hf.is_hf_dir(path) or not (path_missing(path) and path_missing(path + ".index"))


@dataclasses.dataclass
class Settings:
    """Base of every tool's settings: ``errors()`` lists every problem (naming the flags), ``validate()`` raises
    them together as one ``SettingsError``."""

    # Original flag names the tool keeps accepting: {name: Alias | Ignored}.
    ORIGINAL_FLAGS: ClassVar[Mapping] = {}
    # Fields the tool inherits but takes no flag for (they keep their defaults): {name: what to use instead}, said
    # when the flag is given anyway (on the command line or in a config file).
    NOT_FLAGS: ClassVar[Mapping] = {}

    @classmethod
    def from_values(cls, values: Mapping):
        """The settings named in ``values`` (other keys are ignored; missing fields keep their defaults)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def required(self) -> tuple:
        """Flags that must be set."""
        return ()

    def input_files(self) -> tuple:
        """Flags naming files that must exist when set."""
        return ()

    def output_dirs(self) -> tuple:
        """Flags naming directories the tool writes into (created if missing): checked before any work, so that a
        file in the way or a read-only parent is not found after minutes of it."""
        return ()

    def awaiting(self) -> tuple:
        """Flags not set yet that may get their values once TensorFlow is loaded (from beside a URI): not missing
        until then."""
        return ()

    def missing_note(self, missing: list) -> str:
        """Where the tool looked for the ``missing`` required flags (names), said after them; "" if nowhere."""
        return ""

    def errors(self) -> list:
        """Every inconsistency, as messages naming the flags."""
        awaiting = self.awaiting()
        missing = [name for name in self.required() if getattr(self, name) in (None, "") and name not in awaiting]
        note = missing and self.missing_note(missing)
        errors = [f"missing required flag(s): {', '.join('--' + name for name in missing)}" +
                  (f" ({note})" if note else "")] if missing else []
        errors += [f"--{name}={getattr(self, name)}: file not found" for name in self.input_files()
                   if getattr(self, name) and path_missing(getattr(self, name))]
        # absl's float flags and YAML (.nan, .inf) take non-finite numbers; no setting means one, and every
        # comparison with NaN is False: "--learning_rate=nan" would pass "must be positive".
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                errors.append(f"--{f.name}={value}: not a finite number")
            elif problem := out_of_bounds(type(self), f.name, value):
                errors.append(f"--{f.name}={value} {problem}")
            elif problem := not_a_choice(type(self), f.name, value):
                errors.append(f"--{f.name}={value!r} {problem}")
        for name in self.output_dirs():
            problem = getattr(self, name) and output_dir_problem(getattr(self, name))
            if problem:
                errors.append(f"--{name}={getattr(self, name)}: {problem}")
        return errors

    def validate(self):
        """Raises ``SettingsError`` naming every problem; returns the settings."""
        errors = self.errors()
        if errors:
            raise SettingsError("; ".join(errors))
        return self


@dataclasses.dataclass
class RunSettings(Settings):
    """What every run has: model, machines, precision, optimisation, checkpoints."""

    model_dir: Optional[str] = setting(None, "Checkpoints, TensorBoard summaries and results; a rerun with the same "
                                       "--model_dir resumes from its last checkpoint.")
    model_config_path: Optional[str] = setting(None, "xlnet_config.json of the model shape.")
    init_checkpoint: Optional[str] = setting(None, "Warm start: the original TF1 release checkpoint "
                                             "(xlnet_model.ckpt) or a native checkpoint (its directory's "
                                             "xlnet_config.json and spiece.model are the defaults of "
                                             "--model_config_path and --spiece_model_file), or an HF model.")
    spiece_model_file: Optional[str] = setting(None, "SentencePiece model of the model (and data).")
    uncased: bool = setting(False, "Lower-case text (uncased models; must match the data).")
    strategy: str = setting("one_device", "tf.distribute strategy.", choices=STRATEGIES)
    tpu: Optional[str] = setting(None, "With --strategy=tpu: the TPU's name (Cloud TPU), grpc://HOST:8470, or "
                                 "'local' (a TPU VM's own chips).")
    tpu_zone: Optional[str] = setting(None, "With a TPU name: its GCE zone (default: from the VM's metadata).")
    gcp_project: Optional[str] = setting(None, "With a TPU name: its GCP project (default: from the VM's metadata).")
    tpu_timeout: int = setting(120, "Seconds to find, connect to and initialise the TPU before the run fails.",
                               above=0)
    worker_timeout: int = setting(600, "With --strategy=multi_worker: seconds for every task of TF_CONFIG's cluster "
                                  "to start and join before the run fails, naming the missing ones (long: a "
                                  "scheduler may start workers minutes apart).", above=0)
    dtype: str = setting("float32", "Precision policy (mixed_bfloat16 on TPU and CPUs with AMX or AVX512-BF16, "
                         "mixed_float16 with dynamic loss scaling on GPU).", choices=DTYPES)
    seed: int = setting(0, "Seed of weight initialisation, dropout, data order and factorization orders.",
                        minimum=0)
    deterministic: bool = setting(False, "Reruns with the same flags give bit-identical weights: TensorFlow's op "
                                  "determinism, and on CPUs oneDNN off (its matmuls sum in an order that depends on "
                                  "the thread that runs them; steps ~1.5x slower).")
    dropout: float = setting(0.1, "Dropout rate.", minimum=0, below=1)
    dropatt: float = setting(0.1, "Attention dropout rate.", minimum=0, below=1)
    clamp_len: int = setting(-1, "Clamp relative distances (-1 = off).", minimum=-1)
    # Optimisation and checkpoints.
    train_batch_size: Optional[int] = setting(8, "Global training batch size (all replicas).")
    train_steps: Optional[int] = setting(1000, "Total optimizer steps.")
    iterations: int = setting(1000, "Steps per host loop (one tf.function call; pretraining memory restarts per "
                              "loop).", minimum=1)
    save_steps: Optional[int] = setting(None, "Checkpoint every N steps (default: at the end).", above=0)
    max_save: int = setting(5, "Checkpoints kept (0 = all).", minimum=0)
    learning_rate: float = setting(1e-5, "Peak learning rate.", above=0)
    warmup_steps: int = setting(0, "Linear warmup steps.", minimum=0)
    decay_method: str = setting("poly", "Decay after warmup.", choices=DECAY_METHODS)
    min_lr_ratio: float = setting(0.0, "Final learning rate / peak.", minimum=0, maximum=1)
    weight_decay: float = setting(0.0, "Decoupled weight decay (LayerNorm and biases excluded).", minimum=0)
    adam_epsilon: float = setting(1e-8, "Adam epsilon.", above=0)
    adam_bias_correction: bool = setting(True, "Adam's step size lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), as the "
                                         "original's tf.train.AdamOptimizer (--weight_decay=0). false: lr, as its "
                                         "AdamWeightDecayOptimizer (--weight_decay > 0): early steps larger, 3.2x "
                                         "at step 1, 6.5x at 10, 1.26x at 1000.")
    clip: float = setting(1.0, "Global gradient-norm clip (<= 0: off).")

    ORIGINAL_FLAGS: ClassVar[Mapping] = {
        "use_tpu": Alias("strategy", "Original flag: same as --strategy=tpu.", value="tpu"),
        "use_bfloat16": Alias("dtype", "Original flag: same as --dtype=mixed_bfloat16.", value="mixed_bfloat16"),
    }
    # Global batch sizes: positive, and divisible by the replicas of the strategy.
    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size",)

    # What a release directory, a converted checkpoint's or a pretraining run's --init_checkpoint brings: {flag: the
    # file beside it}.
    BESIDE_INIT_CHECKPOINT: ClassVar[Mapping] = {"model_config_path": "xlnet_config.json",
                                                 "spiece_model_file": "spiece.model"}

    def __post_init__(self):
        self._defaults_from_init_checkpoint()

    def _defaults_from_init_checkpoint(self) -> None:
        """The flags not given that ``--init_checkpoint`` brings: a HuggingFace model (a directory, or
        hf://owner/name: found in the HF cache or downloaded now, as asked) its config.json, spiece.model and
        casing; a release's, a converted checkpoint's or a pretraining run's directory its xlnet_config.json and
        spiece.model. A URI (gs://...) is looked at once TensorFlow is loaded: ``validate()`` calls this again."""
        from xlnet_tf import hf

        if not self.init_checkpoint or self._init_checkpoint_unseen():
            return
        # An empty path is unset, as everywhere ("--model_config_path=" clears a config file's value): it takes
        # the file beside the checkpoint too.
        if not hf.is_hf_dir(self.init_checkpoint):
            for flag, name in self.BESIDE_INIT_CHECKPOINT.items():
                if not getattr(self, flag):
                    setattr(self, flag, io_utils.beside(self.init_checkpoint, name))
            return
        self.init_checkpoint = hf.resolve(self.init_checkpoint)
        folder = self.init_checkpoint
        if not self.model_config_path:
            self.model_config_path = io_utils.join(folder, "config.json")
        if not self.spiece_model_file and io_utils.exists(io_utils.join(folder, "spiece.model")):
            self.spiece_model_file = io_utils.join(folder, "spiece.model")
        self.uncased = self.uncased or bool(self._hf_lower_case())

    def _init_checkpoint_unseen(self) -> bool:
        """A URI ``--init_checkpoint`` while TensorFlow is not loaded: nothing beside it can be looked at yet."""
        from xlnet_tf import hf

        return (bool(self.init_checkpoint) and not hf.is_hub(self.init_checkpoint)
                and io_utils.probe(self.init_checkpoint) is None)

    def awaiting(self) -> tuple:
        if not self._init_checkpoint_unseen():
            return ()
        return tuple(flag for flag in self.BESIDE_INIT_CHECKPOINT if not getattr(self, flag))

    def missing_note(self, missing: list) -> str:
        absent = [name for flag, name in self.BESIDE_INIT_CHECKPOINT.items() if flag in missing]
        return (f"no {' or '.join(absent)} beside --init_checkpoint={self.init_checkpoint}"
                if absent and self.init_checkpoint else "")

    def validate(self):
        if self.init_checkpoint and io_utils.is_uri(self.init_checkpoint):
            self._defaults_from_init_checkpoint()  # once TensorFlow is loaded (the tools load it for URIs)
        return super().validate()

    def _hf_lower_case(self) -> Optional[bool]:
        """The casing of an HF ``--init_checkpoint`` (its tokenizer_config.json), None if it says none (or the
        checkpoint is not an HF directory)."""
        from xlnet_tf import hf

        if not (self.init_checkpoint and hf.is_hf_dir(self.init_checkpoint)):
            return None
        tokenizer = io_utils.join(hf.resolve(self.init_checkpoint), "tokenizer_config.json")
        return bool(io_utils.read_json(tokenizer).get("do_lower_case", False)) if io_utils.exists(tokenizer) else None

    # -- what subclasses say about themselves --------------------------------------------------------------
    def required(self) -> tuple:
        return ("model_dir", "model_config_path")

    def output_dirs(self) -> tuple:
        return ("model_dir",)

    def input_files(self) -> tuple:
        return ("model_config_path", "spiece_model_file")

    def trains(self) -> bool:
        return True

    def errors(self) -> list:
        errors = super().errors()
        if self.strategy == "tpu":
            if not self.tpu:
                errors.append("--strategy=tpu (--use_tpu) needs --tpu (name, grpc:// address, or 'local')")
            if self.dtype == "mixed_float16":
                errors.append("--dtype=mixed_float16 with --strategy=tpu: TPUs compute in bfloat16; use "
                              "--dtype=mixed_bfloat16 (--use_bfloat16)")
        else:
            stray = [f"--{name}" for name in ("tpu", "tpu_zone", "gcp_project") if getattr(self, name)]
            if stray:
                errors.append(f"{', '.join(stray)} given, but --strategy={self.strategy}: add --strategy=tpu "
                              "(or --use_tpu)")
        for name in self.BATCH_SIZES:
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                errors.append(f"--{name}={getattr(self, name)} must be positive")
        if self.uncased and self._hf_lower_case() is False:
            errors.append(f"--uncased, but --init_checkpoint={self.init_checkpoint} is a cased model "
                          "(tokenizer_config.json: do_lower_case false)")
        if self.init_checkpoint and not checkpoint_exists(self.init_checkpoint):
            errors.append(f"--init_checkpoint={self.init_checkpoint}: no such checkpoint (give the prefix, e.g. "
                          ".../xlnet_model.ckpt, a directory, or a native checkpoint)")
        # Optional for pretraining's sake (no default there: required); a run that trains needs them, and a
        # config file's null would otherwise fail in the optimizer, after the data was encoded.
        unset = [name for name in ("train_batch_size", "train_steps")
                 if self.trains() and getattr(self, name) is None and name not in self.required()]
        if unset:
            errors.append(f"{', '.join('--' + name for name in unset)}: unset (null), but the run trains: give "
                          f"{'them' if len(unset) > 1 else 'it'} a value")
        if self.trains() and self.train_steps is not None:
            if self.train_steps <= 0:
                errors.append(f"--train_steps={self.train_steps} must be positive")
            elif self.warmup_steps >= self.train_steps:
                errors.append(f"--warmup_steps={self.warmup_steps} must be below --train_steps={self.train_steps}")
        return errors

    # -- derived -----------------------------------------------------------------------------------------
    @property
    def checkpoint_every(self) -> int:
        """Steps between checkpoints (default: one at the end)."""
        return self.save_steps if self.save_steps and self.save_steps > 0 else self.train_steps

    @property
    def steps_per_loop(self) -> int:
        """Steps per host loop: checkpoints fall on host-loop boundaries, so a loop never crosses a save step."""
        return max(1, min(self.iterations, self.checkpoint_every))


@dataclasses.dataclass
class PretrainDataSettings:
    """The shape of pretraining data, shared by run_pretrain.py (which must match the data it reads, and writes
    it from ``input_glob`` when ``data_dir`` holds none) and ``python -m xlnet_tf.cli.create_data`` (which writes
    it): one definition and one default each, so data written with the defaults trains with the defaults. The
    shape has no default: a run names its model's."""

    input_glob: Optional[str] = setting(None, "Text files (comma-separated globs; one sentence per line, a blank "
                                        "line between documents) to write the pretraining data from.")
    num_core_per_host: Optional[int] = setting(None, "Replicas (cores/GPUs) per host that split a host batch: "
                                               "the data is laid out for them (default: run_pretrain.py: the "
                                               "strategy's replicas; create_data: 1).", minimum=1)
    seq_len: Optional[int] = setting(None, "Sequence length.", minimum=1)
    reuse_len: Optional[int] = setting(None, "Leading tokens of a sequence cached as memory for the next step.",
                                       minimum=0)
    num_predict: Optional[int] = setting(None, "Predicted tokens per sequence (exact).", minimum=1)
    bi_data: bool = setting(False, "Bidirectional data: every core also reads its rows backward (half of each "
                            "batch; data and training must agree).")
    mask_alpha: int = setting(6, "Span masking: context tokens per predicted span unit (with --mask_beta).", minimum=1)
    mask_beta: int = setting(1, "Span masking: predicted tokens per --mask_alpha tokens of context.", minimum=1)


DATA_DEFAULT = (" Default: the data's, where --data_dir holds data (a value given must be the data's); else "
                "create_data's.")


@dataclasses.dataclass
class PretrainSettings(RunSettings, PretrainDataSettings):
    """run_pretrain.py: a pretraining objective (XLNet's permutation LM by default) on the TFRecords in
    ``data_dir``."""

    objective: str = setting("plm", "Pretraining objective: plm (XLNet's permutation LM), pmlm (UniLMv2's "
                             "pseudo-masked LM) or mpnet (MPNet); every one trains the same network (see "
                             "docs/objectives.md).", choices=OBJECTIVES)
    input_glob: Optional[str] = setting_of(PretrainDataSettings, "input_glob", help_suffix=" Read only where "
                                           "--data_dir holds no data yet.")
    data_dir: Optional[str] = setting(None, "Directory of pretraining data (written by python -m "
                                      "xlnet_tf.cli.create_data, or from --input_glob).")
    mem_len: int = setting(0, "Transformer-XL memory length (0 = none).", minimum=0)
    perm_size: Optional[int] = setting(None, "Local permutation block size (default: reuse_len).", minimum=1)
    same_length: bool = setting(False, "Same attention length for every position ('uni' only).")
    grad_accum_steps: int = setting(1, "Micro-batches per optimizer step (train_batch_size is per micro-batch).",
                                    minimum=1)
    jit_compile: bool = setting(False, "Compile the training step with XLA.")
    # Defaults of run_pretrain.py where they differ: the shape flags have none (a run names its model).
    train_batch_size: Optional[int] = setting_of(RunSettings, "train_batch_size", None,
                                                 help_suffix=" Per micro-batch with --grad_accum_steps.")
    train_steps: Optional[int] = None
    learning_rate: float = 1e-4
    min_lr_ratio: float = 0.001
    # Data-writing settings: given, they must be the data's; not given, the data's (the defaults when writing it).
    mask_alpha: Optional[int] = setting_of(PretrainDataSettings, "mask_alpha", None, help_suffix=DATA_DEFAULT)
    mask_beta: Optional[int] = setting_of(PretrainDataSettings, "mask_beta", None, help_suffix=DATA_DEFAULT)

    ORIGINAL_FLAGS: ClassVar[Mapping] = dict(RunSettings.ORIGINAL_FLAGS,
                                             record_info_dir=Alias("data_dir", "Original name of --data_dir."))

    def required(self) -> tuple:
        return super().required() + ("data_dir", "train_batch_size", "seq_len", "reuse_len", "num_predict",
                                     "train_steps")

    def errors(self) -> list:
        errors = super().errors()
        # --input_glob is read only to write the data, where --data_dir holds none yet.
        if self.input_glob and not (self.data_dir and io_utils.probe(io_utils.join(self.data_dir, manifest_name()))):
            if not self.spiece_model_file and "spiece_model_file" not in self.awaiting():
                errors.append("--input_glob needs --spiece_model_file to write the data")
            errors += io_utils.unmatched_globs(self.input_glob, "--input_glob")
        if self.objective in OBJECTIVES:  # else Settings.errors named it
            errors += OBJECTIVES[self.objective].settings_errors(self)
        return errors

    @property
    def permutation_size(self) -> Optional[int]:
        """``perm_size``, by default ``reuse_len``."""
        return self.perm_size or self.reuse_len


@dataclasses.dataclass
class FinetuneSettings(RunSettings):
    """What run_classifier.py and run_squad.py share: the stages to run, cached features, outputs."""

    output_dir: Optional[str] = setting(None, "Cached encoded features (default: in --model_dir).")
    overwrite_data: bool = setting(False, "Re-encode the data even if cached features exist.")
    predict_dir: Optional[str] = setting(None, "Prediction files (default: <model_dir>/predict).")
    export_dir: Optional[str] = setting(None, "Write a TF Serving SavedModel of the fine-tuned model here.")
    max_seq_length: int = setting(128, "Sequence length (tokens, incl. <sep>/<cls>).")
    shuffle_buffer: int = setting(2048, "Training records are shuffled within consecutive windows of this many, in "
                                  "a new order every epoch.", minimum=1)
    do_train: bool = setting(False, "Fine-tune.")
    do_eval: bool = setting(False, "Evaluate (the task's official metrics), logged, written to the model "
                            "directory and to TensorBoard.")
    do_predict: bool = setting(False, "Write predictions.")
    predict_ckpt: Optional[str] = setting(None, "Checkpoint for eval/predict/export (default: the latest in "
                                          "--model_dir).")
    lr_layer_decay_rate: float = setting(1.0, "Layer-wise learning rates: layer l of L trains at lr * "
                                         "rate^(L-1-l), the embeddings at lr * rate^L, the heads at lr.", above=0)
    predict_batch_size: int = setting(128, "Global prediction batch size.")
    jit_compile: bool = setting(False, "Compile the training and evaluation/prediction steps with XLA (the plain "
                                "kernels; as on TPU).")

    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size", "predict_batch_size")
    STAGES: ClassVar[tuple] = ("do_train", "do_eval", "do_predict", "export_dir")
    # A run does one of STAGES at least; settings that rebuild a run's model for another tool (tasks.run_settings:
    # an export, load_text_model) run none, and set this False on their instance.
    needs_a_stage: ClassVar[bool] = True

    def output_dirs(self) -> tuple:
        return ("model_dir", "output_dir", "predict_dir", "export_dir")

    def required(self) -> tuple:
        return ("model_dir", "model_config_path", "spiece_model_file")

    def trains(self) -> bool:
        return self.do_train

    def errors(self) -> list:
        errors = super().errors()
        if self.needs_a_stage and not any(getattr(self, stage) for stage in self.STAGES):
            errors.insert(0, f"nothing to do: set {', '.join('--' + stage for stage in self.STAGES)}")
        return errors
