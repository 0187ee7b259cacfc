"""Converts an original XLNet release directory or a HuggingFace XLNet model into an xlnet_tf checkpoint.

    python -m xlnet_tf.cli.convert --release_dir=xlnet_cased_L-12_H-768_A-12 --output_dir=xlnet_base_tf2
    xlnet-convert-checkpoint --release_dir=...   # the same, as the installed console script
    # a HuggingFace directory or hub name: native (the network) or the release layout (network and head)
    python -m xlnet_tf.cli.convert --hf_dir=hf://xlnet/xlnet-base-cased --output_dir=xlnet_base_tf2
    python -m xlnet_tf.cli.convert --hf_dir=my-hf-classifier --format=release --output_dir=my_release

The other direction (a run or checkpoint of ours as an HF directory) is ``python -m xlnet_tf.cli.export
--format=hf``.

The release directory holds ``xlnet_config.json``, ``xlnet_model.ckpt.*`` and ``spiece.model``. The output
directory gets ``xlnet_config.json``, ``spiece.model`` and an object-based checkpoint ``xlnet_model-1`` that
``xlnet_tf.checkpoint.load_pretrained`` and the ``--init_checkpoint`` flags of the entry points read. The output
is written to a temporary directory and renamed, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from absl import logging

from xlnet_tf import hf, io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import Settings, path_missing, setting


CONVERT_FORMATS = ("native", "release")


@dataclasses.dataclass
class ConvertSettings(Settings):
    """The conversion's flags (checked before TensorFlow loads)."""

    release_dir: Optional[str] = setting(None, "Directory of the original release (xlnet_config.json, "
                                         "xlnet_model.ckpt.*, spiece.model).")
    checkpoint: Optional[str] = setting(None, "TF1 checkpoint prefix; default: <release_dir>/xlnet_model.ckpt.")
    model_config_path: Optional[str] = setting(None, "xlnet_config.json; default: "
                                               "<release_dir>/xlnet_config.json.")
    output_dir: Optional[str] = setting(None, "Where to write the converted checkpoint (must not exist yet).")
    hf_dir: Optional[str] = setting(None, "A HuggingFace XLNet model instead of a release: its directory "
                                    "(config.json, model.safetensors or pytorch_model.bin, spiece.model) or "
                                    "hf://owner/name[@revision] (the HF cache, or downloaded when online).")
    format: str = setting("native", "native (the network, and the LM bias of an LM head) or release (the TF1 "
                          "layout with the HF model's head under the original names).", choices=CONVERT_FORMATS)
    task_scope: str = setting("task", "With --hf_dir and --format=release: the scope of a sequence classifier's "
                              "head (model/classification_<task_scope>/...; the task's name in run_classifier.py).")

    @property
    def checkpoint_prefix(self) -> str:
        return self.checkpoint or os.path.join(self.release_dir or "", "xlnet_model.ckpt")

    @property
    def config_path(self) -> str:
        return self.model_config_path or os.path.join(self.release_dir or "", "xlnet_config.json")

    def required(self) -> tuple:
        return ("output_dir",)

    def errors(self) -> list:
        errors = super().errors()
        if self.hf_dir:
            if self.release_dir or self.checkpoint:
                errors.append("--hf_dir converts a HuggingFace model: not with --release_dir or --checkpoint")
            elif hf.is_hub(self.hf_dir):
                pass  # found in the HF cache (or downloaded) when read, saying what to do where it cannot be
            elif path_missing(self.hf_dir, "dir"):  # (a gs://... directory is looked at once TensorFlow is loaded)
                errors.append(f"--hf_dir={self.hf_dir}: not a directory")
            elif io_utils.probe(self.hf_dir, "dir") and not hf.is_hf_dir(self.hf_dir):
                errors.append(f"--hf_dir={self.hf_dir}: " + (hf.why_not_xlnet(self.hf_dir) or "not a HuggingFace "
                              "XLNet directory (no config.json)"))
        elif self.format != "native":
            errors.append("--format=release is for --hf_dir (a release is already in the release layout)")
        elif self.release_dir and path_missing(self.release_dir, "dir"):
            errors.append(f"--release_dir={self.release_dir}: not a directory")
        elif not (self.release_dir or (self.checkpoint and self.model_config_path)):
            errors.append("give --release_dir, or both --checkpoint and --model_config_path")
        elif path_missing(self.config_path):
            flag = "--model_config_path" if self.model_config_path else "--release_dir"
            errors.append(f"{flag}: {self.config_path} does not exist")
        if self.output_dir and io_utils.probe(self.output_dir):
            errors.append(f"--output_dir={self.output_dir} already exists; refusing to overwrite it")
        return errors


