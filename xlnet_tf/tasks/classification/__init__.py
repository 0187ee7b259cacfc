"""Sequence classification and regression: GLUE (every task, official TSV layouts), IMDB and Yelp.

One family, two serving kinds: ``classification`` (labels, softmax probabilities) and ``regression`` (STS-B: one
score). Regression is a mode of the family, not a family of its own, because everything but the head's width, the
loss, the metrics and the outputs is shared (data layout, encoding, serving inputs); an export records its kind
(``regression`` for STS-B, as exports always have), and both kinds resolve to this family.

Data reading and encoding: ``classifier_data`` (tasks, TSV/CSV/IMDB readers, the feature cache). Head:
``classification_head.XLNetClassifier`` under the original scopes ``classification_{--cls_scope or task}`` and
``regression_{task}`` (a long document read through memory: ``classification_head.read_segments``; HF's
``XLNetForSequenceClassification``: ``classification_hf_names``). Keras model on raw text:
``classification_text_model.XLNetTextClassifier``. Loss: softmax cross-entropy, or the squared error for
regression. Metrics: ``finetuning.metrics`` (accuracy, F1, MCC; Pearson/Spearman), the main one MCC (CoLA), Pearson
(STS-B), else accuracy. Predictions: the GLUE submission TSV (``index<TAB>prediction``) and
``{task}.{split}.logits.json``. Serving: ``sentence`` (and ``sentence2`` for pair tasks) -> ``label``,
``probabilities``, ``logits``; regression ``score``, ``logits``. Batch prediction rows: ``prediction`` (label)
and ``probabilities``, or the score.

A family of your own may build on the head (``tests/test_task_family.py``'s does): importing
``classification_head`` loads this package, which registers its HF names.
"""

from __future__ import annotations

import os
from typing import Optional

from xlnet_tf import hf
from xlnet_tf.tasks.classification import classification_hf_names, classifier_data
from xlnet_tf.tasks.base import BatchPrediction, RecordsTask, Serving, TaskFamily, weighted_loss, write_logits

CLASSIFICATION, REGRESSION = "classification", "regression"
MAIN_METRIC = {"mcc": "mcc", "pearson": "pearson"}  # otherwise accuracy
TEXT_INPUTS = ("sentence", "sentence2")
IDS_INPUTS = {"input_ids", "segment_ids", "padding_mask"}

hf.register_head(classification_hf_names.HEAD)


def long_document(segment_length: int, mem_len: int) -> dict:
    """An export's ``extras``: a long-document classifier (``--long_document=memory``) reads its ``max_seq_length``
    tokens in segments of ``segment_length`` through ``mem_len`` of memory per layer; 0: one sequence. Recorded for
    every classifier: the ``metadata`` signature has always had both."""
    return dict(segment_length=segment_length, mem_len=mem_len)


def _regression(meta: dict, output_names=()) -> bool:
    """An export's kind says it; an export that records none: its ``score`` output."""
    return meta.get("kind") == REGRESSION or "score" in output_names


class ClassificationServing(Serving):
    def kinds(self) -> tuple:
        return (CLASSIFICATION, REGRESSION)

    def text_inputs(self, info) -> dict:
        return {name: [None] for name in (TEXT_INPUTS if info.pair else TEXT_INPUTS[:1])}

    def ids_spec(self, info, length=None) -> dict:
        """[batch, seq]; a long document's length is fixed (max_segments * segment_length): the model splits it
        into segments of static shape."""
        return super().ids_spec(info, info.max_seq_length if info.extras.get("segment_length") else length)

    def outputs_from_ids(self, model, features: dict, info) -> dict:
        import tensorflow as tf

        logits = model(features, training=False)["logits"]
        if info.kind == REGRESSION:
            return {"score": logits[:, 0], "logits": logits}
        best = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label": tf.gather(tf.constant(list(info.labels), tf.string), best)}

    def outputs_from_text(self, model, preprocessor, texts: dict, info) -> dict:
        """As ``outputs_from_ids``, except for a row with a text that is empty or only whitespace: batch prediction
        and --do_predict on a train/dev file skip such a row ("no text"), so the export gives it no answer either:
        ``label`` "", ``probabilities`` and ``logits`` zeros (regression: ``score`` NaN). (A GLUE test file's row is
        predicted from the empty text: its submission needs a prediction for every row.)"""
        import tensorflow as tf

        outputs = super().outputs_from_text(model, preprocessor, texts, info)
        blank_text = r"[\s\x0b\x1c-\x1f\x85\p{Z}]*"  # what Python's str.strip() removes: RE2's \s is ASCII only
        has_text = tf.reduce_all(tf.stack([tf.logical_not(tf.strings.regex_full_match(text, blank_text))
                                           for text in texts.values()]), axis=0)
        empty = {"label": lambda v: tf.fill(tf.shape(v), ""), "score": lambda v: tf.fill(tf.shape(v), float("nan"))}
        for name, value in outputs.items():
            blank = empty.get(name, tf.zeros_like)(value)
            mask = tf.reshape(has_text, [-1] + [1] * (len(value.shape) - 1))
            outputs[name] = tf.where(mask, value, tf.cast(blank, value.dtype))
        return outputs

    def serves_inputs(self, names: set) -> bool:
        return names in ({"sentence"}, set(TEXT_INPUTS), IDS_INPUTS)


