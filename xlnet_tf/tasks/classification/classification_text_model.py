"""The classification family's Keras model on raw text: ``XLNetTextClassifier`` (``xlnet_tf.XLNetTextClassifier``),
built on the text models' base (``xlnet_tf.tasks.text_models``)."""

from __future__ import annotations

from typing import Optional

import keras

from xlnet_tf.checkpoint import load_task_weights
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.classification import long_document
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
from xlnet_tf.tasks.text_data import checked_class_labels
from xlnet_tf.tasks.text_models import TextTaskModel, build_parts, checkpoint_source, hf_summary_settings


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextClassifier(TextTaskModel):
    """Sequence classification / regression on raw strings: ``XLNetPreprocessor`` + ``XLNetClassifier``.

    ``fit``/``evaluate``/``predict`` inputs: sentences, a tf.string [B] tensor (or a Python list / numpy array of
    strings), or sentence pairs as a tuple ``(sentences, second_sentences)`` of two such [B] batches (``fit`` on a
    ``tf.data`` of ``((a, b), label)``); ``call`` takes what ``preprocessor(sentences[, second_sentences])``
    gives (``input_ids``, ``segment_ids``, ``padding_mask`` [B, S]). Output: ``logits`` float32 [B, num_labels]
    (``tf.nn.softmax`` for probabilities), or the score [B] for regression. Train with
    ``SparseCategoricalCrossentropy(from_logits=True)`` (classes) or ``MeanSquaredError`` (regression), as
    ``run_classifier.py`` does. ``labels``: the class names (an HF classifier's id2label), its export's by default.
    """

    def __init__(self, preprocessor: XLNetPreprocessor, network: keras.Model, labels: Optional[list] = None,
                 **kwargs):
        super().__init__(preprocessor, network, **kwargs)
        self.labels = None if labels is None else self._serving_labels(labels)

    @classmethod
    def from_checkpoint(cls, path: str, num_labels: Optional[int] = None, seq_length: int = 128, *, config=None,
                        spiece_model=None, lower_case: Optional[bool] = None, regression: Optional[bool] = None,
                        task_scope: str = "task", summary_type: Optional[str] = None,
                        use_summ_proj: Optional[bool] = None, dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None, new_head: bool = False,
                        num_segments: int = 1, mem_len: Optional[int] = None) -> "XLNetTextClassifier":
        """A classifier from a checkpoint (see ``load_task_weights``): a release directory, a native checkpoint's
        directory or prefix, a HuggingFace XLNet directory or ``hf://owner/name`` (``xlnet_tf.hf``).
        ``config`` (an ``xlnet_config.json`` path or an ``XLNetConfig``) and ``spiece_model``
        (a path or the proto's bytes) default to the files next to the checkpoint. ``task_scope`` names the head
        of a fine-tuned TF1 checkpoint (``model/classification_{task_scope}/...``, the original's task name);
        ``dropout``/``dropatt`` are the fine-tuning rates (run_classifier.py's defaults). A checkpoint fine-tuned
        for another task is refused unless ``new_head=True`` (its network, a new head). Left as None,
        ``num_labels``, ``regression``, ``summary_type``, ``use_summ_proj`` and ``lower_case`` are an HF
        classifier's (its config.json and tokenizer_config.json), else 2 (1 for regression), False, "last", True,
        False; an HF classifier whose head is loaded names its classes (``labels``: id2label).

        ``num_segments`` > 1: long documents (run_classifier.py's ``--long_document=memory``): a text's first
        ``num_segments * seq_length - 2`` tokens are read in segments of ``seq_length`` through ``mem_len`` hidden
        states of memory per layer (default: all earlier segments; docs/long_documents.md); one text a row."""
        if not isinstance(num_segments, int) or num_segments < 1:  # before seq_length * num_segments is checked
            raise ValueError(f"num_segments={num_segments!r}: must be a positive int (1: no memory)")
        if num_segments == 1 and mem_len:
            raise ValueError(f"mem_len={mem_len}: memory carries a long document between segments; set "
                             "num_segments > 1, or leave mem_len unset")
        source = checkpoint_source(path)
        hf_head = hf_summary_settings(source, ("XLNetClassifier",))
        if hf_head:
            num_labels = source.num_labels if num_labels is None else num_labels
            regression = source.regression if regression is None else regression
        preprocessor, config = build_parts(source, config, spiece_model, seq_length * num_segments, lower_case,
                                            dropout, dropatt)
        if num_labels is None:
            num_labels = 1 if regression else 2
        network = XLNetClassifier(config, num_labels=num_labels, task_scope=task_scope, regression=bool(regression),
                                  summary_type=summary_type or hf_head.get("summary_type", "last"),
                                  use_summ_proj=hf_head.get("use_summ_proj", True) if use_summ_proj is None
                                  else use_summ_proj, dtype=dtype, num_segments=num_segments,
                                  mem_len=(num_segments - 1) * seq_length if mem_len is None else mem_len)
        loaded = load_task_weights(network, source, new_head)
        labels = source.labels if hf_head and loaded == "fine-tuned" and not network.regression else None
        return cls(preprocessor, network, labels=labels, name=name)

    def preprocess(self, x) -> dict:
        """Sentences [B] (a tf.string tensor, a list of strings), a pair ``(sentences, second_sentences)``, or a
        dict with keys ``sentence`` (and ``sentence2``) -> ``input_ids``, ``segment_ids``, ``padding_mask``
        [B, S]."""
        if isinstance(x, dict):
            if "sentence" not in x:
                raise ValueError(f"inputs: a dict of strings needs the key 'sentence' (and 'sentence2' for pairs), "
                                 f"got keys {sorted(x)}")
            sentences, second = x["sentence"], x.get("sentence2")
        elif isinstance(x, tuple) or (isinstance(x, list) and not all(isinstance(s, (str, bytes)) for s in x)):
            # A list of strings is a batch, as predict reads it: two sentences were taken for one pair.
            if len(x) != 2:
                raise ValueError(f"inputs: expected sentences or (sentences, second_sentences), got a tuple of "
                                 f"{len(x)}")
            sentences, second = x
        else:
            sentences, second = x, None
        self._check_layout(second is not None, "inputs")
        return self.preprocessor(sentences, second)

    def _check_layout(self, pair: bool, argument: str) -> None:
        """Refuses what the model does not read, as its export does: pairs in a long document (its second text
        would not be last, run_classifier.py refuses them too), single sentences where the run was fine-tuned on
        pairs."""
        if pair and self.network.num_segments > 1:
            raise ValueError(f"{argument}: sentence pairs, but a long-document classifier (num_segments="
                             f"{self.network.num_segments}) reads one text a row (the second text would not be "
                             "last)")
        if not pair and self.run_info is not None and self.run_info.pair:
            raise ValueError(f"{argument}: single sentences, but this model was fine-tuned on sentence pairs (task "
                             f"{self.run_info.task}): pass (sentences, second_sentences)")

    def export(self, export_dir: str, labels: Optional[list] = None, task: Optional[str] = None,
               pair: Optional[bool] = None, *, format: str = "tf_saved_model") -> str:
        """As ``TextTaskModel.export``; a long-document classifier's export takes one text a row."""
        if pair:
            self._check_layout(True, f"pair={pair}")
        return super().export(export_dir, labels, task, pair, format=format)

    def call(self, inputs, training=None):
        logits = self.network(self._token_ids(inputs), training=training)["logits"]
        return logits[:, 0] if self.network.regression else logits

    def _checked_labels(self, y):
        if y is None or self.network.regression or isinstance(y, dict):
            return y
        return checked_class_labels(y, self.network.num_labels)

    def _serving_kind(self) -> str:
        return "regression" if self.network.regression else "classification"

    def _serving_extras(self) -> dict:
        segments = self.network.num_segments
        return long_document(self.preprocessor.seq_length // segments if segments > 1 else 0, self.network.mem_len)

    def _serving_labels(self, labels: Optional[list]) -> Optional[list]:
        if self.network.regression:
            return super()._serving_labels(labels)
        if labels is None:
            recorded = self.run_info.labels if self.run_info is not None else self.labels
            return list(recorded) if recorded else [str(i) for i in range(self.network.num_labels)]
        if isinstance(labels, (str, bytes)) or len(labels) != self.network.num_labels:
            raise ValueError(f"labels: one name for each of the {self.network.num_labels} classes, in order; got "
                             f"{labels!r}" + (" (Keras' export(path, format) is export(path, format=...) here)"
                                              if isinstance(labels, str) else ""))
        return [str(label) for label in labels]

    def get_config(self):
        return dict(super().get_config(), labels=self.labels)
