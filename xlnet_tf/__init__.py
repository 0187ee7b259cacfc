"""xlnet_tf: XLNet pretraining and fine-tuning on TensorFlow with Keras 3.

The model classes are imported lazily, so tools that need no TensorFlow (tokenization, SentencePiece training)
start fast.
"""

import importlib
import os as _os

# Keras 3 runs on TensorFlow; tf-models-official imports tf_keras, which must not become our Keras.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_EXPORTS = {
    "XLNetConfig": "xlnet_tf.config",
    "XLNetModel": "xlnet_tf.models.xlnet",
    "XLNetPretrainer": "xlnet_tf.models.xlnet",
    "load_original_checkpoint": "xlnet_tf.checkpoint",
    "load_pretrained": "xlnet_tf.checkpoint",
    "load_network": "xlnet_tf.checkpoint",
    "load_text_model": "xlnet_tf.tasks.text_runs",
    "XLNetPreprocessor": "xlnet_tf.preprocessing",
    "XLNetTextClassifier": "xlnet_tf.tasks.text_models",
    "XLNetTextMultipleChoice": "xlnet_tf.tasks.multiple_choice.multiple_choice_text_model",
    "XLNetTextSquad": "xlnet_tf.tasks.squad.squad_text_model",
    "XLNetTextTagger": "xlnet_tf.tasks.tagging.tagging_text_model",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'xlnet_tf' has no attribute {name!r}")
