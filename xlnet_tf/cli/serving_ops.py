"""Lists the ops an exported SavedModel needs beyond TensorFlow's own, and the tensorflow-text library of each.

    python -m xlnet_tf.cli.serving_ops --saved_model=serving/sentiment/500

A server must link these kernels to load the export. TF Serving's stock model server does: its build links
``@org_tensorflow_text//tensorflow_text:ops_lib`` (``tensorflow_serving/model_servers/BUILD``,
``SUPPORTED_TENSORFLOW_OPS``), whose dependencies are the libraries printed here (``:<library>_cc``). An op that
is neither TensorFlow's nor tensorflow-text's is an error (exit 1): no stock server could load that export.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import Settings, setting


@dataclasses.dataclass
class ServingOpsSettings(Settings):
    saved_model: Optional[str] = setting(None, "A SavedModel directory (an export's version directory).")

    def required(self) -> tuple:
        return ("saved_model",)

    def errors(self) -> list:
        errors = super().errors()
        path = self.saved_model
        if path and "://" not in path and not os.path.isdir(path):  # a URI is checked once TensorFlow reads it
            errors.append(f"--saved_model={path}: no such directory")
        return errors


def main(s: ServingOpsSettings) -> int:
    from xlnet_tf.finetuning.serving import custom_ops

    ops = custom_ops(s.saved_model)
    unknown = sorted(op for op, library in ops.items() if library is None)
    for op, library in sorted(ops.items()):
        print(f"{op}\t{'tensorflow-text ' + library if library else 'UNKNOWN: not TensorFlow or tensorflow-text'}")
    if unknown:
        raise InputError(f"--saved_model={s.saved_model}: {', '.join(unknown)} are neither TensorFlow's nor "
                         "tensorflow-text's ops: a stock TF Serving model server cannot load it")
    return 0


if __name__ == "__main__":
    cli.run(ServingOpsSettings, main)
