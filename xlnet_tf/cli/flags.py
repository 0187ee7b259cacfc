"""The command-line layer of run_pretrain.py, run_classifier.py and run_squad.py.

* The flags every entry point has (``define_common_flags``) and those the fine-tuning ones share
  (``define_finetune_flags``) are defined here, once, with the original names; a flag's default is the field
  default of the entry point's settings class (``xlnet_tf.training.settings``), so there is one source of defaults.
* ``--config_file`` (YAML of flag values) is applied first; flags given on the command line override it
  (``apply_config_file``). No entry point applies a config file the user did not name.
* ``settings_from_flags`` turns the parsed flags into the typed settings the library takes; ``run`` is the whole
  ``main`` of an entry point: it validates the settings before TensorFlow is imported, and reports a
  ``SettingsError`` (or a missing input file) as the message plus one line pointing at ``--helpfull``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Callable, Optional

import yaml
from absl import app, flags, logging

from xlnet_tf.training.settings import DECAY_METHODS, DTYPES, STRATEGIES, SettingsError

FLAGS = flags.FLAGS
_FROM_SETTINGS = object()


class FlagDefiner:
    """Defines absl flags whose defaults are the field defaults of ``settings_cls`` (a flag that is no field, such
    as an alias or an unused original flag, names its ``default``). Each flag is a key flag of the running script,
    so ``--help`` lists it with the script's own."""

    def __init__(self, settings_cls, flag_values: flags.FlagValues = FLAGS):
        self.settings_cls = settings_cls
        self.flag_values = flag_values
        self._defaults = {f.name: f.default for f in dataclasses.fields(settings_cls)}

    def _define(self, define, name, *args, default=_FROM_SETTINGS):
        if default is _FROM_SETTINGS:
            if name not in self._defaults:
                raise KeyError(f"--{name} is no field of {self.settings_cls.__name__}: give its default")
            default = self._defaults[name]
        define(name, default, *args, flag_values=self.flag_values)
        self.flag_values.register_key_flag_for_module(sys.argv[0], self.flag_values[name])

    def string(self, name: str, help: str, **default):
        self._define(flags.DEFINE_string, name, help, **default)

    def integer(self, name: str, help: str, **default):
        self._define(flags.DEFINE_integer, name, help, **default)

    def float(self, name: str, help: str, **default):
        self._define(flags.DEFINE_float, name, help, **default)

    def boolean(self, name: str, help: str, **default):
        self._define(flags.DEFINE_bool, name, help, **default)

    def enum(self, name: str, values, help: str, **default):
        self._define(flags.DEFINE_enum, name, values, help, **default)


def define_common_flags(settings_cls, flag_values: flags.FlagValues = FLAGS) -> FlagDefiner:
    """The flags of every entry point (``RunSettings``' fields and ``--config_file``); returns the definer for the
    entry point's own flags."""
    d = FlagDefiner(settings_cls, flag_values)
    # Run configuration.
    d.string("config_file", "YAML file of flag values (names without --); flags on the command line override it. "
             "Default: none.", default=None)
    d.enum("strategy", STRATEGIES, "tf.distribute strategy.")
    d.string("tpu", "TPU name or grpc:// address (with --strategy=tpu).")
    d.enum("dtype", DTYPES, "Precision policy (mixed_bfloat16 on TPU and AMX CPUs, mixed_float16 with dynamic "
           "loss scaling on GPU).")
    d.integer("seed", "Seed of weight initialisation, dropout, data order and factorization orders.")
    d.string("model_dir", "Checkpoints, TensorBoard summaries and results; a rerun with the same --model_dir "
             "resumes from its last checkpoint.")
    # Model.
    d.string("model_config_path", "xlnet_config.json of the model shape.")
    d.string("init_checkpoint", "Warm start: the original TF1 release checkpoint (xlnet_model.ckpt) or a native "
             "checkpoint.")
    d.string("spiece_model_file", "SentencePiece model of the model (and data).")
    d.boolean("uncased", "Lower-case text (uncased models; must match the data).")
    d.float("dropout", "Dropout rate.")
    d.float("dropatt", "Attention dropout rate.")
    d.integer("clamp_len", "Clamp relative distances (-1 = off).")
    # Optimisation and checkpoints.
    d.integer("train_batch_size", "Global training batch size (all replicas; per micro-batch with "
              "--grad_accum_steps; RACE: questions of 4 sequences).")
    d.integer("train_steps", "Total optimizer steps.")
    d.integer("iterations", "Steps per host loop (one tf.function call; pretraining memory restarts per loop).")
    d.integer("save_steps", "Checkpoint every N steps (default: at the end).")
    d.integer("max_save", "Checkpoints kept (0 = all).")
    d.float("learning_rate", "Peak learning rate.")
    d.integer("warmup_steps", "Linear warmup steps.")
    d.enum("decay_method", DECAY_METHODS, "Decay after warmup.")
    d.float("min_lr_ratio", "Final learning rate / peak.")
    d.float("weight_decay", "Decoupled weight decay (LayerNorm and biases excluded).")
    d.float("adam_epsilon", "Adam epsilon.")
    d.float("clip", "Global gradient-norm clip (<= 0: off).")
    return d


