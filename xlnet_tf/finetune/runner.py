"""What run_classifier.py does: validate, encode (cached), train, evaluate, predict, export.

``run(flags)`` takes anything with the run_classifier flag names as attributes (absl FLAGS, a namespace).
Tasks: every GLUE task (official TSV layouts), IMDB, Yelp-2/5 (``classifier_data``) and RACE (``race_data``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
from absl import logging

from xlnet_tf.io_utils import write_json_atomic, write_text_atomic
from xlnet_tf.finetune import classifier_data, metrics as task_metrics, race_data, records

MAIN_METRIC = {"mcc": "mcc", "pearson": "pearson"}  # otherwise accuracy


class FlagError(ValueError):
    """A bad flag combination, found before any work."""


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


def validate(flags) -> None:
    """Every inconsistency in the flags, reported at once, before TensorFlow does any work."""
    errors = []
    is_race = (flags.task_name or "").lower() == "race"
    if not flags.task_name:
        errors.append("--task_name is required")
    elif not is_race:
        try:
            task = classifier_data.get_task(flags.task_name)
            if flags.is_regression and not task.regression:
                errors.append(f"--is_regression=True but --task_name={flags.task_name} is a classification task")
        except ValueError as e:
            errors.append(str(e))
    if not (flags.do_train or flags.do_eval or flags.do_predict or flags.export_dir):
        errors.append("nothing to do: set --do_train, --do_eval, --do_predict and/or --export_dir")
    for name in ("model_dir", "model_config_path", "spiece_model_file"):
        if not getattr(flags, name):
            errors.append(f"--{name} is required")
    for name in ("model_config_path", "spiece_model_file"):
        path = getattr(flags, name)
        if path and not os.path.exists(path):
            errors.append(f"--{name}={path}: file not found")
    if (flags.do_train or flags.do_eval or flags.do_predict) and not flags.data_dir:
        errors.append("--data_dir is required with --do_train/--do_eval/--do_predict")
    elif flags.data_dir and not os.path.isdir(flags.data_dir):
        errors.append(f"--data_dir={flags.data_dir}: not a directory")
    if flags.max_seq_length < 4:
        errors.append(f"--max_seq_length={flags.max_seq_length} leaves no room for text (needs >= 4)")
    if is_race:
        if flags.max_qa_length <= 0 or flags.max_qa_length > flags.max_seq_length - 4:
            errors.append(f"--max_qa_length={flags.max_qa_length} must be in [1, max_seq_length - 4 = "
                          f"{flags.max_seq_length - 4}]")
        if flags.high_only and flags.middle_only:
            errors.append("--high_only and --middle_only exclude each other")
    if flags.do_train:
        if flags.train_steps <= 0:
            errors.append(f"--train_steps={flags.train_steps} must be positive")
        elif flags.warmup_steps >= flags.train_steps:
            errors.append(f"--warmup_steps={flags.warmup_steps} must be below --train_steps={flags.train_steps}")
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(flags, name) <= 0:
            errors.append(f"--{name}={getattr(flags, name)} must be positive")
    if flags.save_steps is not None and flags.save_steps <= 0:
        errors.append(f"--save_steps={flags.save_steps} must be positive")
    if flags.do_eval and flags.eval_split == "test":
        errors.append("--do_eval needs labels; --eval_split=test has none (use --do_predict for test predictions)")
    if flags.eval_split not in classifier_data.SPLITS:
        errors.append(f"--eval_split={flags.eval_split!r} must be one of {classifier_data.SPLITS}")
    if flags.init_checkpoint and not (os.path.exists(flags.init_checkpoint)
                                      or os.path.exists(flags.init_checkpoint + ".index")
                                      or "://" in flags.init_checkpoint):
        errors.append(f"--init_checkpoint={flags.init_checkpoint}: no such checkpoint (give the prefix, e.g. "
                      ".../xlnet_model.ckpt, a directory, or a native checkpoint)")
    if flags.strategy == "tpu" and not flags.tpu:
        errors.append("--strategy=tpu needs --tpu (name, grpc:// address, or 'local')")
    if errors:
        raise FlagError("; ".join(errors))


def _make_task(flags, tokenizer, model_config) -> TaskBundle:
    from xlnet_tf.models.heads import XLNetClassifier, XLNetMultipleChoice

    output_dir = flags.output_dir or os.path.join(flags.model_dir, "features")
    common = dict(summary_type=flags.summary_type, use_summ_proj=flags.use_summ_proj, dtype=flags.dtype)
    if flags.task_name.lower() == "race":
        levels = ("high",) if flags.high_only else ("middle",) if flags.middle_only else race_data.LEVELS
        return TaskBundle(
            "race", "multiple_choice", list(race_data.ANSWERS), ("accuracy",), "race",
            lambda split: race_data.prepare_features(flags.data_dir, split, tokenizer, flags.max_seq_length,
                                                     flags.max_qa_length, output_dir, levels,
                                                     flags.overwrite_data),
            race_data.feature_spec(flags.max_seq_length), race_data.dummy_features(flags.max_seq_length),
            lambda: XLNetMultipleChoice(model_config, **common))
    task = classifier_data.get_task(flags.task_name)
    labels = task.label_list()
    # Head names as the original: classification_{cls_scope or task}, regression_{task}.
    scope = task.name if task.regression else (flags.cls_scope or task.name)
    return TaskBundle(
        task.name, "regression" if task.regression else "classification", labels, task.metrics,
        task.submission or task.name,
        lambda split: classifier_data.prepare_features(task, flags.data_dir, split, tokenizer,
                                                       flags.max_seq_length, output_dir, flags.overwrite_data),
        classifier_data.feature_spec(flags.max_seq_length, task.regression),
        classifier_data.dummy_features(flags.max_seq_length, task.regression),
        lambda: XLNetClassifier(model_config, num_labels=len(labels or [1]), task_scope=scope,
                                regression=task.regression, **common))


def loss_fn_for(kind: str):
    import tensorflow as tf

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
    result["loss"] = task_metrics.cross_entropy(logits, labels.astype(np.int64))
    return result


def run_inference(strategy, model, bundle: TaskBundle, path: str, meta: dict, batch_size: int) -> dict:
    """Model outputs for the real examples of a cached split, in file order."""
    from xlnet_tf.training.finetuning import predict

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


def restore_model(model, flags, checkpoint_path: Optional[str] = None) -> str:
    """Fine-tuned weights for eval/predict/export: ``checkpoint_path``, else the latest in ``--model_dir``, else
    ``--init_checkpoint`` if it is a fine-tuned checkpoint (the original's TF1 layout with this task's head, or a
    native one)."""
    import tensorflow as tf

    from xlnet_tf.checkpoint import is_tf1_checkpoint, load_original_checkpoint, resolve_checkpoint
    from xlnet_tf.training.finetuning import restore_for_inference

    if checkpoint_path or tf.train.latest_checkpoint(flags.model_dir):
        return restore_for_inference(model, flags.model_dir, checkpoint_path)
    if not flags.init_checkpoint:
        raise FileNotFoundError(f"--model_dir={flags.model_dir} holds no fine-tuned checkpoint and there is no "
                                "--init_checkpoint: train first (--do_train) or point at a fine-tuned checkpoint")
    prefix = resolve_checkpoint(flags.init_checkpoint)
    if is_tf1_checkpoint(prefix):
        load_original_checkpoint(model, prefix)  # names every missing head variable if it is not fine-tuned
    else:
        try:
            tf.train.Checkpoint(model=model).read(prefix).expect_partial().assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(f"--init_checkpoint={prefix}: not a fine-tuned checkpoint of this task ({e})") from None
    return prefix


def _checkpoint_step(path: str) -> int:
    import tensorflow as tf
    try:
        return int(tf.train.load_checkpoint(path).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError):
        return 0


def run(flags) -> dict:
    """Runs the stages the flags ask for; returns {'train': ..., 'eval': ..., 'predict': [...], 'export': ...}."""
    validate(flags)
    import keras
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.finetune.export import export_saved_model
    from xlnet_tf.tokenization import XLNetTokenizer
    from xlnet_tf.training.distribute import create_strategy
    from xlnet_tf.training.finetuning import FinetuneSettings, FinetuneTask, train, write_eval_summaries

    tokenizer = XLNetTokenizer(flags.spiece_model_file, lower=flags.uncased)
    model_config = XLNetConfig.from_json(flags.model_config_path, dropout=flags.dropout, dropatt=flags.dropatt,
                                         clamp_len=flags.clamp_len)
    if model_config.n_token != tokenizer.vocab_size:
        raise FlagError(f"--model_config_path n_token={model_config.n_token} but --spiece_model_file="
                        f"{flags.spiece_model_file} has {tokenizer.vocab_size} pieces")
    strategy = create_strategy(flags.strategy, flags.tpu)
    replicas = strategy.num_replicas_in_sync
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(flags, name) % replicas:
            raise FlagError(f"--{name}={getattr(flags, name)} is not divisible by the {replicas} replicas of "
                            f"--strategy={flags.strategy} (batch sizes are global)")
    keras.utils.set_random_seed(flags.seed)
    bundle = _make_task(flags, tokenizer, model_config)
    result, model = {}, None

    if flags.do_train:
        path, meta = bundle.prepare("train")
        if meta["num_examples"] == 0:
            raise ValueError(f"{meta['source']}: no usable training examples ({meta['num_skipped']} skipped)")
        logging.info("train data: %s", _data_summary(meta))
        settings = FinetuneSettings(
            model_dir=flags.model_dir, train_steps=flags.train_steps,
            per_replica_batch_size=flags.train_batch_size // replicas, seq_len=flags.max_seq_length,
            iterations=flags.iterations, save_steps=flags.save_steps, max_save=flags.max_save,
            learning_rate=flags.learning_rate, warmup_steps=flags.warmup_steps, decay_method=flags.decay_method,
            min_lr_ratio=flags.min_lr_ratio, weight_decay=flags.weight_decay, adam_epsilon=flags.adam_epsilon,
            clip=flags.clip, lr_layer_decay_rate=flags.lr_layer_decay_rate, init_checkpoint=flags.init_checkpoint)
        per_replica = flags.train_batch_size // replicas

        def dataset_fn(ctx, start_step):
            return records.train_dataset(path, bundle.spec, ctx, per_replica, flags.shuffle_buffer,
                                         flags.seed + start_step)

        model, train_metrics = train(strategy, FinetuneTask(bundle.build_model, loss_fn_for(bundle.kind)),
                                     settings, dataset_fn)
        result["train"] = dict(train_metrics, data=_data_summary(meta))

    def inference_model(checkpoint_path=None):
        with strategy.scope():
            fresh = bundle.build_model()
        return fresh, restore_model(fresh, flags, checkpoint_path)

    if flags.do_eval or flags.do_predict or flags.export_dir:
        if model is None or flags.predict_ckpt:
            model, checkpoint = inference_model(flags.predict_ckpt)
        else:
            checkpoint = tf.train.latest_checkpoint(flags.model_dir)
        step = _checkpoint_step(checkpoint)

    if flags.do_eval or flags.do_predict:
        path, meta = bundle.prepare(flags.eval_split)
        batch = flags.eval_batch_size if flags.do_eval else flags.predict_batch_size
        outputs = run_inference(strategy, model, bundle, path, meta, batch)
        if flags.do_eval:
            evals = {}
            if flags.eval_all_ckpt:  # every checkpoint in model_dir, best by the task's main metric
                state = tf.train.get_checkpoint_state(flags.model_dir)
                for ckpt in (state.all_model_checkpoint_paths if state else []):
                    other, _ = inference_model(ckpt)
                    m = evaluate_outputs(bundle, run_inference(strategy, other, bundle, path, meta, batch))
                    evals[ckpt] = m
                    write_eval_summaries(flags.model_dir, _checkpoint_step(ckpt), m, f"eval_{flags.eval_split}")
            eval_metrics = evaluate_outputs(bundle, outputs)
            evals[checkpoint] = eval_metrics
            best = max(evals, key=lambda c: evals[c][bundle.main_metric])
            report = dict(task=bundle.name, split=flags.eval_split, step=step, checkpoint=checkpoint,
                          metrics=eval_metrics, data=_data_summary(meta))
            if flags.eval_all_ckpt:
                report.update(best_checkpoint=best, best_metrics=evals[best],
                              all_checkpoints={c: m for c, m in evals.items()})
            write_eval_summaries(flags.model_dir, step, eval_metrics, f"eval_{flags.eval_split}")
            write_json_atomic(os.path.join(flags.model_dir, f"eval_results.{flags.eval_split}.json"), report)
            logging.info("eval %s %s at step %d: %s | data %s", bundle.name, flags.eval_split, step,
                         {k: round(v, 4) for k, v in eval_metrics.items()}, _data_summary(meta))
            result["eval"] = report
        if flags.do_predict:
            predict_dir = flags.predict_dir or os.path.join(flags.model_dir, "predict")
            written = write_predictions(bundle, outputs, meta, predict_dir, flags.eval_split)
            write_json_atomic(os.path.join(predict_dir, f"{bundle.name}.{flags.eval_split}.summary.json"),
                                      dict(task=bundle.name, split=flags.eval_split, step=step,
                                           checkpoint=checkpoint, files=written, data=_data_summary(meta)))
            if meta.get("num_skipped"):
                logging.warning("%d %s rows were skipped and have no prediction (see %s)", meta["num_skipped"],
                                flags.eval_split, meta.get("skipped", [])[:3])
            logging.info("predictions: %s", written)
            result["predict"] = written

    if flags.export_dir:
        kind = bundle.kind
        result["export"] = export_saved_model(model, flags.export_dir, kind, bundle.labels, flags.spiece_model_file)
        logging.info("exported SavedModel to %s (step %d)", flags.export_dir, step)
    return result
