"""Pretraining data: text -> TFRecords (``create_pretraining_data``) -> batches (``reader.pretrain_dataset``, which
builds each objective's inputs with ``xlnet_tf.objectives``).

Imports are lazy so the writer's worker processes do not load TensorFlow until they write.
"""

import importlib

_EXPORTS = {
    "pretrain_dataset": "xlnet_tf.data.reader",
    "load_manifest": "xlnet_tf.data.manifest",
    "check_manifest": "xlnet_tf.data.manifest",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'xlnet_tf.data' has no attribute {name!r}")
