"""Token classification (tagging): part-of-speech tags, named entities, chunks (run_tagger.py).

Settings: ``TaggingSettings`` (run_classifier.py's flags plus the files, columns, tag scheme and window stride; its
own entry point because these flags mean nothing to the sentence tasks). Data, alignment, windows and metrics:
``tagging_data`` (CoNLL or JSONL; each word's tag on its first SentencePiece piece; long sentences in overlapping
windows, each word labelled once in evaluation by the window where it has the most context). Head:
``tagging_head.XLNetTagger`` (a dense layer on every position; HF's ``XLNetForTokenClassification``:
``tagging_hf_names``). Keras model on raw text: ``tagging_text_model.XLNetTextTagger``. Loss: softmax cross-entropy
over the first pieces (every window in training; the scoring window in evaluation). Metrics: token accuracy; entity
precision, recall and F1 (conlleval's definition, via seqeval) for BIO-family tags, the main metric then ``f1``.
Predictions: ``tagging.{split}.predictions.jsonl`` (``{"id", "tokens", "tags"}`` a sentence) and
``tagging.{split}.conll`` (``word [gold] predicted``, conlleval's input; the gold column whenever the file has
tags, a test file's too). A test file may be untagged; a tagged one (CoNLL-2003's eng.testb) is scored by
``--do_eval --eval_split=test`` (``eval_results.test.json``, TensorBoard ``eval_test``: not the dev ones).
Serving (``tagging_graph``): ``text`` [B] -> the words with character offsets and their tags (and entity spans
for BIO tags), padded [B, N] tensors plus ``num_words``; token ids [B, S] -> ``logits``, ``tag_ids``, ``tags``.
Batch prediction: a row's text -> ``words``, ``tags``, ``start_char``, ``end_char`` (and ``entities``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import ClassVar, Optional

from xlnet_tf.tasks.task_settings import ClassifierSettings
from xlnet_tf import hf
from xlnet_tf.tasks.tagging import tagging_data
from xlnet_tf.tasks.tagging import tagging_hf_names
from xlnet_tf.tasks.base import BatchPrediction, MetadataInfo, RecordsTask, Serving, TaskFamily
from xlnet_tf.training.settings import FinetuneSettings, path_missing, setting, setting_of

KIND = TASK = "tagging"
TEXT_INPUT = "text"
SPLITS = ("train", "dev", "test")
EXTENSIONS = (".conll", ".jsonl", ".txt", ".tsv")

hf.register_head(tagging_hf_names.HEAD)


@dataclasses.dataclass
class TaggingSettings(ClassifierSettings):
    """run_tagger.py's settings: run_classifier.py's and the tagging data's (no TensorFlow here)."""

    task_name: Optional[str] = setting(TASK, "tagging (aliases: pos, ner, chunking).")
    train_file: Optional[str] = setting(None, "Training file, CoNLL or *.jsonl (default: --data_dir/train.conll, "
                                        "train.jsonl, train.txt or train.tsv).")
    dev_file: Optional[str] = setting(None, "Dev file (default: --data_dir/dev.*, as --train_file).")
    test_file: Optional[str] = setting(None, "Test file, tags optional: with tags --do_eval --eval_split=test "
                                       "scores it (default: --data_dir/test.*).")
    word_column: int = setting(0, "CoNLL: the column of the word (0-based; negative counts from the end).")
    tag_column: int = setting(-1, "CoNLL: the column of the tag (default: the last).")
    tag_scheme: str = setting("auto", "bio: entity tags (IOB1/IOB2/IOBES; entity F1), plain: any tags (accuracy); "
                              "auto: bio if every training tag is O or X-TYPE.", choices=tagging_data.SCHEMES)
    window_stride: int = setting(0, "Pieces between the starts of a long sentence's windows (0: half the window, "
                                 "max_seq_length - 2).")
    predict_text_fields: str = setting(TEXT_INPUT, "With --predict_input_glob: the text column/key.")
    max_seq_length: int = 128
    data_dir: Optional[str] = setting(None, "Directory of train/dev/test files (or give --train_file etc.).")
    train_batch_size: Optional[int] = setting_of(FinetuneSettings, "train_batch_size")  # (no RACE note)

    FILE_FLAGS: ClassVar[dict] = {"train": "train_file", "dev": "dev_file", "test": "test_file"}
    # run_classifier.py's flags that mean nothing to a tagger: it refuses them by name (--help listed them, and a run
    # given them trained as without, its record saying otherwise). Batch prediction feeds token ids, and a tagger's
    # windows need the text: large inputs are tagged through the export's raw-text signature.
    _PREDICT = "run_tagger.py tags large inputs through its export: python -m xlnet_tf.cli.predict "
    NOT_FLAGS: ClassVar[dict] = {
        "predict_input_glob": _PREDICT + "--saved_model=<--export_dir> --input_glob=... --text_fields=text",
        "predict_text_fields": _PREDICT + "--saved_model=<--export_dir> --input_glob=... --text_fields=...",
        "predict_id_field": _PREDICT + "--saved_model=<--export_dir> --input_glob=... --id_field=...",
        **dict.fromkeys(("long_document", "max_segments", "mem_len"), "a tagger reads a long text in overlapping "
                        "windows of --max_seq_length (--window_stride), each token tagged once; "
                        "--long_document=memory is run_classifier.py's, for classification and regression"),
        **dict.fromkeys(("max_qa_length", "high_only", "middle_only"), "RACE's: run_classifier.py --task_name=race"),
        **dict.fromkeys(("summary_type", "use_summ_proj", "is_regression"), "a tagger's head scores every token: no "
                        "sequence summary, no regression")}

    @property
    def stride(self) -> int:
        return self.window_stride or max((self.max_seq_length - 2) // 2, 1)

    def split_file(self, split: str) -> Optional[str]:
        """The file of ``split``: its flag, else the first of --data_dir/<split>.{conll,jsonl,txt,tsv} that exists
        (the first candidate if none does, for the error)."""
        given = getattr(self, self.FILE_FLAGS[split])
        if given or not self.data_dir:
            return given
        candidates = [os.path.join(self.data_dir, split + ext) for ext in EXTENSIONS]
        return next((c for c in candidates if not path_missing(c)), candidates[0])

    def needed_splits(self) -> tuple:
        reading = self.do_eval or (self.do_predict and not self.predict_input_glob)
        return (("train",) if self.do_train else ()) + ((self.eval_split,) if reading else ())

    def required(self) -> tuple:
        unnamed = any(not getattr(self, self.FILE_FLAGS[s]) for s in self.needed_splits())
        return ("task_name",) + FinetuneSettings.required(self) + (("data_dir",) if unnamed else ())

    def errors(self) -> list:
        errors = super().errors()
        for split in self.needed_splits():
            path = self.split_file(split)
            if path and path_missing(path):
                flag = self.FILE_FLAGS[split]
                errors.append(f"--{flag}={path}: file not found" if getattr(self, flag) else
                              f"--data_dir={self.data_dir}: no {split} file ({split}{', '.join(EXTENSIONS)}; or "
                              f"give --{flag})")
        if self.window_stride < 0 or self.window_stride > self.max_seq_length - 2:
            errors.append(f"--window_stride={self.window_stride} must be in [0, max_seq_length - 2 = "
                          f"{self.max_seq_length - 2}] (a larger stride skips pieces between windows)")
        return errors


class TaggingServing(Serving):
    def text_inputs(self, info) -> dict:
        return {TEXT_INPUT: [None]}

    def outputs_from_ids(self, model, features: dict, info) -> dict:
        import tensorflow as tf

        logits = model(features, training=False)["logits"]
        ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "tag_ids": ids, "tags": tf.gather(tf.constant(list(info.labels), tf.string), ids)}

    def outputs_from_text(self, model, preprocessor, texts: dict, info) -> dict:
        from xlnet_tf.tasks.tagging.tagging_graph import tag_text

        return tag_text(model, preprocessor, texts[TEXT_INPUT], info.labels, info.extras["window_stride"],
                        info.extras["tag_scheme"] == "bio")

    def serves_inputs(self, names: set) -> bool:
        return names == {TEXT_INPUT}


