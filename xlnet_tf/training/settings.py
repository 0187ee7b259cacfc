"""Typed run settings: what pretraining and fine-tuning share (``RunSettings``) and what each adds.

Field names are the flag names of the entry points, and field defaults are the flags' defaults: the command-line
layer (``xlnet_tf.cli.flags``) defines the flags from these classes and builds them from the parsed flags. The
library takes these objects, never the flags. ``validate()`` reports every inconsistency at once as a
``SettingsError`` (a ``ValueError``) before any work; this module does not import TensorFlow, so an entry point
checks its settings before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Mapping, Optional

from xlnet_tf.objectives import OBJECTIVES

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")
DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")
DECAY_METHODS = ("poly", "cos")


class SettingsError(ValueError):
    """Settings, or inputs they name, that cannot work; the entry points report it as a usage error."""


def checkpoint_exists(path: str) -> bool:
    """A checkpoint prefix, a directory of checkpoints, or a remote path (not checked here)."""
    return os.path.exists(path) or os.path.exists(path + ".index") or "://" in path


@dataclasses.dataclass
class RunSettings:
    """What every run has: model, machines, precision, optimisation, checkpoints."""

    model_dir: Optional[str] = None
    model_config_path: Optional[str] = None
    init_checkpoint: Optional[str] = None
    spiece_model_file: Optional[str] = None
    uncased: bool = False
    strategy: str = "one_device"
    tpu: Optional[str] = None
    dtype: str = "float32"
    seed: int = 0
    dropout: float = 0.1
    dropatt: float = 0.1
    clamp_len: int = -1
    # Optimisation and checkpoints.
    train_batch_size: Optional[int] = 8
    train_steps: Optional[int] = 1000
    iterations: int = 1000
    save_steps: Optional[int] = None
    max_save: int = 5
    learning_rate: float = 1e-5
    warmup_steps: int = 0
    decay_method: str = "poly"
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-8
    clip: float = 1.0

    # Global batch sizes: positive, and divisible by the replicas of the strategy.
    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size",)

    @classmethod
    def from_values(cls, values: Mapping):
        """The settings named in ``values`` (other keys are ignored; missing fields keep their defaults)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    # -- what subclasses say about themselves --------------------------------------------------------------
    def required(self) -> tuple:
        """Flags that must be set."""
        return ("model_dir", "model_config_path")

    def input_files(self) -> tuple:
        """Flags naming files that must exist when set."""
        return ("model_config_path", "spiece_model_file")

    def trains(self) -> bool:
        return True

    def errors(self) -> list:
        """Every inconsistency, as messages naming the flags."""
        missing = [f"--{name}" for name in self.required() if getattr(self, name) in (None, "")]
        errors = [f"missing required flag(s): {', '.join(missing)}"] if missing else []
        errors += [f"--{name}={getattr(self, name)}: file not found" for name in self.input_files()
                   if getattr(self, name) and not os.path.exists(getattr(self, name))]
        for name, allowed in (("strategy", STRATEGIES), ("dtype", DTYPES), ("decay_method", DECAY_METHODS)):
            if getattr(self, name) not in allowed:
                errors.append(f"--{name}={getattr(self, name)!r} must be one of {', '.join(allowed)}")
        if self.strategy == "tpu" and not self.tpu:
            errors.append("--strategy=tpu needs --tpu (name, grpc:// address, or 'local')")
        for name in self.BATCH_SIZES:
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                errors.append(f"--{name}={getattr(self, name)} must be positive")
        if self.save_steps is not None and self.save_steps <= 0:
            errors.append(f"--save_steps={self.save_steps} must be positive")
        if self.init_checkpoint and not checkpoint_exists(self.init_checkpoint):
            errors.append(f"--init_checkpoint={self.init_checkpoint}: no such checkpoint (give the prefix, e.g. "
                          ".../xlnet_model.ckpt, a directory, or a native checkpoint)")
        if self.trains() and self.train_steps is not None:
            if self.train_steps <= 0:
                errors.append(f"--train_steps={self.train_steps} must be positive")
            elif self.warmup_steps >= self.train_steps:
                errors.append(f"--warmup_steps={self.warmup_steps} must be below --train_steps={self.train_steps}")
        return errors

    def validate(self):
        """Raises ``SettingsError`` naming every problem; returns the settings."""
        errors = self.errors()
        if errors:
            raise SettingsError("; ".join(errors))
        return self

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
class PretrainSettings(RunSettings):
    """run_pretrain.py: a pretraining objective (XLNet's permutation LM by default) on the TFRecords in
    ``data_dir``."""

    objective: str = "plm"
    data_dir: Optional[str] = None
    input_glob: Optional[str] = None
    num_core_per_host: Optional[int] = None
    seq_len: Optional[int] = None
    reuse_len: Optional[int] = None
    mem_len: int = 0
    perm_size: Optional[int] = None
    num_predict: Optional[int] = None
    bi_data: bool = False
    mask_alpha: int = 6
    mask_beta: int = 1
    same_length: bool = False
    grad_accum_steps: int = 1
    jit_compile: bool = False
    # Defaults of run_pretrain.py where they differ: the shape flags have none (a run names its model).
    train_batch_size: Optional[int] = None
    train_steps: Optional[int] = None
    learning_rate: float = 1e-4
    min_lr_ratio: float = 0.001

    def required(self) -> tuple:
        return super().required() + ("data_dir", "train_batch_size", "seq_len", "reuse_len", "num_predict",
                                     "train_steps")

    def errors(self) -> list:
        errors = super().errors()
        if self.mem_len and self.reuse_len and self.seq_len and self.reuse_len > self.seq_len:
            errors.append(f"--reuse_len={self.reuse_len} exceeds --seq_len={self.seq_len}")
        if self.grad_accum_steps < 1:
            errors.append(f"--grad_accum_steps={self.grad_accum_steps} must be >= 1")
        if self.input_glob and not self.spiece_model_file:
            errors.append("--input_glob needs --spiece_model_file to write the data")
        if self.objective not in OBJECTIVES:
            errors.append(f"--objective={self.objective!r} must be one of {', '.join(OBJECTIVES)}")
        else:
            errors += OBJECTIVES[self.objective].settings_errors(self)
        return errors

    @property
    def permutation_size(self) -> Optional[int]:
        """``perm_size``, by default ``reuse_len``."""
        return self.perm_size or self.reuse_len


@dataclasses.dataclass
class FinetuneSettings(RunSettings):
    """What run_classifier.py and run_squad.py share: the stages to run, cached features, outputs."""

    output_dir: Optional[str] = None
    overwrite_data: bool = False
    predict_dir: Optional[str] = None
    export_dir: Optional[str] = None
    max_seq_length: int = 128
    shuffle_buffer: int = 2048
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    predict_ckpt: Optional[str] = None
    lr_layer_decay_rate: float = 1.0
    predict_batch_size: int = 128

    BATCH_SIZES: ClassVar[tuple] = ("train_batch_size", "predict_batch_size")
    STAGES: ClassVar[tuple] = ("do_train", "do_eval", "do_predict", "export_dir")

    def required(self) -> tuple:
        return ("model_dir", "model_config_path", "spiece_model_file")

    def trains(self) -> bool:
        return self.do_train

    def errors(self) -> list:
        errors = super().errors()
        if not any(getattr(self, stage) for stage in self.STAGES):
            errors.insert(0, f"nothing to do: set {', '.join('--' + stage for stage in self.STAGES)}")
        return errors
