"""Span extraction: SQuAD 1.1 and 2.0 (run_squad.py).

Settings: ``SquadSettings`` (run_squad.py's flags, the original names and defaults). Data: ``squad_data`` (the SQuAD
JSON reader, squad_lib_sp's windowing into ``P <sep> Q <sep> <cls>`` features, training shards written by
``--do_prepro`` or on first use, the cached eval features). Head: ``squad_head.XLNetSquad`` (HF names:
``squad_hf_names``); loss and the in-graph answer of exports: ``squad_answers``. Predictions and metrics:
``squad_postprocess`` (the original's beam post-processing; predictions.json, nbest_predictions.json, null_odds.json,
with ``--null_score_diff_threshold`` "" where the null odds exceed it, and squad.summary.json; the official metrics,
SQuAD 1.1's or 2.0's by the file, with XLNet's best-threshold keys, written to ``<predict_dir>/eval_results.json``
whenever the file has answers). Serving: ``question``, ``context`` -> ``text``, ``start_char``, ``end_char``,
``null_odds``; token ids (with ``p_mask``, ``cls_index``) -> the head's beam. Batch prediction: SQuAD files'
questions (``*.json``) or rows of question and context; rows ``prediction``, ``start_char``, ``end_char``,
``null_odds``. Keras model on raw text: ``squad_text_model.XLNetTextSquad``; its windows are
``squad_graph.squad_windows`` (on ``xlnet_tf.preprocessing``'s preprocessor).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import ClassVar, Iterator, Mapping, Optional

from absl import logging

from xlnet_tf import hf
from xlnet_tf.tasks.base import BatchPrediction, Row, Serving, Task, TaskFamily
from xlnet_tf.tasks.squad import squad_hf_names
from xlnet_tf.training.settings import FinetuneSettings, Ignored, SettingsError, setting

KIND = "squad"
TEXT_INPUTS = ("question", "context")
ANSWER_OUTPUTS = ("text", "start_char", "end_char", "null_odds")

hf.register_head(squad_hf_names.HEAD)


@dataclasses.dataclass
class SquadSettings(FinetuneSettings):
    """run_squad.py's settings (no TensorFlow here: checked before it loads)."""

    do_prepro: bool = setting(False, "Perform preprocessing only.")
    num_proc: int = setting(1, "Number of preprocessing processes.", above=0)
    proc_id: int = setting(0, "Process id for preprocessing.")
    init: str = setting("normal", "Initialization method (only 'normal' is supported).",
                        choices=("normal", "uniform"))
    init_std: float = setting(0.02, "Initialization std when init is normal.", above=0)
    train_file: Optional[str] = setting(None, "Path of train file (SQuAD JSON).")
    predict_file: Optional[str] = setting(None, "Path of prediction file (SQuAD JSON).")
    max_query_length: int = setting(64, "Max query length.", above=0)
    doc_stride: int = setting(128, "Doc stride.", above=0)
    max_answer_length: int = setting(64, "Max answer length.", above=0)
    n_best_size: int = setting(5, "n best size for predictions.", above=0)
    start_n_top: int = setting(5, "Beam size for span start.", above=0)
    end_n_top: int = setting(5, "Beam size for span end.", above=0)
    target_eval_key: str = setting("best_f1", "Metric logged as the headline result.")
    null_score_diff_threshold: Optional[float] = setting(
        None, "SQuAD 2.0 submission: predictions.json answers \"\" where a question's null odds (null_odds.json) "
        "exceed this; --do_eval reports the best (best_f1_thresh). Default: the best non-null answer everywhere, "
        "as the original.")
    # The original run_squad.py's defaults where they differ (its published XLNet-Large recipe).
    do_train: bool = True
    max_seq_length: int = 512
    train_batch_size: int = 48
    train_steps: int = 8000
    learning_rate: float = 3e-5
    adam_epsilon: float = 1e-6
    lr_layer_decay_rate: float = 0.75
    predict_batch_size: int = 32

    STAGES: ClassVar[tuple] = ("do_prepro",) + FinetuneSettings.STAGES
    ORIGINAL_FLAGS: ClassVar[Mapping] = dict(
        FinetuneSettings.ORIGINAL_FLAGS,
        summary_type=Ignored("last", "Unused by SQuAD (kept for command-line compatibility)."),
        init_range=Ignored(0.1, "Unused ('uniform' init is not supported)."),
        init_global_vars=Ignored(False, "Unused (kept for command-line compatibility)."))

    def family(self):
        from xlnet_tf import tasks
        return tasks.get(KIND)

    def required(self) -> tuple:
        names = ()
        if self.do_prepro or self.do_train or self.do_eval or self.do_predict:
            names += ("spiece_model_file",)
        if self.do_prepro or self.do_train:
            names += ("train_file",)
        if self.do_eval or self.do_predict:
            names += ("predict_file",)
        return names if self.do_prepro else names + ("model_config_path", "model_dir")

    def input_files(self) -> tuple:
        return super().input_files() + ("train_file", "predict_file")

    def trains(self) -> bool:
        return self.do_train and not self.do_prepro

    def errors(self) -> list:
        errors = super().errors()
        if self.do_prepro and not (self.output_dir or self.model_dir):
            errors.append("--do_prepro needs --output_dir (or --model_dir)")
        if self.max_seq_length - self.max_query_length - 3 < 1:
            errors.append(f"--max_seq_length={self.max_seq_length} leaves no room for the paragraph after "
                          f"--max_query_length={self.max_query_length} and 3 special tokens")
        if self.max_query_length > 0 and self.doc_stride > self.max_seq_length - self.max_query_length - 3 >= 1:
            errors.append(f"--doc_stride={self.doc_stride} exceeds the paragraph window (--max_seq_length="
                          f"{self.max_seq_length} - --max_query_length={self.max_query_length} - 3 = "
                          f"{self.max_seq_length - self.max_query_length - 3} tokens): the tokens between windows "
                          "would never be seen")
        if not 0 <= self.proc_id < self.num_proc:
            errors.append(f"--proc_id={self.proc_id} must be in [0, --num_proc={self.num_proc})")
        if max(self.start_n_top, self.end_n_top) > self.max_seq_length:
            errors.append("--start_n_top/--end_n_top cannot exceed --max_seq_length")
        if self.init != "normal":
            errors.append("--init=uniform is not supported (use --init=normal with --init_std)")
        return errors

    @property
    def features_dir(self) -> str:
        return self.output_dir or os.path.join(self.model_dir, "data")


