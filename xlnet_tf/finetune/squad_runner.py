"""run_squad.py's work: flag validation, preprocessing, training, evaluation, prediction and export.

``run(flags)`` takes the parsed absl flags of run_squad.py (any object with those attributes).
"""

import os

from absl import app, logging


def validate_flags(f):
    """Every inconsistency is reported before any work starts (TensorFlow is not imported yet)."""
    errors = []
    if not (f.do_prepro or f.do_train or f.do_eval or f.do_predict or f.export_dir):
        errors.append("nothing to do: give --do_prepro, --do_train, --do_eval, --do_predict or --export_dir")

    def need(name, exists=True):
        value = getattr(f, name)
        if not value:
            errors.append(f"--{name} is required here")
        elif exists and not os.path.exists(value):
            errors.append(f"--{name}={value}: file not found")

    if f.do_prepro or f.do_train or f.do_eval or f.do_predict:
        need("spiece_model_file")
    if f.do_prepro or f.do_train:
        need("train_file")
    if f.do_eval or f.do_predict:
        need("predict_file")
    if not f.do_prepro:
        need("model_config_path")
        need("model_dir", exists=False)
    elif not (f.output_dir or f.model_dir):
        errors.append("--do_prepro needs --output_dir (or --model_dir)")
    if f.max_seq_length - f.max_query_length - 3 < 1:
        errors.append(f"--max_seq_length={f.max_seq_length} leaves no room for the paragraph after "
                      f"--max_query_length={f.max_query_length} and 3 special tokens")
    if f.doc_stride <= 0 or f.max_query_length <= 0 or f.max_answer_length <= 0:
        errors.append("--doc_stride, --max_query_length and --max_answer_length must be positive")
    if not 0 <= f.proc_id < f.num_proc:
        errors.append(f"--proc_id={f.proc_id} must be in [0, --num_proc={f.num_proc})")
    if f.do_train:
        if f.train_batch_size <= 0 or f.train_steps <= 0:
            errors.append("--train_batch_size and --train_steps must be positive")
        if f.warmup_steps >= f.train_steps > 0:
            errors.append(f"--warmup_steps={f.warmup_steps} must be below --train_steps={f.train_steps}")
        if f.save_steps is not None and f.save_steps <= 0:
            errors.append(f"--save_steps={f.save_steps} must be positive")
        if f.init_checkpoint and not (os.path.exists(f.init_checkpoint) or os.path.exists(f.init_checkpoint + ".index")
                                      or "://" in f.init_checkpoint):
            errors.append(f"--init_checkpoint={f.init_checkpoint}: no checkpoint there")
    if min(f.start_n_top, f.end_n_top, f.n_best_size, f.predict_batch_size) <= 0:
        errors.append("--start_n_top, --end_n_top, --n_best_size and --predict_batch_size must be positive")
    if max(f.start_n_top, f.end_n_top) > f.max_seq_length:
        errors.append("--start_n_top/--end_n_top cannot exceed --max_seq_length")
    if f.init != "normal":
        errors.append("--init=uniform is not supported (use --init=normal with --init_std)")
    if f.strategy == "tpu" and f.tpu is None:
        errors.append("--strategy=tpu needs --tpu (name, grpc:// address, or 'local')")
    if errors:
        raise app.UsageError("; ".join(errors))


