"""What run_classifier.py does: encode (cached), train, evaluate, predict, export.

``run(settings)`` takes ``ClassifierSettings`` (built from the flags by ``xlnet_tf.cli``, or directly).
Tasks: every GLUE task (official TSV layouts), IMDB, Yelp-2/5 (``classifier_data``) and RACE (``race_data``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf.checkpoint import is_tf1_checkpoint, load_original_checkpoint, resolve_checkpoint
from xlnet_tf.tasks import classifier_data, race_data
from xlnet_tf.finetuning import metrics as task_metrics, records
from xlnet_tf.finetuning.serving import ServingInfo, export_serving, write_run_record
from xlnet_tf.finetuning.task_settings import ClassifierSettings
from xlnet_tf.io_utils import write_json_atomic, write_text_atomic
from xlnet_tf.models.heads import XLNetClassifier, XLNetMultipleChoice
from xlnet_tf.tokenization import XLNetTokenizer
from xlnet_tf.finetuning.trainer import FinetuneTask, predict, train, write_eval_summaries
from xlnet_tf.training.settings import SettingsError
from xlnet_tf.training.setup import checkpoint_step, load_model_config, read_model, restore_for_inference, start_run

MAIN_METRIC = {"mcc": "mcc", "pearson": "pearson"}  # otherwise accuracy


@dataclasses.dataclass
class TaskBundle:
    name: str
    kind: str  # classification | regression | multiple_choice
    labels: Optional[list]
    metric_names: tuple
    submission: str
    prepare: Callable  # (split) -> (tfrecord path, meta)
    spec: dict
    dummy: dict
    build_model: Callable  # () -> keras model

    @property
    def main_metric(self) -> str:
        for name in self.metric_names:
            if name in MAIN_METRIC:
                return MAIN_METRIC[name]
        return "accuracy"


def _make_task(s: ClassifierSettings, tokenizer, model_config) -> TaskBundle:
    output_dir = s.output_dir or os.path.join(s.model_dir, "features")
    common = dict(summary_type=s.summary_type, use_summ_proj=s.use_summ_proj, dtype=s.dtype)
    if s.is_race:
        levels = ("high",) if s.high_only else ("middle",) if s.middle_only else race_data.LEVELS
        return TaskBundle(
            "race", "multiple_choice", list(race_data.ANSWERS), ("accuracy",), "race",
            lambda split: race_data.prepare_features(s.data_dir, split, tokenizer, s.max_seq_length,
                                                     s.max_qa_length, output_dir, levels,
                                                     s.overwrite_data),
            race_data.feature_spec(s.max_seq_length), race_data.dummy_features(s.max_seq_length),
            lambda: XLNetMultipleChoice(model_config, **common))
    task = classifier_data.get_task(s.task_name)
    labels = task.label_list()
    # Head names as the original: classification_{cls_scope or task}, regression_{task}.
    scope = task.name if task.regression else (s.cls_scope or task.name)
    return TaskBundle(
        task.name, "regression" if task.regression else "classification", labels, task.metrics,
        task.submission or task.name,
        lambda split: classifier_data.prepare_features(task, s.data_dir, split, tokenizer,
                                                       s.max_seq_length, output_dir, s.overwrite_data),
        classifier_data.feature_spec(s.max_seq_length, task.regression),
        classifier_data.dummy_features(s.max_seq_length, task.regression),
        lambda: XLNetClassifier(model_config, num_labels=len(labels or [1]), task_scope=scope,
                                regression=task.regression, **common))


def loss_fn_for(kind: str):
    def loss_fn(features, outputs):
        logits = outputs["logits"]
        if kind == "regression":
            per_example = tf.square(logits[:, 0] - tf.cast(features["label"], tf.float32))
        else:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(features["label"], tf.int32), logits=logits)
        weights = tf.cast(features.get("is_real_example", tf.ones_like(per_example)), tf.float32)
        return tf.reduce_sum(per_example * weights), tf.reduce_sum(weights)
    return loss_fn


def evaluate_outputs(bundle: TaskBundle, outputs: dict) -> dict:
    """Metrics of the real examples in ``outputs`` (from ``finetuning.predict``)."""
    logits, labels = outputs["logits"], outputs["label"]
    if bundle.kind == "regression":
        result = task_metrics.regression_metrics(logits[:, 0], labels.astype(np.float64))
        result["loss"] = result["mse"]
        return result
    if bundle.kind == "multiple_choice":
        result = task_metrics.multiple_choice_metrics(logits, labels, outputs["level"], race_data.LEVELS)
    else:
        result = task_metrics.classification_metrics(logits, labels, bundle.metric_names)
    result["loss"] = task_metrics.mean_softmax_cross_entropy(logits, labels.astype(np.int64))
    return result


def run_inference(strategy, model, bundle: TaskBundle, path: str, meta: dict, batch_size: int) -> dict:
    """Model outputs for the real examples of a cached split, in file order."""
    dataset = records.eval_dataset(path, bundle.spec, bundle.dummy, meta["num_records"], batch_size)
    keep = ("label", "is_real_example", "example_index") + (("level",) if bundle.kind == "multiple_choice" else ())
    outputs = predict(strategy, model, dataset, keep=keep)
    real = outputs["is_real_example"] == 1
    order = np.argsort(outputs["example_index"][real], kind="stable")
    return {k: v[real][order] for k, v in outputs.items()}


def write_predictions(bundle: TaskBundle, outputs: dict, meta: dict, predict_dir: str, split: str) -> list:
    """GLUE submission TSV (``index<TAB>prediction``; label strings, or the score for regression) and
    ``{task}.{split}.logits.json``; RACE: ``race.{split}.predictions.json`` ({id: letter})."""
    guids = [meta["guids"][i] for i in outputs["example_index"]]
    logits = outputs["logits"]
    written = []
    if bundle.kind == "regression":
        predictions = [float(x) for x in logits[:, 0]]
    else:
        predictions = [bundle.labels[i] for i in np.argmax(logits, axis=-1)]
    if bundle.kind == "multiple_choice":
        written.append(write_json_atomic(
            os.path.join(predict_dir, f"race.{split}.predictions.json"), dict(zip(guids, predictions))))
    else:
        lines = ["index\tprediction"] + [f"{g}\t{p:.6f}" if isinstance(p, float) else f"{g}\t{p}"
                                         for g, p in zip(guids, predictions)]
        written.append(write_text_atomic(os.path.join(predict_dir, f"{bundle.submission}.tsv"),
                                                 "\n".join(lines) + "\n"))
    written.append(write_json_atomic(
        os.path.join(predict_dir, f"{bundle.name}.{split}.logits.json"),
        [{"index": g, "logits": [float(x) for x in row], "prediction": p}
         for g, row, p in zip(guids, logits, predictions)]))
    return written


def _data_summary(meta: dict) -> dict:
    return {k: meta.get(k, 0) for k in ("num_examples", "num_skipped", "num_truncated")} | {
        "skipped_examples": meta.get("skipped", [])[:20]}


def reads_pairs(s: ClassifierSettings) -> bool:
    """Whether the task's examples are sentence pairs (its labelled files have a second text column)."""
    if s.is_race:
        return False
    labeled = classifier_data.get_task(s.task_name).labeled
    return labeled is not None and labeled.text_b is not None