class SquadServing(Serving):
    def text_inputs(self, info) -> dict:
        return {name: [None] for name in TEXT_INPUTS}

    def ids_spec(self, info) -> dict:
        import tensorflow as tf

        spec = super().ids_spec(info)
        spec.update(p_mask=tf.TensorSpec([None, None], tf.float32, "p_mask"),
                    cls_index=tf.TensorSpec([None], tf.int32, "cls_index"))
        return spec

    def outputs_from_ids(self, model, features: dict, info) -> dict:
        from xlnet_tf.tasks.squad.squad_answers import INFERENCE_OUTPUTS

        outputs = model(features, training=False)
        return {k: outputs[k] for k in INFERENCE_OUTPUTS}

    def outputs_from_text(self, model, preprocessor, texts: dict, info) -> dict:
        from xlnet_tf.tasks.squad.squad_answers import best_answers

        return best_answers(model, preprocessor, texts["question"], texts["context"], info.extras)

    def preprocessor_kwargs(self, info) -> dict:
        return {"max_query_length": info.extras["max_query_length"], "doc_stride": info.extras["doc_stride"]}

    def serves_inputs(self, names: set) -> bool:
        return names == set(TEXT_INPUTS)


class SquadBatch(BatchPrediction):
    def text_inputs(self, meta: dict) -> tuple:
        return TEXT_INPUTS

    def input_formats(self) -> dict:
        return {KIND: read_squad_rows}

    def input_format_of(self, path: str) -> Optional[str]:
        return KIND if path.endswith(".json") else None

    def outputs(self, outputs: dict, meta: dict) -> dict:
        return {k: outputs[k].numpy() for k in ANSWER_OUTPUTS}

    def row(self, outputs: dict, i: int, meta: dict) -> dict:
        """run_squad.py's answer ("" for none) and where it is in the context (characters)."""
        return dict(prediction=outputs["text"][i].decode("utf-8"), start_char=int(outputs["start_char"][i]),
                    end_char=int(outputs["end_char"][i]), null_odds=round(float(outputs["null_odds"][i]), 6))


class SquadFamily(TaskFamily):
    name = KIND
    serving_class = SquadServing
    text_model = "xlnet_tf.tasks.squad.squad_text_model:XLNetTextSquad"
    batch_class = SquadBatch
    entry_point = "run_squad.py"
    run_record_runner = KIND

    # -- settings ------------------------------------------------------------------------------------------------
    @property
    def settings_class(self):
        return SquadSettings

    def task_name_of(self, values: dict) -> Optional[str]:
        return KIND

    def settings_for_export(self, values: dict, task_name: str):
        values = {k: v for k, v in values.items() if k != "task_name"}
        return SquadSettings.from_values(values)

    def task(self, settings) -> "SquadTask":
        return SquadTask(self, settings)


