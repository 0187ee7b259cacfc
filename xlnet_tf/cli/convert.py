"""Converts an original XLNet release directory into an xlnet_tf native checkpoint directory.

    python -m xlnet_tf.cli.convert --release_dir=xlnet_cased_L-12_H-768_A-12 --output_dir=xlnet_base_tf2
    xlnet-convert-checkpoint --release_dir=...   # the same, as the installed console script

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

from xlnet_tf import io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import Settings, path_missing, setting


@dataclasses.dataclass
class ConvertSettings(Settings):
    """The conversion's flags (checked before TensorFlow loads)."""

    release_dir: Optional[str] = setting(None, "Directory of the original release (xlnet_config.json, "
                                         "xlnet_model.ckpt.*, spiece.model).")
    checkpoint: Optional[str] = setting(None, "TF1 checkpoint prefix; default: <release_dir>/xlnet_model.ckpt.")
    model_config_path: Optional[str] = setting(None, "xlnet_config.json; default: "
                                               "<release_dir>/xlnet_config.json.")
    output_dir: Optional[str] = setting(None, "Where to write the converted checkpoint (must not exist yet).")

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
        if self.release_dir and path_missing(self.release_dir, "dir"):
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
    from xlnet_tf.checkpoint import load_original_checkpoint, native_checkpoint
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.xlnet import XLNetPretrainer

    if io_utils.exists(output_dir):
        raise FileExistsError(f"--output_dir {output_dir} already exists; refusing to overwrite it")
    config = XLNetConfig.from_json(config_path)
    model = XLNetPretrainer(config)
    unused = load_original_checkpoint(model, checkpoint)
    if unused:
        logging.warning("checkpoint variables not used by XLNet: %s", ", ".join(unused))
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
    """The command: converts the release ``s`` names."""
    convert(s.checkpoint_prefix, s.config_path, s.output_dir,
            os.path.join(s.release_dir, "spiece.model") if s.release_dir else None)


def run() -> None:
    """``python -m xlnet_tf.cli.convert`` and the ``xlnet-convert-checkpoint`` console script."""
    cli.run(ConvertSettings, main)


if __name__ == "__main__":
    run()
