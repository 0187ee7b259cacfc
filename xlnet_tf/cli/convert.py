"""Converts an original XLNet release directory into an xlnet_tf native checkpoint directory.

    xlnet-convert-checkpoint --release_dir=xlnet_cased_L-12_H-768_A-12 --output_dir=xlnet_base_tf2

The release directory holds ``xlnet_config.json``, ``xlnet_model.ckpt.*`` and ``spiece.model``. The output
directory gets ``xlnet_config.json``, ``spiece.model`` and an object-based checkpoint ``xlnet_model-1`` that
``xlnet_tf.checkpoint.load_pretrained`` and the ``--init_checkpoint`` flags of the entry points read. The output
is written to a temporary directory and renamed, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from absl import app, flags, logging

flags.DEFINE_string("release_dir", None, "Directory of the original release (xlnet_config.json, "
                    "xlnet_model.ckpt.*, spiece.model).")
flags.DEFINE_string("checkpoint", None, "TF1 checkpoint prefix; default: <release_dir>/xlnet_model.ckpt.")
flags.DEFINE_string("model_config_path", None, "xlnet_config.json; default: <release_dir>/xlnet_config.json.")
flags.DEFINE_string("output_dir", None, "Where to write the converted checkpoint (must not exist yet).")
FLAGS = flags.FLAGS


def convert(checkpoint: str, config_path: str, output_dir: str, spiece_model: str | None = None) -> str:
    """Loads the TF1 checkpoint into an ``XLNetPretrainer`` and writes it in the native layout. Returns the
    checkpoint prefix written."""
    from xlnet_tf.checkpoint import load_original_checkpoint, native_checkpoint
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.xlnet import XLNetPretrainer

    if os.path.exists(output_dir):
        raise FileExistsError(f"--output_dir {output_dir} already exists; refusing to overwrite it")
    config = XLNetConfig.from_json(config_path)
    model = XLNetPretrainer(config)
    unused = load_original_checkpoint(model, checkpoint)
    if unused:
        logging.warning("checkpoint variables not used by XLNet: %s", ", ".join(unused))
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".convert-", dir=parent)
    try:
        native_checkpoint(model).write(os.path.join(tmp, "xlnet_model-1"))
        with open(os.path.join(tmp, "checkpoint"), "w", encoding="utf-8") as f:
            f.write('model_checkpoint_path: "xlnet_model-1"\nall_model_checkpoint_paths: "xlnet_model-1"\n')
        config.to_json(os.path.join(tmp, "xlnet_config.json"), checkpoint_keys_only=True)
        if spiece_model and os.path.exists(spiece_model):
            shutil.copy(spiece_model, os.path.join(tmp, "spiece.model"))
        os.rename(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n_params = sum(int(v.numpy().size) for v in model.weights)
    logging.info("wrote %s (%d parameters)", output_dir, n_params)
    return os.path.join(output_dir, "xlnet_model-1")


def main(argv):
    del argv
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    if not (FLAGS.release_dir or (FLAGS.checkpoint and FLAGS.model_config_path)):
        raise app.UsageError("give --release_dir, or both --checkpoint and --model_config_path")
    release = FLAGS.release_dir or ""
    checkpoint = FLAGS.checkpoint or os.path.join(release, "xlnet_model.ckpt")
    config_path = FLAGS.model_config_path or os.path.join(release, "xlnet_config.json")
    if not os.path.exists(config_path):
        raise app.UsageError(f"--model_config_path: {config_path} does not exist")
    convert(checkpoint, config_path, FLAGS.output_dir, os.path.join(release, "spiece.model") if release else None)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