def read_squad_rows(path: str) -> Iterator[Row]:
    """The questions of a SQuAD file (``{"data": [{"paragraphs": [{"context", "qas": [{"id", "question"}]}]}]}``),
    as rows: ``text_a`` the question, ``text_b`` its context, ``id`` the question's id, ``line`` its number in the
    file (1-based). The file's structure is read as run_squad.py reads it (``squad_data.squad_questions``): a file
    it refuses is an ``InputError`` naming the place; a question it refuses or skips (no ``id``: the output row
    would have nothing to join on; empty question or context) is a bad row naming its place. The file is one JSON
    document, so it is read whole (SQuAD 2.0 dev: 4 MB); progress (``end``) is the share of the questions, in
    bytes of the file."""
    from xlnet_tf.tasks.squad.squad_data import empty_text, load_squad_json, squad_questions

    size, data = load_squad_json(path)
    questions = list(squad_questions(path, data))  # structural errors before the first row
    for k, question in enumerate(questions, 1):
        end = size * k // len(questions)
        problem = question.problem or (empty_text(question) and f"{question.where}: {empty_text(question)}")
        if problem:
            yield Row(k, end, problem=problem)
        else:
            yield Row(k, end, question.question, question.context, question.qas_id)


def official_script(version_2: bool) -> str:
    """The official evaluation script whose definitions scored a file."""
    return "evaluate-v2.0.py" if version_2 else "evaluate-v1.1.py"


@dataclasses.dataclass
class SquadEvalData:
    """The prediction file read and windowed: ``squad`` (``squad_data.SquadFile``), its features and the ids of
    the questions skipped while reading or windowing (reason -> ids)."""
    squad: object
    features: list
    skipped: dict