class TaggingBatch(BatchPrediction):
    def text_inputs(self, meta: dict) -> tuple:
        return (TEXT_INPUT,)

    def outputs(self, outputs: dict, meta: dict) -> dict:
        if "words" not in outputs:
            raise ValueError("batch prediction of a tagging export needs its raw-text serving_default")
        return {k: v.numpy() for k, v in outputs.items() if k != "logits"}

    def row(self, outputs: dict, i: int, meta: dict) -> dict:
        n = int(outputs["num_words"][i])
        row = {"words": [w.decode("utf-8") for w in outputs["words"][i][:n]],
               "tags": [t.decode("utf-8") for t in outputs["tags"][i][:n]],
               "start_char": outputs["start_char"][i][:n].tolist(), "end_char": outputs["end_char"][i][:n].tolist(),
               "scores": [round(float(s), 6) for s in outputs["scores"][i][:n]]}
        if "num_entities" in outputs:
            row["entities"] = [
                {"type": outputs["entity_types"][i][e].decode("utf-8"),
                 "text": outputs["entity_text"][i][e].decode("utf-8"),
                 "start_char": int(outputs["entity_start_char"][i][e]),
                 "end_char": int(outputs["entity_end_char"][i][e])} for e in range(int(outputs["num_entities"][i]))]
        return row

    def identity(self, meta: dict, output_names) -> dict:
        # A rerun must tag with the same tags and scheme (metadata.json keeps the scheme in the family's extras).
        return dict(labels=meta.get("labels"), regression=False,
                    tag_scheme=MetadataInfo(meta).extras.get("tag_scheme"))


