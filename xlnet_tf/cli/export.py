"""Export a trained model: a TF Serving SavedModel (raw text in, answers out), the original release layout or a
HuggingFace directory.

    # TF Serving: <export_dir>/<version>/ (version = the checkpoint's global step), from a fine-tuning run's
    # --model_dir alone (task, labels, SentencePiece model, lower-casing and max_seq_length are what the run
    # recorded in finetune_settings.json)
    python -m xlnet_tf.cli.export --model_dir=runs/tiny/finetune_sentiment --export_dir=serving/sst2

    # the original release layout (xlnet_model.ckpt with the TF1 names, xlnet_config.json, spiece.model), of a
    # fine-tuned model (with its head, under the original run_classifier/run_squad/run_race scopes) ...
    python -m xlnet_tf.cli.export --format=release --model_dir=runs/tiny/finetune_sentiment --export_dir=release/sst2
    # ... or of a pretraining run (the network and the LM bias; its xlnet_config.json and spiece.model)
    python -m xlnet_tf.cli.export --format=release --model_dir=runs/tiny/pretrain --export_dir=release/tiny

    # a HuggingFace directory (config.json, model.safetensors, spiece.model, tokenizer_config.json) that
    # transformers' XLNetForSequenceClassification / ...ForMultipleChoice / ...ForQuestionAnswering (a fine-tuned
    # run) or XLNetLMHeadModel (a pretraining run) loads with from_pretrained
    python -m xlnet_tf.cli.export --format=hf --model_dir=runs/tiny/finetune_sentiment --export_dir=hf/sst2

Flags override what the run recorded (e.g. ``--dtype=mixed_bfloat16`` to serve in bfloat16, ``--predict_ckpt``
for another checkpoint); without a record (a model directory of an older xlnet_tf, a release directory of a
fine-tuned model (``--format=release`` output, or ``cli.convert --format=release --task_scope=...``), or a
fine-tuned TF1 checkpoint given as ``--predict_ckpt``, read by its TF1 names) ``--task_name``,
``--model_config_path``, ``--spiece_model_file``, ``--uncased`` and ``--max_seq_length`` say what the model is. A
run of a task family of your own records its ``--task_module``, which is loaded again (``--task_module`` names it
where the record's path no longer holds). ``--config_file`` (YAML of flag values) works as in the other entry
points. The layouts: docs/serving.md.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from xlnet_tf import io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.tasks.task_settings import ClassifierSettings
from xlnet_tf.training.settings import (FinetuneSettings, RunSettings, Settings, SettingsError, path_missing,
                                        setting, setting_of)

FORMATS = ("saved_model", "release", "hf")
RECORD = " Default: the run's record."
# Flags that override the fine-tuning run's record when given.
RECORDED = ("task_name", "task_module", "model_config_path", "spiece_model_file", "uncased", "max_seq_length",
            "dtype")


@dataclasses.dataclass
class ExportSettings(Settings):
    """The export command's flags (no TensorFlow here: they are checked before it loads)."""

    model_dir: Optional[str] = setting(None, "The fine-tuning (or, with --format=release or hf, pretraining) "
                                       "run's directory.")
    export_dir: Optional[str] = setting(None, "saved_model: the TF Serving base path (versions are written below "
                                        "it); release: the release directory (new or empty).")
    format: str = setting("saved_model", "saved_model (TF Serving, raw text in), release (the original TF1 "
                          "layout) or hf (a HuggingFace transformers directory).", choices=FORMATS)
    predict_ckpt: Optional[str] = setting(None, "Checkpoint to export (default: the latest in --model_dir).")
    task_name: Optional[str] = setting(None, "The fine-tuned task (a run_classifier.py task, race or squad); "
                                       "default: the run's record. Without one and no record: the pretrained "
                                       "network (--format=release or hf).")
    # The run's own flags, unset here: the run's record holds their values.
    task_module: Optional[str] = setting_of(ClassifierSettings, "task_module", help_suffix=RECORD)
    model_config_path: Optional[str] = setting_of(RunSettings, "model_config_path", help_suffix=RECORD)
    spiece_model_file: Optional[str] = setting_of(RunSettings, "spiece_model_file", help_suffix=RECORD)
    uncased: bool = setting_of(RunSettings, "uncased", help_suffix=RECORD)
    max_seq_length: Optional[int] = setting_of(FinetuneSettings, "max_seq_length", None, help_suffix=RECORD)
    dtype: Optional[str] = setting_of(RunSettings, "dtype", None, help_suffix=RECORD)

    def required(self) -> tuple:
        return ("model_dir", "export_dir")

    def output_dirs(self) -> tuple:
        return ("export_dir",)

    def input_files(self) -> tuple:
        return ("model_config_path", "spiece_model_file")

    def errors(self) -> list:
        errors = super().errors()
        if self.model_dir and path_missing(self.model_dir, "dir"):
            errors.append(f"--model_dir={self.model_dir}: not a directory")
        out = self.export_dir
        if self.format == "release" and out and io_utils.probe(out, "dir") and io_utils.listdir(out):
            held = ("already holds a release" if io_utils.exists(io_utils.join(out, "xlnet_model.ckpt.index"))
                    else "is not empty")
            errors.append(f"--export_dir={self.export_dir} {held}; --format=release writes a new or empty directory")
        if self.format == "hf" and out and io_utils.probe(out):
            errors.append(f"--export_dir={self.export_dir} already exists; --format=hf writes a new directory")
        if self.max_seq_length is not None and self.max_seq_length < 4:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for text (needs >= 4)")
        return errors


