"""Shared by test_batch_predict.py and the process that writes its model (``write_classifier``, one of that file's
background resources): a micro SST-2 classifier with random weights, and its export in the layout of the exports
before versioning."""

import json
import os

from classifier_helpers import SPIECE, build_model, make_flags


def save_ids_export(model, export_dir, labels, seq=None):
    """A SavedModel in the layout of the exports before versioning: ``serving_default`` takes the ids
    (input_ids, segment_ids int32, padding_mask float32 [batch, seq]; ``seq`` None: any length); labels.json and
    spiece.model in assets.extra/."""
    import tensorflow as tf

    from xlnet_tf import kernels

    spec = tf.TensorSpec([None, seq], tf.int32)

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[spec, spec, tf.TensorSpec([None, seq], tf.float32)])
        def serve(self, input_ids, segment_ids, padding_mask):
            logits = self.model({"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
                                training=False)["logits"]
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    module = Serving()
    with kernels.use("plain"):
        tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
    os.makedirs(os.path.join(export_dir, "assets.extra"))
    with open(os.path.join(export_dir, "assets.extra", "labels.json"), "w") as f:
        json.dump({"kind": "classification", "labels": labels}, f)
    with open(SPIECE, "rb") as src, open(os.path.join(export_dir, "assets.extra", "spiece.model"), "wb") as dst:
        dst.write(src.read())


def settings_in(directory):
    """run_classifier.py's settings of the classifier in ``directory`` (its model_dir: ``directory``/model)."""
    return make_flags(directory, task_name="sst-2", do_predict=True)


def write_classifier(directory):
    """The classifier's checkpoint in ``directory``/model and its ids export as version 3 of ``directory``/export."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # the same weights at every run
    model, task = build_model(settings_in(directory))
    tf.train.Checkpoint(model=model).save(os.path.join(directory, "model", "model"))
    save_ids_export(model, os.path.join(directory, "export", "3"), task.labels)
