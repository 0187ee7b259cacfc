"""run_squad.py's work: preprocessing, training, evaluation, prediction and export.

``run(settings)`` takes ``SquadSettings`` (built from run_squad.py's flags by ``xlnet_tf.cli``, or directly).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf
from absl import logging

from xlnet_tf.tasks import squad_data, squad_postprocess
from xlnet_tf.finetuning.task_settings import SquadSettings
from xlnet_tf.finetuning.serving import ServingInfo, export_serving, write_run_record
from xlnet_tf.tasks.squad_answers import squad_task
from xlnet_tf.io_utils import write_json_atomic
from xlnet_tf.tokenization import XLNetTokenizer
from xlnet_tf.finetuning.trainer import predict, train, write_eval_summaries
from xlnet_tf.training.settings import SettingsError
from xlnet_tf.training.setup import checkpoint_step, load_model_config, restore_for_inference, start_run


def run(settings: SquadSettings) -> None:
    """Runs what the settings ask for: preprocessing, training, evaluation, prediction, export (in that order)."""
    s = settings.validate()
    output_dir = s.features_dir
    predict_dir = s.predict_dir or os.path.join(s.model_dir, "predict")
    feature_settings = squad_data.FeatureSettings(s.spiece_model_file, s.max_seq_length, s.max_query_length,
                                                  s.doc_stride, s.uncased)
    if s.do_prepro:
        squad_data.prepare_train_shard(s.train_file, output_dir, feature_settings, s.num_proc, s.proc_id,
                                       overwrite=s.overwrite_data, seed=s.seed)
        return  # as the original: preprocessing only

    vocab = XLNetTokenizer(s.spiece_model_file).vocab_size if s.spiece_model_file else None
    config = load_model_config(s, vocab, "--spiece_model_file", initializer_range=s.init_std)
    strategy = start_run(s)
    task = squad_task(config, s.start_n_top, s.end_n_top, dtype=s.dtype)
    model = None

    if s.do_train:
        write_run_record(s.model_dir, "squad", s)  # what `python -m xlnet_tf.cli.export` rebuilds the model from
        shards = _training_shards(s, output_dir, feature_settings)
        per_replica = s.train_batch_size // strategy.num_replicas_in_sync

        def dataset_fn(ctx, start_step):
            return squad_data.train_dataset(shards, per_replica, s.max_seq_length, input_context=ctx,
                                            shuffle_buffer=s.shuffle_buffer, seed=s.seed + start_step)

        model, metrics = train(strategy, task, s, dataset_fn)
        logging.info("training done: %s", {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()})

    checkpoint_path = s.predict_ckpt or tf.train.latest_checkpoint(s.model_dir)
    if (s.do_eval or s.do_predict or s.export_dir) and (model is None or s.predict_ckpt):
        with strategy.scope():
            model = task.build_model()
        checkpoint_path = restore_for_inference(model, s.model_dir, s.predict_ckpt)
        logging.info("restored %s", checkpoint_path)

    if s.do_eval or s.do_predict:
        squad, features, skipped = squad_data.prepare_eval_features(s.predict_file, output_dir, feature_settings,
                                                                    overwrite=s.overwrite_data)
        if s.do_eval and not squad.has_answers:
            raise SettingsError(f"--do_eval: {s.predict_file} has no gold answers (use --do_predict)")
        results = predict(strategy, model, squad_data.eval_dataset(features, s.predict_batch_size),
                          keep=("unique_ids",))
        predictions, nbest, null_odds = squad_postprocess.compute_predictions(
            squad.examples, features, results, s.n_best_size, s.max_answer_length, s.start_n_top, s.end_n_top)
        # Examples dropped when reading (empty question, duplicate id) still get an entry: "" / no answer.
        for qas_id in [i for reason, ids in skipped.items() for i in ids if reason != "duplicate id"]:
            predictions.setdefault(qas_id, "")
            nbest.setdefault(qas_id, [])
            null_odds.setdefault(qas_id, squad_postprocess.SKIPPED_NULL_ODDS)
        paths = squad_postprocess.write_prediction_files(predict_dir, predictions, nbest, null_odds)
        logging.info("wrote %s", ", ".join(paths.values()))
        if squad.has_answers:
            metrics = squad_postprocess.evaluate(squad.data, predictions, null_odds)
            metrics["skipped_examples"] = sum(len(ids) for ids in skipped.values())
            step = checkpoint_step(checkpoint_path)
            write_json_atomic(os.path.join(predict_dir, squad_postprocess.EVAL_RESULTS),
                              dict(metrics, step=step, checkpoint=checkpoint_path,
                                   skipped={k: len(v) for k, v in skipped.items()}), indent=4)
            write_eval_summaries(s.model_dir, step, metrics)
            logging.info("=" * 80)
            logging.info("Result | step %d | %s", step, " | ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
            logging.info("%s = %.4f", s.target_eval_key, metrics.get(s.target_eval_key, float("nan")))
            logging.info("=" * 80)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))

    if s.export_dir:
        export_serving(model, s.export_dir, serving_info(s, checkpoint_step(checkpoint_path)), s.spiece_model_file)


def serving_info(s: SquadSettings, step: int) -> ServingInfo:
    """What a SQuAD export records: the windowing and the post-processing settings of ``--do_predict``."""
    return ServingInfo(kind="squad", task="squad", max_seq_length=s.max_seq_length, lower_case=s.uncased,
                       global_step=step, squad=dict(max_query_length=s.max_query_length, doc_stride=s.doc_stride,
                                                    max_answer_length=s.max_answer_length,
                                                    start_n_top=s.start_n_top, end_n_top=s.end_n_top,
                                                    n_best_size=s.n_best_size))


def restored_model(s: SquadSettings):
    """The SQuAD model of ``s`` restored for inference: ``(model, checkpoint, config)``."""
    vocab = XLNetTokenizer(s.spiece_model_file).vocab_size if s.spiece_model_file else None
    config = load_model_config(s, vocab, "--spiece_model_file", initializer_range=s.init_std)
    model = squad_task(config, s.start_n_top, s.end_n_top, dtype=s.dtype).build_model()
    return model, restore_for_inference(model, s.model_dir, s.predict_ckpt), config


def _training_shards(s: SquadSettings, output_dir: str, feature_settings) -> list:
    """Training shards for the current settings: written now if absent (one shard) or --overwrite_data; cached
    shards written for another train file or other settings are an error, not silently reused."""
    shards = squad_data.train_shards(output_dir, feature_settings)
    if s.overwrite_data:
        for path in shards:
            for p in (path, path + ".json"):
                if os.path.exists(p):
                    os.remove(p)
        shards = []
    if not shards:
        squad_data.prepare_train_shard(s.train_file, output_dir, feature_settings, seed=s.seed)
        return squad_data.train_shards(output_dir, feature_settings)
    fingerprint = feature_settings.fingerprint(s.train_file)
    for path in shards:
        stale = squad_data.stale_fields(path, fingerprint)
        if stale:
            raise SettingsError(f"{path}: cached features differ from the current run in {', '.join(stale)}; "
                                "rerun --do_prepro or pass --overwrite_data")
    return shards