def define_finetune_flags(settings_cls, flag_values: flags.FlagValues = FLAGS) -> FlagDefiner:
    """The common flags plus those run_classifier.py and run_squad.py share (``FinetuneSettings``' fields and
    the original aliases ``--use_tpu`` and ``--use_bfloat16``)."""
    d = define_common_flags(settings_cls, flag_values)
    d.boolean("use_tpu", "Original flag: same as --strategy=tpu.", default=False)
    d.boolean("use_bfloat16", "Original flag: same as --dtype=mixed_bfloat16.", default=False)
    # Stages.
    d.boolean("do_train", "Fine-tune.")
    d.boolean("do_eval", "Evaluate (the task's official metrics), logged, written to the model directory and to "
              "TensorBoard.")
    d.boolean("do_predict", "Write predictions.")
    d.string("export_dir", "Write a TF Serving SavedModel of the fine-tuned model here.")
    d.string("predict_ckpt", "Checkpoint for eval/predict/export (default: the latest in --model_dir).")
    # Data and outputs.
    d.string("output_dir", "Cached encoded features (default: in --model_dir).")
    d.boolean("overwrite_data", "Re-encode the data even if cached features exist.")
    d.string("predict_dir", "Prediction files (default: <model_dir>/predict).")
    d.integer("max_seq_length", "Sequence length (tokens, incl. <sep>/<cls>).")
    d.integer("shuffle_buffer", "Training shuffle buffer.")
    d.integer("predict_batch_size", "Global prediction batch size.")
    d.float("lr_layer_decay_rate", "Layer-wise learning rates: layer l of L trains at lr * rate^(L-1-l), the "
            "embeddings at lr * rate^L, the heads at lr.")
    return d


def apply_config_file(flag_values: flags.FlagValues, path: Optional[str]) -> dict:
    """Sets every flag named in the YAML file ``path`` unless it was given on the command line.

    Relative paths in the file are relative to the working directory. Unknown keys and values of the wrong
    type are errors that name the file and the key. Returns the values applied.
    """
    if not path:
        return {}
    if not os.path.exists(path):
        raise flags.ValidationError(f"--config_file={path}: file not found")
    with open(path, encoding="utf-8") as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise flags.ValidationError(f"--config_file={path}: not valid YAML ({e})") from None
    if not isinstance(values, dict):
        raise flags.ValidationError(f"--config_file={path}: expected a mapping of flag names to values")
    applied = {}
    for key, value in values.items():
        if key not in flag_values:
            raise flags.ValidationError(f"{path}: unknown flag {key!r}")
        if flag_values[key].present:  # the command line wins
            continue
        try:
            flag_values[key].value = value if value is None else flag_values[key].parser.parse(
                value if not isinstance(value, bool) else str(value).lower())
        except (ValueError, flags.IllegalFlagValueError) as e:
            raise flags.ValidationError(f"{path}: bad value for {key!r}: {e}") from None
        applied[key] = value
    return applied