def serving_info(s: ClassifierSettings, bundle: TaskBundle, step: int) -> ServingInfo:
    """What an export of this task records for its clients (kind, labels, text layout, preprocessing)."""
    return ServingInfo(kind=bundle.kind, task=bundle.name, max_seq_length=s.max_seq_length, lower_case=s.uncased,
                       labels=bundle.labels, pair=reads_pairs(s), global_step=step, max_qa_length=s.max_qa_length)


def restore_model(model, s: ClassifierSettings, checkpoint_path: Optional[str] = None) -> str:
    """Fine-tuned weights for eval/predict/export: ``checkpoint_path``, else the latest in ``--model_dir``, else
    ``--init_checkpoint`` if it is a fine-tuned checkpoint (the original's TF1 layout with this task's head, or a
    native one)."""
    if checkpoint_path or tf.train.latest_checkpoint(s.model_dir):
        return restore_for_inference(model, s.model_dir, checkpoint_path)
    if not s.init_checkpoint:
        raise FileNotFoundError(f"--model_dir={s.model_dir} holds no fine-tuned checkpoint and there is no "
                                "--init_checkpoint: train first (--do_train) or point at a fine-tuned checkpoint")
    prefix = resolve_checkpoint(s.init_checkpoint)
    if is_tf1_checkpoint(prefix):
        load_original_checkpoint(model, prefix)  # names every missing head variable if it is not fine-tuned
    else:
        try:
            read_model(model, prefix)
        except ValueError as e:
            raise SettingsError(f"--init_checkpoint: not a fine-tuned checkpoint of this task: {e}") from None
    return prefix


