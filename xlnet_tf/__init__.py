"""xlnet_tf: XLNet pretraining and fine-tuning on TensorFlow with Keras 3."""

import os as _os

# Keras 3 runs on TensorFlow here; tf-models-official imports tf_keras, which must not become our Keras.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from xlnet_tf.config import XLNetConfig  # noqa: E402
from xlnet_tf.models.xlnet import XLNetModel, XLNetPretrainer  # noqa: E402
from xlnet_tf.checkpoint import load_original_checkpoint  # noqa: E402

__all__ = ["XLNetConfig", "XLNetModel", "XLNetPretrainer", "load_original_checkpoint"]
__version__ = "0.1.0"
