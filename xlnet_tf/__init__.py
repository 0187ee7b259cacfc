"""xlnet_tf: XLNet pretraining and fine-tuning on TensorFlow with Keras 3.

The model classes are imported lazily, so tools that need no TensorFlow (tokenization, SentencePiece training)
start fast.
"""

import importlib
import importlib.abc
import importlib.util
import os as _os
import sys

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
    "XLNetTextClassifier": "xlnet_tf.tasks.classification.classification_text_model",
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


# The classes xlnet_tf registers with Keras (``register_keras_serializable(package="xlnet_tf")``), by module.
_KERAS_CLASSES = {
    "xlnet_tf.layers.attention": ("RelativeAttention",),
    "xlnet_tf.layers.dropout": ("Dropout",),
    "xlnet_tf.layers.feedforward": ("PositionwiseFeedForward",),
    "xlnet_tf.layers.position": ("RelativePositionEncoding",),
    "xlnet_tf.models.heads": ("SequenceSummary",),
    "xlnet_tf.models.xlnet": ("XLNetBlock", "XLNetModel", "XLNetPretrainer"),
    "xlnet_tf.preprocessing": ("XLNetPreprocessor",),
    "xlnet_tf.tasks.classification.classification_head": ("XLNetClassifier",),
    "xlnet_tf.tasks.classification.classification_text_model": ("XLNetTextClassifier",),
    "xlnet_tf.tasks.multiple_choice.multiple_choice_head": ("XLNetMultipleChoice",),
    "xlnet_tf.tasks.multiple_choice.multiple_choice_text_model": ("XLNetTextMultipleChoice",),
    "xlnet_tf.tasks.squad.squad_head": ("XLNetSquad",),
    "xlnet_tf.tasks.squad.squad_text_model": ("XLNetTextSquad",),
    "xlnet_tf.tasks.tagging.tagging_head": ("XLNetTagger",),
    "xlnet_tf.tasks.tagging.tagging_text_model": ("XLNetTextTagger",),
    "xlnet_tf.training.optimization": ("WarmupDecaySchedule", "XLNetAdamW"),
}


def _deferred(module: str, name: str) -> type:
    """A stand-in for ``module.name`` in Keras' registry: Keras rebuilds an object with ``from_config`` of the
    class it finds there, which here imports the module (its decorator then registers the class in place of the
    stand-in) and rebuilds with the class."""
    def from_config(cls, config):
        return getattr(importlib.import_module(module), name).from_config(config)

    return type(name, (), {"from_config": classmethod(from_config), "__module__": module})


def _register_with_keras(keras) -> None:
    registry = keras.saving.get_custom_objects()
    for module, names in _KERAS_CLASSES.items():
        for name in names:
            registry.setdefault(f"xlnet_tf>{name}", _deferred(module, name))


class _WhenKerasLoads(importlib.abc.MetaPathFinder):
    """Calls ``_register_with_keras`` once ``keras`` is imported (this finder then leaves ``sys.meta_path``)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                _register_with_keras(module)

            spec.loader.exec_module = exec_module
        return spec


# keras.saving.load_model of a saved model finds its classes after ``import xlnet_tf`` alone: the modules that
# register them (and TensorFlow with them) are imported when Keras first rebuilds one of their objects, not here.
if "keras" in sys.modules:
    _register_with_keras(sys.modules["keras"])
else:
    sys.meta_path.insert(0, _WhenKerasLoads())