class ClassificationBatch(BatchPrediction):
    def text_inputs(self, meta: dict) -> tuple:
        return TEXT_INPUTS

    def encode_ids(self, tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int):
        return classifier_data.encode_example(tokenizer, _Example(text_a, text_b), max_seq_length)

    def outputs(self, outputs: dict, meta: dict) -> dict:
        import tensorflow as tf

        if _regression(meta, outputs):
            score = outputs["score"] if "score" in outputs else outputs["logits"][:, 0]
            return {"score": tf.cast(score, tf.float32).numpy()}
        probs = (outputs["probabilities"] if "probabilities" in outputs
                 else tf.nn.softmax(tf.cast(outputs["logits"], tf.float32), axis=-1))
        return {"probabilities": tf.cast(probs, tf.float32).numpy()}

    def row(self, outputs: dict, i: int, meta: dict) -> dict:
        import numpy as np

        if "score" in outputs:
            return {"prediction": round(float(outputs["score"][i]), 6)}
        probs = outputs["probabilities"][i]
        k = int(np.argmax(probs))
        labels = meta.get("labels")
        return {"prediction": labels[k] if labels else k, "probabilities": [round(float(p), 6) for p in probs]}

    def identity(self, meta: dict, output_names) -> dict:
        return dict(labels=meta.get("labels"), regression=_regression(meta, output_names))


class ClassificationFamily(TaskFamily):
    name = CLASSIFICATION
    serving_class = ClassificationServing
    text_model = "xlnet_tf.tasks.classification.classification_text_model:XLNetTextClassifier"
    batch_class = ClassificationBatch

    # -- settings ------------------------------------------------------------------------------------------------
    def task_names(self) -> tuple:
        return tuple(classifier_data.TASKS)

    def aliases(self) -> dict:
        return dict(classifier_data.ALIASES)

    def flag_defaults(self, task_name: str) -> dict:
        spec = classifier_data.get_task(task_name)
        return {"eval_split": "test"} if list(spec.files) == ["test"] else {}  # GLUE's diagnostic set

    def settings_errors(self, s) -> list:
        spec = classifier_data.get_task(s.task_name)
        errors = []
        if s.do_train and "train" not in spec.files:
            errors.append(f"--do_train: --task_name={spec.name} has no training set (GLUE's diagnostic is predicted "
                          "with an MNLI run's model: --model_dir=<that run> --do_predict)")
        if (s.do_eval or s.do_predict) and s.eval_split not in spec.files:
            errors.append(f"--eval_split={s.eval_split}: --task_name={spec.name} has {', '.join(spec.files)} only")
        if s.is_regression and not spec.regression:
            errors.append(f"--is_regression=True but --task_name={s.task_name} is a classification task")
        if s.segments > 1 and classifier_data.reads_pairs(spec):
            errors.append(f"--long_document={s.long_document}: --task_name={s.task_name} has sentence pairs; a long "
                          "document is one text")
        return errors

    def metric_names(self, task_name: str) -> tuple:
        spec = classifier_data.get_task(task_name)
        if spec.regression:  # finetuning.metrics.regression_metrics
            return ("pearson", "spearman", "corr", "mse", "loss")
        return ("accuracy",) + tuple(m for m in spec.metrics if m != "accuracy") + ("loss",)

    def task(self, settings) -> "ClassificationTask":
        return ClassificationTask(self, settings)


class _Example:
    """What ``classifier_data.encode_example`` reads of an example."""

    def __init__(self, text_a: str, text_b: Optional[str]):
        self.text_a, self.text_b = text_a, text_b