class TaggingFamily(TaskFamily):
    name = KIND
    # A test file may carry tags (CoNLL-2003's eng.testb): --do_eval --eval_split=test passes the settings' check,
    # and TaggingTask.prepare refuses a test file without tags, naming it (its content is not read before then).
    test_split_labelled = True
    serving_class = TaggingServing
    text_model = "xlnet_tf.tasks.tagging.tagging_text_model:XLNetTextTagger"
    batch_class = TaggingBatch
    entry_point = "run_tagger.py"

    # -- settings ------------------------------------------------------------------------------------------------
    @property
    def settings_class(self):
        return TaggingSettings

    def task_names(self) -> tuple:
        return (TASK,)

    def aliases(self) -> dict:
        return {"pos": TASK, "ner": TASK, "chunking": TASK, "token_classification": TASK}

    def settings_for_export(self, values: dict, task_name: str):
        return TaggingSettings.from_values(dict(values, task_name=task_name))

    def settings_errors(self, s) -> list:
        if s.predict_input_glob:  # run_classifier's file prediction feeds token ids; tagging's windows need text
            return ["--predict_input_glob: tag large inputs with the export's raw-text signature: python -m "
                    "xlnet_tf.cli.predict --saved_model=<--export_dir> --input_glob=... --text_fields=text"]
        return []

    def metric_names(self, task_name: str) -> tuple:
        # tagging_data.tagging_metrics; the entity metrics with BIO tags (--tag_scheme, "auto" decided by the data)
        return ("accuracy", "precision", "recall", "f1", "f1/", "num_words", "loss")

    def task(self, settings) -> "TaggingTask":
        return TaggingTask(self, settings)


