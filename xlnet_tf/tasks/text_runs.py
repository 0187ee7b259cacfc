"""``load_text_model`` (``xlnet_tf.load_text_model``): the model of a fine-tuning run (``run_classifier.py``,
``run_squad.py``, ``run_tagger.py``, a job's run) as the Keras text model of its family (``TaskFamily.text_model``),
rebuilt as its export is: from the run's record (``finetune_settings.json``) and its checkpoint, with the
preprocessing it was trained with.

    model = xlnet_tf.load_text_model("runs/tiny/finetune_sentiment")
    model.predict(["A gripping film."])
"""

from __future__ import annotations

from typing import Optional

from xlnet_tf import io_utils, tasks
from xlnet_tf.errors import InputError


def load_text_model(model_dir: str, *, checkpoint: Optional[str] = None, dtype: Optional[str] = None):
    """The text model of the fine-tuning run in ``model_dir``: the network it trained, restored from its latest
    checkpoint (or ``checkpoint``, a prefix), and the preprocessing of its settings (sequence length, casing,
    SQuAD's windows, RACE's budget, a long document's segments, the tags): ``predict`` on raw strings gives what
    the run's export serves; ``fit`` continues from it. ``dtype``: a precision policy other than the run's."""
    from xlnet_tf.finetuning.serving import preprocessor_for
    from xlnet_tf.training.setup import checkpoint_step

    if not io_utils.isdir(model_dir):
        raise InputError(f"{model_dir}: not a directory (the model_dir of a fine-tuning run)")
    values = {k: v for k, v in dict(predict_ckpt=checkpoint, dtype=dtype).items() if v is not None}
    settings = tasks.run_settings(model_dir, values)
    if settings is None:
        raise InputError(f"{model_dir}: no finetune_settings.json, so not the model_dir of a fine-tuning run; a "
                         "pretrained checkpoint loads with XLNetTextClassifier.from_checkpoint(path, ...) and the "
                         "other text models' from_checkpoint")
    family = settings.family()
    text_model = family.text_model_class()
    if text_model is None:
        raise InputError(f"{model_dir}: a run of the {family.name} family, which has no Keras text model (its "
                         "runs export: python -m xlnet_tf.cli.export)")
    task = family.task(settings)
    network, restored = task.restored_model()
    info = task.export_info(checkpoint_step(restored))
    model = text_model.from_run(network, info, preprocessor_for(info, settings.spiece_model_file))
    model.run_info = info
    return model