def restored_model(s: ClassifierSettings):
    """The task model of ``s`` restored for inference (``--predict_ckpt``, else the latest checkpoint in
    ``--model_dir``, else a fine-tuned ``--init_checkpoint``): returns ``(model, bundle, checkpoint, config)``."""
    tokenizer = XLNetTokenizer(s.spiece_model_file, lower=s.uncased)
    model_config = load_model_config(s, tokenizer.vocab_size, f"--spiece_model_file={s.spiece_model_file}")
    bundle = _make_task(s, tokenizer, model_config)
    model = bundle.build_model()
    return model, bundle, restore_model(model, s, s.predict_ckpt), model_config


def predict_input_files(s: ClassifierSettings, model, bundle: TaskBundle, tokenizer, checkpoint: str) -> list:
    """``--do_predict`` over ``--predict_input_glob``: one predictions file per input file in ``--predict_dir``
    (``xlnet_tf.batch.prediction.predict_shards``: streamed, resumable). Returns the files written."""
    from xlnet_tf.batch import prediction as batch_predict

    predictor = batch_predict.KerasPredictor(
        model, tokenizer, s.max_seq_length, bundle.labels, bundle.kind == "regression",
        identity=dict(checkpoint=checkpoint, task=bundle.name, max_seq_length=s.max_seq_length,
                      spiece_sha256=tokenizer.fingerprint(), uncased=s.uncased),
        pair=reads_pairs(s))
    fields = batch_predict.Fields.parse(s.predict_text_fields, s.predict_id_field, "--predict_text_fields")
    summary = batch_predict.predict_shards(predictor, s.predict_input_glob, s.predict_dir or
                                           os.path.join(s.model_dir, "predict"), fields, s.predict_batch_size,
                                           glob_flag="--predict_input_glob")
    return [shard["output"] for shard in summary["shards"]]