class TaggingTask(RecordsTask):
    """A tagging task of a run_tagger.py run."""

    name = TASK
    keep = ("score_mask", "word_index")

    def __init__(self, family, settings):
        super().__init__(family, settings)
        self.main_metric = "f1" if self.scheme == "bio" else "accuracy"

    # -- data ------------------------------------------------------------------------------------------------
    def read(self, split: str) -> list:
        """The sentences of ``split``: train and dev with tags; test with tags if its file has them."""
        s = self.settings
        return tagging_data.read_sentences(s.split_file(split), s.word_column, s.tag_column,
                                           None if split == "test" else True)

    def labelled(self, split: str) -> bool:
        """Whether ``split``'s file has tags (``tagging_data.has_tags``; train and dev must)."""
        s = self.settings
        return split != "test" or tagging_data.has_tags(s.split_file(split), s.word_column, s.tag_column)

    @functools.cached_property
    def _tags_path(self) -> str:
        return os.path.join(self.settings.model_dir, "tagging.tags.json")

    @functools.cached_property
    def tag_info(self) -> dict:
        """The tags (the head's classes) and the scheme: those recorded in ``<model_dir>/tagging.tags.json`` when
        the directory has a checkpoint they belong to (a resumed run, evaluation, export; a training file with a
        tag the record lacks is refused, naming both), else the training file's (then recorded). A record without
        a checkpoint is a failed run's, not this one's: the training file decides (a warning says so)."""
        from absl import logging

        from xlnet_tf import io_utils
        from xlnet_tf.errors import InputError

        s = self.settings
        recorded = io_utils.read_json(self._tags_path) if io_utils.exists(self._tags_path) else None
        trained = io_utils.exists(os.path.join(s.model_dir, "checkpoint"))
        has_train_file = bool(s.train_file or s.data_dir)
        if recorded is not None and (trained or not (has_train_file and s.do_train)):
            if has_train_file and s.do_train:
                new = sorted(set(tagging_data.tag_list(self.read("train"))) - set(recorded["tags"]))
                if new:
                    raise InputError(f"{s.split_file('train')} has tags {new[:10]} that {self._tags_path} (the head "
                                     f"of the checkpoints in --model_dir={s.model_dir}: {recorded['tags'][:10]}) "
                                     "lacks: train in a new --model_dir")
            return recorded
        if not has_train_file:
            raise InputError(f"{self._tags_path}: not found, and no --train_file/--data_dir to read the tags from "
                             "(train first, or give the training file)")
        train = self.read("train")
        tags = tagging_data.tag_list(train)
        if not tags:
            raise InputError(f"{s.split_file('train')}: no tagged words")
        pretrained = self._hf_tags(tags)
        scheme = tagging_data.detect_scheme(tags) if s.tag_scheme == "auto" else s.tag_scheme
        if scheme == "bio" and tagging_data.detect_scheme(tags) != "bio":
            bad = [t for t in tags if not tagging_data._BIO_TAG.match(t)][:5]
            raise InputError(f"--tag_scheme=bio: {s.split_file('train')} has tags that are not O or X-TYPE: {bad}")
        info = {"tags": pretrained or tags, "scheme": scheme}
        if recorded is not None and recorded != info:
            logging.warning("%s: tags %s of a run that left no checkpoint; replaced by %s's", self._tags_path,
                            recorded.get("tags", [])[:10], s.split_file("train"))
        if s.do_train:
            from xlnet_tf.io_utils import write_json_atomic
            io_utils.makedirs(s.model_dir)
            write_json_atomic(self._tags_path, info)
        return info

    def _hf_tags(self, tags: list) -> Optional[list]:
        """An HF token classifier's tags, in its order (its head then loads as it is), when --init_checkpoint is one
        whose named tags include every training tag; else None (a warning says why its head is not kept)."""
        from absl import logging

        from xlnet_tf import hf

        s = self.settings
        if not (s.init_checkpoint and hf.is_hf_dir(s.init_checkpoint)):
            return None
        checkpoint = hf.HFCheckpoint(s.init_checkpoint)
        if checkpoint.head != "XLNetTagger":
            return None
        if checkpoint.labels and set(tags) <= set(checkpoint.labels):
            return list(checkpoint.labels)
        named = checkpoint.labels[:20] if checkpoint.labels else f"{checkpoint.num_labels} unnamed"
        logging.warning("--init_checkpoint=%s: its %s head is not kept (a new one starts from random weights): its "
                        "tags %s do not include the training file's %s", s.init_checkpoint, checkpoint.architecture,
                        named, tags[:20])
        return None

    @property
    def labels(self) -> list:
        return self.tag_info["tags"]

    @property
    def scheme(self) -> str:
        return self.tag_info["scheme"]

    def data_summary(self, data) -> dict:
        """The base counts, and the words whose gold tag the head does not have (tags seen only in this split):
        the model cannot predict them, so they count as errors in accuracy (and their entities as missed)."""
        from xlnet_tf.tasks.base import data_summary

        summary = data_summary(data.meta)
        unknown = data.meta.get("unknown_tags") or {}
        if unknown:
            summary.update(unknown_tags=unknown, num_unknown_tag_words=int(
                data.meta.get("num_unknown_tag_words", sum(unknown.values()))))
        return summary

    def encoded(self, split: str):
        data = super().encoded(split)
        unknown = data.meta.get("unknown_tags") or {}
        if unknown:
            from absl import logging

            logging.warning("%s: %d word(s) have tags the training data lacks %s: the model cannot predict them; "
                            "they count as errors", self.settings.split_file(split),
                            data.meta.get("num_unknown_tag_words", sum(unknown.values())), unknown)
        return data

    def prepare(self, split: str) -> tuple:
        s = self.settings
        path = s.split_file(split)
        labelled = self.labelled(split)
        if s.do_eval and split == self.eval_split and not labelled:  # before training (check_eval_data), not after
            from xlnet_tf.errors import InputError

            where = ('its first object has no "tags"' if path.endswith(".jsonl") else f"its first word line has no "
                     f"--tag_column={s.tag_column} apart from --word_column={s.word_column}")
            raise InputError(f"{path}: no tags to evaluate ({where}): --do_eval --eval_split={split} needs a tagged "
                             "file; --do_predict alone tags an untagged one")
        cache = os.path.join(s.output_dir or os.path.join(s.model_dir, "features"),
                             f"tagging.{os.path.basename(s.spiece_model_file)}.len-{s.max_seq_length}.stride-"
                             f"{s.stride}.{split}.tf_record")
        path_meta = tagging_data.prepare_features(path, lambda: self.read(split), self.tokenizer, self.labels,
                                                  s.max_seq_length, s.stride, cache, s.overwrite_data)
        # A test file's cache from when test files were read without their tags (no "labelled" in its meta; train
        # and dev ones were tagged) has label -1 everywhere: an evaluation's loss of nothing, no unknown tags.
        if path_meta[1].get("labelled", split != "test") != labelled:
            path_meta = tagging_data.prepare_features(path, lambda: self.read(split), self.tokenizer, self.labels,
                                                      s.max_seq_length, s.stride, cache, True)
        return path_meta

    @property
    def feature_spec(self) -> dict:
        return tagging_data.feature_spec(self.settings.max_seq_length)

    @property
    def dummy_features(self) -> dict:
        return tagging_data.dummy_features(self.settings.max_seq_length)

    # -- model -----------------------------------------------------------------------------------------------
    def build_model(self):
        from xlnet_tf.tasks.tagging.tagging_head import XLNetTagger

        s = self.settings
        return XLNetTagger(self.model_config, num_labels=len(self.labels), task_scope=s.cls_scope or TASK,
                           dtype=s.dtype)

    def loss(self, features: dict, outputs: dict) -> tuple:
        """Cross-entropy of every labelled first piece, averaged over the batch's windows (as the classifier
        averages over examples) so that the learning rate means the same on every task."""
        import tensorflow as tf

        label = features["label"]
        weight = tf.cast(label >= 0, tf.float32) * tf.cast(
            features.get("is_real_example", tf.ones_like(label[:, 0]))[:, None], tf.float32)
        per_piece = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(label, 0),
                                                                   logits=outputs["logits"])
        pieces = tf.maximum(tf.reduce_sum(weight, axis=1), 1.0)
        windows = tf.cast(features.get("is_real_example", tf.ones_like(label[:, 0])), tf.float32)
        return tf.reduce_sum(tf.reduce_sum(per_piece * weight, axis=1) / pieces), tf.reduce_sum(windows)

    def infer(self, strategy, model, data) -> dict:
        """Per window: the predicted tag ids and the gold tag's log-probability (not the [W, S, T] logits)."""
        import tensorflow as tf

        def reduced(features, training=False):
            logits = model(features, training=training)["logits"]
            gold = tf.gather(tf.nn.log_softmax(logits), tf.maximum(features["label"], 0), batch_dims=2)
            return {"predictions": tf.argmax(logits, axis=-1, output_type=tf.int32), "gold_log_prob": gold}

        return super().infer(strategy, reduced, data)

    def _predicted(self, data, outputs) -> tuple:
        """(sentences of ``tagging_data``'s split, predicted tags per sentence)."""
        sentences = self.read(data.split)
        found = tagging_data.word_predictions(outputs, len(sentences))
        predicted = [[self.labels[found[i][w]] for w in range(len(s.words))] for i, s in enumerate(sentences)]
        return sentences, predicted

    def metrics(self, data, outputs: dict) -> dict:
        import numpy as np

        sentences, predicted = self._predicted(data, outputs)
        result = tagging_data.tagging_metrics([s.tags for s in sentences], predicted, self.scheme)
        scored = (outputs["score_mask"] == 1) & (outputs["label"] >= 0)
        result["loss"] = float(-np.mean(outputs["gold_log_prob"][scored])) if scored.any() else 0.0
        return result

    def write_prediction_files(self, outputs: dict, guids: list, split: str) -> list:
        """``tagging.{split}.predictions.jsonl`` and ``tagging.{split}.conll`` (``word gold predicted`` when the
        split's file has tags, a test file's too: conlleval's input; else ``word predicted``)."""
        import json

        from xlnet_tf.io_utils import write_text_atomic
        from xlnet_tf.tasks.base import EncodedSplit

        sentences, predicted = self._predicted(EncodedSplit(split, "", {}), outputs)
        lines = [json.dumps({"id": s.guid, "tokens": s.words, "tags": p}, ensure_ascii=False)
                 for s, p in zip(sentences, predicted)]
        conll = ["\n".join(" ".join(columns) for columns in zip(s.words, *([s.tags] if s.tags else []), p))
                 for s, p in zip(sentences, predicted)]
        base = os.path.join(self.predict_dir, f"{TASK}.{split}")
        return [write_text_atomic(base + ".predictions.jsonl", "\n".join(lines) + "\n"),
                write_text_atomic(base + ".conll", "\n\n".join(conll) + "\n")]

    def serving_info(self, step: int):
        from xlnet_tf.finetuning.serving import ServingInfo

        s = self.settings
        return ServingInfo(kind=KIND, task=TASK, max_seq_length=s.max_seq_length, lower_case=s.uncased,
                           labels=self.labels, pair=False, global_step=step, family=self.family,
                           extras=dict(tag_scheme=self.scheme, window_stride=s.stride))