class SquadTask(Task):
    """SQuAD in a run_squad.py run."""

    name = KIND

    def __init__(self, family, settings: SquadSettings):
        super().__init__(family, settings)
        self.main_metric = settings.target_eval_key

    @property
    def feature_settings(self):
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        return squad_data.FeatureSettings(s.spiece_model_file, s.max_seq_length, s.max_query_length, s.doc_stride,
                                          s.uncased)

    @functools.cached_property
    def model_config(self):
        from xlnet_tf.tokenization import XLNetTokenizer
        from xlnet_tf.training.setup import load_model_config

        s = self.settings
        vocab = XLNetTokenizer(s.spiece_model_file).vocab_size if s.spiece_model_file else None
        return load_model_config(s, vocab, "--spiece_model_file", initializer_range=s.init_std)

    def prepare_only(self) -> bool:
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        if not s.do_prepro:
            return False
        squad_data.prepare_train_shard(s.train_file, s.features_dir, self.feature_settings, s.num_proc, s.proc_id,
                                       overwrite=s.overwrite_data, seed=s.seed)
        return True  # as the original: preprocessing only

    def training_data(self, num_replicas: int) -> tuple:
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        shards = self._training_shards()
        per_replica = s.train_batch_size // num_replicas

        def dataset_fn(ctx, start_step):
            return squad_data.train_dataset(shards, per_replica, s.max_seq_length, input_context=ctx,
                                            shuffle_buffer=s.shuffle_buffer, seed=s.seed, start_step=start_step)
        return dataset_fn, {}

    def _training_shards(self) -> list:
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        return squad_data.training_shards(s.features_dir, s.train_file, self.feature_settings, seed=s.seed,
                                          overwrite=s.overwrite_data)

    def build_model(self):
        from xlnet_tf.tasks.squad.squad_head import XLNetSquad

        s = self.settings
        return XLNetSquad(self.model_config, start_n_top=s.start_n_top, end_n_top=s.end_n_top, dtype=s.dtype)

    def loss(self, features: dict, outputs: dict) -> tuple:
        from xlnet_tf.tasks.squad.squad_answers import squad_loss

        return squad_loss(features, outputs)

    def restore(self, model, checkpoint_path: Optional[str] = None) -> str:
        from xlnet_tf.checkpoint import restore_for_inference

        path = restore_for_inference(model, self.settings.model_dir, checkpoint_path)
        logging.info("restored %s", path)
        return path

    def eval_data(self) -> SquadEvalData:
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        squad, features, skipped = squad_data.prepare_eval_features(s.predict_file, s.features_dir,
                                                                    self.feature_settings, overwrite=s.overwrite_data)
        self._check_prediction_file(squad)
        return SquadEvalData(squad, features, skipped)

    def check_eval_data(self) -> None:
        """Before training: the prediction file read (not windowed), so that the flags it cannot serve fail now."""
        from xlnet_tf.tasks.squad import squad_data

        s = self.settings
        if s.do_eval or s.do_predict:
            self._check_prediction_file(squad_data.read_squad_file(s.predict_file, False))

    def _check_prediction_file(self, squad) -> None:
        s = self.settings
        if s.do_eval and not squad.has_answers:
            raise SettingsError(f"--do_eval: {s.predict_file} has no gold answers (use --do_predict)")
        if s.null_score_diff_threshold is not None and not squad.version_2:
            raise SettingsError(f"--null_score_diff_threshold: {s.predict_file} is a SQuAD 1.1 file (every question "
                                "has an answer, none is \"\"): drop the flag")

    def infer(self, strategy, model, data: SquadEvalData) -> tuple:
        """``(predictions, nbest, null_odds)`` keyed by question id, the original's post-processing; questions
        dropped when reading (empty question, duplicate id) still get an entry: "" / no answer."""
        import numpy as np

        from xlnet_tf.finetuning.trainer import predict
        from xlnet_tf.tasks.squad import squad_data, squad_postprocess
        from xlnet_tf.tasks.squad.squad_answers import INFERENCE_OUTPUTS

        s = self.settings
        if data.features:
            raw = predict(strategy, model, squad_data.eval_dataset(data.features, s.predict_batch_size),
                          keep=("feature_index",), jit_compile=s.jit_compile)
        else:  # every question skipped: no batches, each question answers ""
            raw = {k: np.zeros([0]) for k in INFERENCE_OUTPUTS + ("feature_index",)}
        results = squad_data.results_by_unique_id(data.features, raw)
        predictions, nbest, null_odds = squad_postprocess.compute_predictions(
            data.squad.examples, data.features, results, s.n_best_size, s.max_answer_length, s.start_n_top,
            s.end_n_top)
        for qas_id in [i for reason, ids in data.skipped.items() for i in ids if reason != "duplicate id"]:
            predictions.setdefault(qas_id, "")
            nbest.setdefault(qas_id, [])
            null_odds.setdefault(qas_id, squad_postprocess.SKIPPED_NULL_ODDS)
        return predictions, nbest, null_odds

    def writes_predictions(self, predicting: bool) -> bool:
        return True  # as the original: --do_eval writes the prediction files too

    def evaluates(self, data: SquadEvalData, evaluating: bool) -> bool:
        return data.squad.has_answers  # as the original: metrics whenever the file has answers

    def write_predictions(self, data, outputs: tuple, step: int, checkpoint: str) -> list:
        """predictions.json ("" where the null odds exceed --null_score_diff_threshold, if given),
        nbest_predictions.json, null_odds.json and ``squad.summary.json``: what the files were made from and with
        which settings (the threshold: whether predictions.json says "no answer"), as the other families'
        ``<task>.<split>.summary.json``."""
        from xlnet_tf.io_utils import write_json_atomic
        from xlnet_tf.tasks.squad import squad_postprocess

        s = self.settings
        predictions, nbest, null_odds = outputs
        written = squad_postprocess.apply_null_threshold(predictions, null_odds, s.null_score_diff_threshold)
        paths = list(squad_postprocess.write_prediction_files(self.predict_dir, written, nbest, null_odds).values())
        no_answer = sum(1 for text in written.values() if not text)
        write_json_atomic(os.path.join(self.predict_dir, squad_postprocess.SUMMARY), dict(
            task=self.name, split=os.path.basename(s.predict_file), step=step, checkpoint=checkpoint, files=paths,
            settings=self.prediction_settings(), questions=len(written), no_answer=no_answer,
            skipped={k: len(v) for k, v in data.skipped.items()}), indent=4)
        applied = ("" if s.null_score_diff_threshold is None else
                   f" (null odds > --null_score_diff_threshold={s.null_score_diff_threshold!r})")
        logging.info("wrote %s; %d of %d questions answered \"\"%s", ", ".join(paths), no_answer, len(written),
                     applied)
        return paths

    def prediction_settings(self) -> dict:
        """The settings predictions.json depends on, beyond the model and the file (recorded beside it)."""
        s = self.settings
        return dict(null_score_diff_threshold=s.null_score_diff_threshold, max_seq_length=s.max_seq_length,
                    max_query_length=s.max_query_length, doc_stride=s.doc_stride,
                    max_answer_length=s.max_answer_length, n_best_size=s.n_best_size, start_n_top=s.start_n_top,
                    end_n_top=s.end_n_top)

    def metrics(self, data: SquadEvalData, outputs: tuple) -> dict:
        from xlnet_tf.tasks.squad import squad_postprocess

        predictions, _, null_odds = outputs
        metrics = squad_postprocess.evaluate(data.squad.data, predictions, null_odds,
                                             self.settings.null_score_diff_threshold, data.squad.version_2)
        metrics["skipped_examples"] = sum(len(ids) for ids in data.skipped.values())
        return metrics

    def write_eval_summaries(self, step: int, metrics: dict) -> None:
        self.eval_summaries.write("eval", step, metrics)

    def write_eval(self, metrics: dict, step: int, checkpoint: str, data: SquadEvalData,
                   all_checkpoints: Optional[dict] = None) -> dict:
        """``<predict_dir>/eval_results.json`` (the metrics, step, checkpoint, skipped questions by reason, the
        official script whose definitions scored them, the threshold that wrote predictions.json), the
        TensorBoard summaries, the headline log lines (with how to apply the best threshold) and the metrics as one
        JSON line on stdout (as the original)."""
        from xlnet_tf.io_utils import write_json_atomic
        from xlnet_tf.tasks.squad import squad_postprocess

        s = self.settings
        write_json_atomic(os.path.join(self.predict_dir, squad_postprocess.EVAL_RESULTS),
                          dict(metrics, step=step, checkpoint=checkpoint,
                               skipped={k: len(v) for k, v in data.skipped.items()},
                               official_script=official_script(data.squad.version_2),
                               null_score_diff_threshold=s.null_score_diff_threshold), indent=4)
        self.write_eval_summaries(step, metrics)
        logging.info("=" * 80)
        logging.info("Result | step %d | %s", step, " | ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        logging.info("%s = %.4f", s.target_eval_key, metrics.get(s.target_eval_key, float("nan")))
        hint = self.threshold_hint(metrics, data)
        if hint:
            logging.info("%s", hint)
        logging.info("=" * 80)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))
        return self.eval_report(metrics, step, checkpoint, data, all_checkpoints)

    def threshold_hint(self, metrics: dict, data: SquadEvalData) -> str:
        """How to write the SQuAD 2.0 predictions that score the best threshold's metric (the log line above it
        rounds the threshold, which would then answer other questions); "" for SQuAD 1.1."""
        key = "best_exact" if self.settings.target_eval_key == "best_exact" else "best_f1"
        if not data.squad.version_2 or f"{key}_thresh" not in metrics:
            return ""
        best, applied = metrics[f"{key}_thresh"], self.settings.null_score_diff_threshold
        if applied is None:
            return (f"{key} {metrics[key]:.4f} is at null odds threshold {best!r}: predictions.json answers every "
                    f"question; --null_score_diff_threshold={best!r} (e.g. --nodo_train --do_predict) writes \"\" "
                    "where the null odds exceed it, the SQuAD 2.0 submission")
        return (f"predictions.json answers \"\" where the null odds exceed --null_score_diff_threshold={applied!r} "
                f"(scored as exact/f1); {key} {metrics[key]:.4f} is at --null_score_diff_threshold={best!r}")

    def eval_report(self, metrics: dict, step: int, checkpoint: str, data: SquadEvalData,
                    all_checkpoints: Optional[dict] = None) -> dict:
        report = dict(task=self.name, split=os.path.basename(self.settings.predict_file), step=step,
                      checkpoint=checkpoint, metrics=metrics, main_metric=self.main_metric)
        hint = self.threshold_hint(metrics, data)
        return dict(report, hint=hint) if hint else report

    def serving_info(self, step: int):
        """What a SQuAD export records: the windowing and the post-processing settings of ``--do_predict``."""
        from xlnet_tf.finetuning.serving import ServingInfo

        s = self.settings
        return ServingInfo(kind=KIND, task=self.name, max_seq_length=s.max_seq_length, lower_case=s.uncased,
                           global_step=step, family=self.family, extras=dict(
                               max_query_length=s.max_query_length, doc_stride=s.doc_stride,
                               max_answer_length=s.max_answer_length, start_n_top=s.start_n_top,
                               end_n_top=s.end_n_top, n_best_size=s.n_best_size))