def run(settings: ClassifierSettings) -> dict:
    """Runs the stages the settings ask for; returns {'train': ..., 'eval': ..., 'predict': [...], 'export': ...}."""
    s = settings.validate()
    tokenizer = XLNetTokenizer(s.spiece_model_file, lower=s.uncased)
    model_config = load_model_config(s, tokenizer.vocab_size, f"--spiece_model_file={s.spiece_model_file}")
    strategy = start_run(s)
    bundle = _make_task(s, tokenizer, model_config)
    result, model = {}, None

    if s.do_train:
        write_run_record(s.model_dir, "classifier", s)  # what `python -m xlnet_tf.cli.export` rebuilds the model from
        path, meta = bundle.prepare("train")
        logging.info("train data: %s", _data_summary(meta))
        if s.do_eval or s.do_predict:  # a bad label in the eval data is an error now, not after training
            bundle.prepare(s.eval_split)
        per_replica = s.train_batch_size // strategy.num_replicas_in_sync

        def dataset_fn(ctx, start_step):
            return records.train_dataset(path, bundle.spec, ctx, per_replica, s.shuffle_buffer,
                                         s.seed + start_step)

        model, train_metrics = train(strategy, FinetuneTask(bundle.build_model, loss_fn_for(bundle.kind)),
                                     s, dataset_fn)
        result["train"] = dict(train_metrics, data=_data_summary(meta))

    def inference_model(checkpoint_path=None):
        with strategy.scope():
            fresh = bundle.build_model()
        return fresh, restore_model(fresh, s, checkpoint_path)

    if s.do_eval or s.do_predict or s.export_dir:
        if model is None or s.predict_ckpt:
            model, checkpoint = inference_model(s.predict_ckpt)
        else:
            checkpoint = tf.train.latest_checkpoint(s.model_dir)
        step = checkpoint_step(checkpoint)

    if s.do_predict and s.predict_input_glob:  # large sharded inputs, streamed (xlnet_tf.batch.prediction)
        result["predict"] = predict_input_files(s, model, bundle, tokenizer, checkpoint)
    if s.do_eval or (s.do_predict and not s.predict_input_glob):
        path, meta = bundle.prepare(s.eval_split)
        batch = s.eval_batch_size if s.do_eval else s.predict_batch_size
        outputs = run_inference(strategy, model, bundle, path, meta, batch)
        if s.do_eval:
            evals = {}
            if s.eval_all_ckpt:  # every checkpoint in model_dir, best by the task's main metric
                state = tf.train.get_checkpoint_state(s.model_dir)
                for ckpt in (state.all_model_checkpoint_paths if state else []):
                    other, _ = inference_model(ckpt)
                    m = evaluate_outputs(bundle, run_inference(strategy, other, bundle, path, meta, batch))
                    evals[ckpt] = m
                    write_eval_summaries(s.model_dir, checkpoint_step(ckpt), m, f"eval_{s.eval_split}")
            eval_metrics = evaluate_outputs(bundle, outputs)
            evals[checkpoint] = eval_metrics
            best = max(evals, key=lambda c: evals[c][bundle.main_metric])
            report = dict(task=bundle.name, split=s.eval_split, step=step, checkpoint=checkpoint,
                          metrics=eval_metrics, data=_data_summary(meta))
            if s.eval_all_ckpt:
                report.update(best_checkpoint=best, best_metrics=evals[best],
                              all_checkpoints={c: m for c, m in evals.items()})
            write_eval_summaries(s.model_dir, step, eval_metrics, f"eval_{s.eval_split}")
            write_json_atomic(os.path.join(s.model_dir, f"eval_results.{s.eval_split}.json"), report)
            logging.info("eval %s %s at step %d: %s | data %s", bundle.name, s.eval_split, step,
                         {k: round(v, 4) for k, v in eval_metrics.items()}, _data_summary(meta))
            result["eval"] = report
        if s.do_predict and not s.predict_input_glob:
            predict_dir = s.predict_dir or os.path.join(s.model_dir, "predict")
            written = write_predictions(bundle, outputs, meta, predict_dir, s.eval_split)
            write_json_atomic(os.path.join(predict_dir, f"{bundle.name}.{s.eval_split}.summary.json"),
                              dict(task=bundle.name, split=s.eval_split, step=step, checkpoint=checkpoint,
                                   files=written, data=_data_summary(meta)))
            if meta.get("num_skipped"):
                logging.warning("%d %s rows were skipped and have no prediction (see %s)", meta["num_skipped"],
                                s.eval_split, meta.get("skipped", [])[:3])
            logging.info("predictions: %s", written)
            result["predict"] = written

    if s.export_dir:
        result["export"] = export_serving(model, s.export_dir, serving_info(s, bundle, step), s.spiece_model_file)
    return result