def convert(checkpoint: str, config_path: str, output_dir: str, spiece_model: str | None = None) -> str:
    """Loads the TF1 checkpoint into an ``XLNetPretrainer`` and writes it in the native layout. Returns the
    checkpoint prefix written."""
    from xlnet_tf.checkpoint import head_variables, load_original_checkpoint, resolve_checkpoint
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.xlnet import XLNetPretrainer

    if io_utils.exists(output_dir):
        raise FileExistsError(f"--output_dir {output_dir} already exists; refusing to overwrite it")
    heads = head_variables(resolve_checkpoint(checkpoint))
    if heads:  # XLNetPretrainer would name the LM bias missing, as if the release were damaged
        raise InputError(f"{checkpoint}: a fine-tuned checkpoint (its head: {', '.join(heads[:2])}"
                         f"{', ...' if len(heads) > 2 else ''}); convert writes pretrained networks. A fine-tuned "
                         "release is read as it is: run_*.py --init_checkpoint or --predict_ckpt, "
                         "XLNetText*.from_checkpoint")
    if spiece_model and not io_utils.exists(spiece_model):
        logging.warning("%s does not exist: the output has no spiece.model (give --spiece_model_file where it is "
                        "used)", spiece_model)
    config = XLNetConfig.from_json(config_path)
    model = XLNetPretrainer(config)
    unused = load_original_checkpoint(model, checkpoint)
    if unused:
        logging.warning("checkpoint variables not used by XLNet: %s", ", ".join(unused))
    return _write_native(model, config, output_dir, spiece_model)


def convert_hf(source: str, output_dir: str, format: str = "native", task_scope: str = "task") -> str:  # noqa: A002
    """Converts the HuggingFace model ``source`` (a directory or ``hf://`` name): ``native`` writes the network
    (and an LM head's bias) as ``convert`` does; ``release`` writes every weight, the head's too, under the
    original TF1 names with ``xlnet_config.json`` and ``spiece.model``. Returns the checkpoint prefix written."""
    from xlnet_tf import tasks
    from xlnet_tf.checkpoint import load_hf_pretrained, write_tf1_checkpoint
    from xlnet_tf.models.xlnet import XLNetPretrainer

    tasks.families()  # their heads' HF names (e.g. XLNetForTokenClassification's) register as they load
    if io_utils.exists(output_dir):
        raise FileExistsError(f"--output_dir {output_dir} already exists; refusing to overwrite it")
    checkpoint = hf.HFCheckpoint(source)
    config = checkpoint.xlnet_config()
    spiece = io_utils.join(checkpoint.path, "spiece.model")
    spiece = spiece if io_utils.exists(spiece) else None
    if checkpoint.head == "per_token":
        logging.warning("%s: %s's per-token head (start/end logits) has no model here; only the network is "
                        "converted (xlnet_tf.hf.token_head reads the head's arrays)", source, checkpoint.architecture)
    if format == "release":
        tensors = checkpoint.tf1_tensors(task_scope)
        with io_utils.atomic_path(output_dir, last=("xlnet_model.ckpt.index",)) as tmp:
            write_tf1_checkpoint(tensors, io_utils.join(tmp, "xlnet_model.ckpt"))
            config.to_json(io_utils.join(tmp, "xlnet_config.json"), checkpoint_keys_only=True)
            if spiece:
                io_utils.copy(spiece, io_utils.join(tmp, "spiece.model"))
        logging.info("wrote %s (%s: %d tensors)", output_dir, checkpoint.architecture or "XLNet", len(tensors))
        return io_utils.join(output_dir, "xlnet_model.ckpt")
    if checkpoint.head not in (None, "XLNetPretrainer"):
        logging.warning("%s: its %s head is not kept in the native layout (the network only); --format=release "
                        "keeps it", source, checkpoint.architecture)
    model = XLNetPretrainer(config)
    load_hf_pretrained(model, checkpoint)
    return _write_native(model, config, output_dir, spiece)


def _write_native(model, config, output_dir: str, spiece_model: Optional[str]) -> str:
    from xlnet_tf.checkpoint import native_checkpoint

    # Built under a temporary name and moved into place, the "checkpoint" file (what finds the checkpoint) last.
    with io_utils.atomic_path(output_dir, last=("checkpoint",)) as tmp:
        native_checkpoint(model).write(io_utils.join(tmp, "xlnet_model-1"))
        io_utils.write_text_atomic(io_utils.join(tmp, "checkpoint"), 'model_checkpoint_path: "xlnet_model-1"\n'
                                   'all_model_checkpoint_paths: "xlnet_model-1"\n')
        config.to_json(io_utils.join(tmp, "xlnet_config.json"), checkpoint_keys_only=True)
        if spiece_model and io_utils.exists(spiece_model):
            io_utils.copy(spiece_model, io_utils.join(tmp, "spiece.model"))
    n_params = sum(int(v.numpy().size) for v in model.weights)
    logging.info("wrote %s (%d parameters)", output_dir, n_params)
    return io_utils.join(output_dir, "xlnet_model-1")


def main(s: ConvertSettings) -> None:
    """The command: converts the release or HuggingFace model ``s`` names."""
    if s.hf_dir:
        convert_hf(s.hf_dir, s.output_dir, s.format, s.task_scope)
        return
    convert(s.checkpoint_prefix, s.config_path, s.output_dir,
            os.path.join(s.release_dir, "spiece.model") if s.release_dir else None)


def run() -> None:
    """``python -m xlnet_tf.cli.convert`` and the ``xlnet-convert-checkpoint`` console script."""
    cli.run(ConvertSettings, main)


if __name__ == "__main__":
    run()