def settings_from_flags(settings_cls, flag_values: flags.FlagValues = FLAGS):
    """``settings_cls`` from the parsed flags (one flag per field), after the original alias flags: ``--use_tpu``
    (``--strategy=tpu``), ``--use_bfloat16`` (``--dtype=mixed_bfloat16``), ``--record_info_dir`` (``--data_dir``)."""
    values = flag_values.flag_values_dict()
    if values.get("use_tpu"):
        values["strategy"] = "tpu"
    if values.get("use_bfloat16"):
        values["dtype"] = "mixed_bfloat16"
    if not values.get("data_dir") and values.get("record_info_dir"):
        values["data_dir"] = values["record_info_dir"]
    unset = [f.name for f in dataclasses.fields(settings_cls) if f.name not in values]
    if unset:
        raise KeyError(f"{settings_cls.__name__} fields without a flag: {unset}")
    return settings_cls.from_values(values)


def usage_error(message) -> None:
    """Exits with ``message`` and one line pointing at ``--helpfull`` (not the whole help)."""
    program = os.path.basename(sys.argv[0])
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None and main.__spec__.name.startswith("xlnet_tf."):
        program = f"-m {main.__spec__.name}"  # python -m xlnet_tf.cli.export: argv[0] is the module's file path
    sys.stderr.write(f"{program.removeprefix('-m ')}: error: {message}\n"
                     f"See `python {program} --helpfull` for every flag.\n")
    sys.exit(1)


def run(settings_cls, target: str, defaults_for: Optional[Callable[[flags.FlagValues], dict]] = None) -> None:
    """Runs an entry point: ``app.run`` of a ``main`` that applies ``--config_file``, then ``defaults_for(flags)``
    to the flags neither given nor in the file (e.g. run_race.py's defaults with --task_name=race), builds and
    validates ``settings_cls`` (before TensorFlow is imported), and calls ``target`` ("module:function") with it."""

    # TensorFlow's C++ INFO lines (CUDA probing, oneDNN notices, "Local rendezvous is aborting with status:
    # OUT_OF_RANGE" at the end of every evaluation) say nothing a user can act on; warnings and errors stay.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

    def main(argv):
        del argv
        try:
            applied = apply_config_file(FLAGS, FLAGS.config_file)
            for name, value in (defaults_for(FLAGS) if defaults_for else {}).items():
                if not FLAGS[name].present and name not in applied:
                    FLAGS[name].value = value
            settings = settings_from_flags(settings_cls, FLAGS).validate()
            module, function = target.split(":")
            result = getattr(importlib.import_module(module), function)(settings)
        except (SettingsError, FileNotFoundError, flags.Error) as e:
            usage_error(e)
        if result is not None:
            logging.info("done: %s", summary(result))
        _exit_now()

    app.run(main)


def _exit_now() -> None:
    """Ends a finished run's process at once. Everything is written by now (checkpoints synchronously, TensorBoard
    flushed after every report); what is skipped is the interpreter's teardown, where each tf.data iterator still
    alive can block for up to a minute (TensorFlow 2.20: its autotuning thread may miss the cancellation and
    sleep out its period; measured 11-197 s for one MirroredStrategy iterator)."""
    logging.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def summary(result: dict) -> str:
    """What a run did, for its last log line: ``result`` is pretraining's last metrics, or fine-tuning's stages
    (``train``, ``eval``, ``predict``, ``export``)."""
    if "step" in result:  # pretraining
        result = {"train": result}
    parts = []
    if "train" in result:
        train = result["train"]
        loss = f" (loss {train['loss']:.4g})" if "loss" in train else " (nothing left to train)"
        parts.append(f"{'stopped for preemption at' if train.get('preempted') else 'trained to'} step "
                     f"{train.get('step')}{loss}")
    if "eval" in result:
        report = result["eval"]
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in report["metrics"].items())
        parts.append(f"evaluated {report.get('split', '')} at step {report.get('step')}: {metrics}")
    if result.get("predict"):
        parts.append(f"predictions in {', '.join(result['predict'])}")
    if result.get("export"):
        parts.append(f"exported {result['export']}")
    return "; ".join(parts) or "nothing to do (no --do_train, --do_eval, --do_predict or --export_dir)"