def _checkpoint_step(path: str) -> int:
    import tensorflow as tf

    try:
        return int(tf.train.load_checkpoint(path).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    except Exception:  # noqa: BLE001 - any checkpoint without a step: report at step 0
        return 0


def run(FLAGS):
    """Runs what the flags ask for: preprocessing, training, evaluation, prediction, export (in that order)."""
    if FLAGS.use_bfloat16:
        FLAGS.dtype = "mixed_bfloat16"
    if FLAGS.use_tpu:
        FLAGS.strategy = "tpu"
    validate_flags(FLAGS)

    import json

    import keras  # TensorFlow is imported only after the flags are known to be usable
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.finetune import squad_data, squad_postprocess
    from xlnet_tf.finetune.squad_model import export_saved_model, squad_task
    from xlnet_tf.tokenization import XLNetTokenizer
    from xlnet_tf.training.distribute import create_strategy
    from xlnet_tf.training.finetuning import (FinetuneSettings, predict, restore_for_inference, train,
                                              write_eval_summaries)

    output_dir = FLAGS.output_dir or os.path.join(FLAGS.model_dir, "data")
    predict_dir = FLAGS.predict_dir or os.path.join(FLAGS.model_dir, "predict")
    feature_settings = squad_data.FeatureSettings(FLAGS.spiece_model_file, FLAGS.max_seq_length,
                                                  FLAGS.max_query_length, FLAGS.doc_stride, FLAGS.uncased)
    try:
        if FLAGS.do_prepro:
            squad_data.prepare_train_shard(FLAGS.train_file, output_dir, feature_settings, FLAGS.num_proc,
                                           FLAGS.proc_id, overwrite=FLAGS.overwrite_data, seed=FLAGS.seed)
            return  # as the original: preprocessing only

        config = XLNetConfig.from_json(FLAGS.model_config_path, dropout=FLAGS.dropout, dropatt=FLAGS.dropatt,
                                       clamp_len=FLAGS.clamp_len, initializer_range=FLAGS.init_std)
        if FLAGS.spiece_model_file:
            vocab = XLNetTokenizer(FLAGS.spiece_model_file).vocab_size
            if vocab != config.n_token:
                raise app.UsageError(f"--model_config_path n_token={config.n_token} but --spiece_model_file has "
                                     f"{vocab} pieces")
        keras.utils.set_random_seed(FLAGS.seed)
        strategy = create_strategy(FLAGS.strategy, FLAGS.tpu)
        task = squad_task(config, FLAGS.start_n_top, FLAGS.end_n_top, dtype=FLAGS.dtype)
        model = None

        if FLAGS.do_train:
            replicas = strategy.num_replicas_in_sync
            if FLAGS.train_batch_size % replicas:
                raise app.UsageError(f"--train_batch_size={FLAGS.train_batch_size} is not divisible by the "
                                     f"{replicas} replicas of --strategy={FLAGS.strategy}")
            shards = _training_shards(FLAGS, squad_data, output_dir, feature_settings)
            per_replica = FLAGS.train_batch_size // replicas

            def dataset_fn(ctx, start_step):
                return squad_data.train_dataset(shards, per_replica, FLAGS.max_seq_length, input_context=ctx,
                                                shuffle_buffer=FLAGS.shuffle_buffer, seed=FLAGS.seed + start_step)

            settings = FinetuneSettings(
                model_dir=FLAGS.model_dir, train_steps=FLAGS.train_steps, per_replica_batch_size=per_replica,
                seq_len=FLAGS.max_seq_length, iterations=FLAGS.iterations, save_steps=FLAGS.save_steps,
                max_save=FLAGS.max_save, learning_rate=FLAGS.learning_rate, warmup_steps=FLAGS.warmup_steps,
                decay_method=FLAGS.decay_method, min_lr_ratio=FLAGS.min_lr_ratio, weight_decay=FLAGS.weight_decay,
                adam_epsilon=FLAGS.adam_epsilon, clip=FLAGS.clip, lr_layer_decay_rate=FLAGS.lr_layer_decay_rate,
                init_checkpoint=FLAGS.init_checkpoint)
            model, metrics = train(strategy, task, settings, dataset_fn)
            logging.info("training done: %s", {k: round(v, 4) if isinstance(v, float) else v
                                                for k, v in metrics.items()})

        checkpoint_path = FLAGS.predict_ckpt or tf.train.latest_checkpoint(FLAGS.model_dir)
        if (FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir) and (model is None or FLAGS.predict_ckpt):
            with strategy.scope():
                model = task.build_model()
            checkpoint_path = restore_for_inference(model, FLAGS.model_dir, FLAGS.predict_ckpt)
            logging.info("restored %s", checkpoint_path)

        if FLAGS.do_eval or FLAGS.do_predict:
            squad, features, skipped = squad_data.prepare_eval_features(
                FLAGS.predict_file, output_dir, feature_settings, overwrite=FLAGS.overwrite_data)
            if FLAGS.do_eval and not squad.has_answers:
                raise app.UsageError(f"--do_eval: {FLAGS.predict_file} has no gold answers (use --do_predict)")
            results = predict(strategy, model, squad_data.eval_dataset(features, FLAGS.predict_batch_size),
                              keep=("unique_ids",))
            predictions, nbest, null_odds = squad_postprocess.compute_predictions(
                squad.examples, features, results, FLAGS.n_best_size, FLAGS.max_answer_length, FLAGS.start_n_top,
                FLAGS.end_n_top)
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
                step = _checkpoint_step(checkpoint_path) if checkpoint_path else 0
                squad_data.atomic_write_json(os.path.join(predict_dir, squad_postprocess.EVAL_RESULTS),
                                             dict(metrics, step=step, checkpoint=checkpoint_path,
                                                  skipped={k: len(v) for k, v in skipped.items()}))
                write_eval_summaries(FLAGS.model_dir, step, metrics)
                logging.info("=" * 80)
                logging.info("Result | step %d | %s", step, " | ".join(
                    f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
                logging.info("%s = %.4f", FLAGS.target_eval_key, metrics.get(FLAGS.target_eval_key, float("nan")))
                logging.info("=" * 80)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))

        if FLAGS.export_dir:
            logging.info("exported the SavedModel to %s", export_saved_model(model, FLAGS.export_dir))
    except (squad_data.SquadFileError, FileNotFoundError) as e:  # bad input file / no fine-tuned checkpoint
        raise app.UsageError(str(e)) from None


def _training_shards(FLAGS, squad_data, output_dir, s):
    """Training shards for the current settings: written now if absent (one shard) or --overwrite_data; cached
    shards written for another train file or other settings are an error, not silently reused."""
    shards = squad_data.train_shards(output_dir, s)
    if FLAGS.overwrite_data:
        for path in shards:
            for p in (path, path + ".json"):
                if os.path.exists(p):
                    os.remove(p)
        shards = []
    if not shards:
        squad_data.prepare_train_shard(FLAGS.train_file, output_dir, s, seed=FLAGS.seed)
        return squad_data.train_shards(output_dir, s)
    fingerprint = s.fingerprint(FLAGS.train_file)
    import json

    for path in shards:
        with open(path + ".json", encoding="utf-8") as f:
            stored = json.load(f)
        stale = [k for k, v in fingerprint.items() if stored.get(k) != v]
        if stale:
            raise app.UsageError(f"{path}: cached features differ from the current run in {', '.join(stale)}; "
                                 "rerun --do_prepro or pass --overwrite_data")
    return shards