def task_settings(s: ExportSettings, given: set):
    """The fine-tuning settings (the task family's settings class) to rebuild the model from: the run's record in
    ``--model_dir`` with the flags in ``given`` on top, or the flags alone. None for a pretraining run (no record,
    no ``--task_name``)."""
    from xlnet_tf import tasks

    values = {n: getattr(s, n) for n in RECORDED if n in given and getattr(s, n) is not None}
    return tasks.run_settings(s.model_dir, dict(values, export_dir=s.export_dir, predict_ckpt=s.predict_ckpt),
                              task_name=s.task_name, task_module=s.task_module)


def export(s: ExportSettings, given: set = frozenset()) -> str:
    """Writes the export ``s`` asks for and returns its directory (``given``: the flags set explicitly)."""
    from xlnet_tf.finetuning.serving import export_serving, write_release
    from xlnet_tf.training.setup import checkpoint_step

    settings = task_settings(s, given)
    if settings is None:
        if s.format == "saved_model":
            raise SettingsError(f"--model_dir={s.model_dir} has no finetune_settings.json and there is no "
                                "--task_name: a pretrained model has no task head to serve (fine-tune it, or "
                                "--format=release or hf for the pretrained weights)")
        return _export_pretrained(s)
    task = settings.family().task(settings)
    model, checkpoint = task.restored_model()
    if s.format == "release":
        return write_release(model, s.export_dir, task.model_config, settings.spiece_model_file)
    if s.format == "hf":
        from xlnet_tf import hf

        return hf.save_model(model, s.export_dir, settings.spiece_model_file, settings.uncased,
                             labels=getattr(task, "labels", None))
    return export_serving(model, s.export_dir, task.export_info(checkpoint_step(checkpoint)),
                          settings.spiece_model_file, checkpoint)


def _export_pretrained(s: ExportSettings) -> str:
    """The release layout of a pretraining run (or any native/TF1 checkpoint of the network): XLNetPretrainer."""
    from xlnet_tf.checkpoint import load_pretrained, resolve_checkpoint
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.finetuning.serving import write_release
    from xlnet_tf.models.xlnet import XLNetPretrainer

    # A pretraining run's directory holds its xlnet_config.json and spiece.model, as a release does.
    source = s.predict_ckpt or s.model_dir
    config_path = s.model_config_path or io_utils.beside(source, "xlnet_config.json")
    spiece = s.spiece_model_file or io_utils.beside(source, "spiece.model")
    if not config_path:
        raise SettingsError(f"--model_dir={s.model_dir} holds no fine-tuning record and no xlnet_config.json: give "
                            "--model_config_path (and --spiece_model_file) of the pretrained model")
    config = XLNetConfig.from_json(config_path)
    model = XLNetPretrainer(config)
    load_pretrained(model, resolve_checkpoint(source))
    if s.format == "hf":
        from xlnet_tf import hf

        return hf.save_model(model, s.export_dir, spiece, s.uncased)
    return write_release(model, s.export_dir, config, spiece)


def main(settings: ExportSettings, given: set) -> None:
    """The command: the export, then its directory on stdout."""
    print(export(settings, given))


if __name__ == "__main__":
    cli.run(ExportSettings, main, with_given=True)