class ClassificationTask(RecordsTask):
    """A GLUE/IMDB/Yelp task of a run_classifier.py run."""

    def __init__(self, family, settings):
        super().__init__(family, settings)
        self.spec = classifier_data.get_task(settings.task_name)
        self.name = self.spec.name
        self.regression = self.spec.regression
        self.labels = self.spec.label_list()
        self.main_metric = next((MAIN_METRIC[m] for m in self.spec.metrics if m in MAIN_METRIC), "accuracy")

    @property
    def output_dir(self) -> str:
        return self.settings.output_dir or os.path.join(self.settings.model_dir, "features")

    def prepare(self, split: str) -> tuple:
        s = self.settings
        return classifier_data.prepare_features(self.spec, s.data_dir, split, self.tokenizer, s.document_length,
                                                self.output_dir, s.overwrite_data)

    # With --long_document=memory an example is the whole document as one left-padded sequence of
    # max_segments * max_seq_length tokens (<sep> <cls> at its end): the model reads it segment by segment.
    @property
    def feature_spec(self) -> dict:
        return classifier_data.feature_spec(self.settings.document_length, self.regression)

    @property
    def dummy_features(self) -> dict:
        return classifier_data.dummy_features(self.settings.document_length, self.regression)

    def build_model(self):
        from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

        s = self.settings
        # Head names as the original: classification_{cls_scope or task}, regression_{task}.
        scope = self.name if self.regression else (s.cls_scope or self.spec.head_scope or self.name)
        return XLNetClassifier(self.model_config, num_labels=len(self.labels or [1]), task_scope=scope,
                               regression=self.regression, summary_type=s.summary_type,
                               use_summ_proj=s.use_summ_proj, num_segments=s.segments, mem_len=s.memory_length,
                               dtype=s.dtype)

    def loss(self, features: dict, outputs: dict) -> tuple:
        import tensorflow as tf

        logits = outputs["logits"]
        if self.regression:
            per_example = tf.square(logits[:, 0] - tf.cast(features["label"], tf.float32))
        else:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(features["label"], tf.int32), logits=logits)
        return weighted_loss(per_example, features)

    def metrics(self, data, outputs: dict) -> dict:
        import numpy as np

        from xlnet_tf.finetuning import metrics

        logits, labels = outputs["logits"], outputs["label"]
        if self.regression:
            result = metrics.regression_metrics(logits[:, 0], labels.astype(np.float64))
            result["loss"] = result["mse"]
            return result
        result = metrics.classification_metrics(logits, labels, self.spec.metrics)
        result["loss"] = metrics.mean_softmax_cross_entropy(logits, labels.astype(np.int64))
        return result

    def predictions(self, logits) -> list:
        import numpy as np

        if self.regression:
            return [float(x) for x in logits[:, 0]]
        return [self.labels[i] for i in np.argmax(logits, axis=-1)]

    def write_prediction_files(self, outputs: dict, guids: list, split: str) -> list:
        """GLUE submission TSV (``index<TAB>prediction``; label strings, or the score for regression) and
        ``{task}.{split}.logits.json``. The submission's name (e.g. ``SST-2.tsv``) is the test split's; another
        split's predictions are ``SST-2.dev.tsv``, so that a dev run never replaces a submission."""
        from xlnet_tf.io_utils import write_text_atomic

        logits = outputs["logits"]
        predictions = self.predictions(logits)
        lines = ["index\tprediction"] + [f"{g}\t{p:.6f}" if isinstance(p, float) else f"{g}\t{p}"
                                         for g, p in zip(guids, predictions)]
        name = self.spec.submission or self.name
        return [write_text_atomic(os.path.join(self.predict_dir, f"{name}.tsv" if split == "test" else
                                               f"{name}.{split}.tsv"),
                                  "\n".join(lines) + "\n"),
                write_logits(self.predict_dir, self.name, split, guids, logits, predictions)]

    def reads_pairs(self) -> bool:
        """Whether the task's examples are sentence pairs (its files have a second text column)."""
        return classifier_data.reads_pairs(self.spec)

    def serving_info(self, step: int):
        from xlnet_tf.finetuning.serving import ServingInfo

        s = self.settings
        segment_length = 0 if s.segments == 1 else s.max_seq_length
        return ServingInfo(kind=REGRESSION if self.regression else CLASSIFICATION, task=self.name,
                           max_seq_length=s.document_length, lower_case=s.uncased, labels=self.labels,
                           pair=self.reads_pairs(), global_step=step, family=self.family,
                           extras=long_document(segment_length, s.memory_length if segment_length else 0))
