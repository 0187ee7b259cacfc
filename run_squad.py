"""Fine-tunes and evaluates XLNet on SQuAD v1.1 / v2.0 (the original ``run_squad.py``, TF2 / Keras 3).

    # demo: the tiny model on the bundled fixtures (under 2 minutes on a laptop CPU)
    python run_squad.py --config_file=configs/squad_tiny.yaml

    # XLNet-Large on SQuAD 2.0 from the released checkpoint (published recipe: 8000 steps, batch 48, lr 3e-5)
    python run_squad.py --init_checkpoint=xlnet_cased_L-24_H-1024_A-16/xlnet_model.ckpt \\
        --model_config_path=xlnet_cased_L-24_H-1024_A-16/xlnet_config.json \\
        --spiece_model_file=xlnet_cased_L-24_H-1024_A-16/spiece.model \\
        --train_file=train-v2.0.json --predict_file=dev-v2.0.json --model_dir=runs/squad_large \\
        --do_train --do_eval --warmup_steps=1000 --strategy=mirrored

Flags keep the original names and defaults (note ``--do_train`` defaults to True, as in the original).
``--do_prepro --num_proc=N --proc_id=i`` writes training shard i of N (the slow alignment step) and exits;
``--do_train`` trains on the shards in ``--output_dir`` (writing one if there is none); ``--do_predict`` writes
predictions.json, nbest_predictions.json and null_odds.json to ``--predict_dir`` from the latest checkpoint in
``--model_dir`` (metrics too when the file has answers, as the original); ``--do_eval`` also requires the
official SQuAD v2 metrics (EM, F1, HasAns/NoAns, best no-answer threshold), logged, written to
``eval_results.json`` and to TensorBoard (``model_dir/eval``). ``--export_dir`` writes a TF Serving SavedModel.
"""

import os

from absl import app, flags, logging

from xlnet_tf.training.flag_config import apply_config_file

# Run configuration (new).
flags.DEFINE_string("config_file", None, "YAML file of flag values; explicit flags override it.")
flags.DEFINE_enum("strategy", "one_device", ["one_device", "mirrored", "multi_worker", "tpu"],
                  "tf.distribute strategy.")
flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_bfloat16", "mixed_float16"],
                  "Precision policy (mixed_float16 trains with dynamic loss scaling).")
flags.DEFINE_bool("do_eval", False, "Predict on --predict_file and report the official SQuAD v2 metrics.")
flags.DEFINE_string("export_dir", None, "Write a TF Serving SavedModel of the fine-tuned model here.")
flags.DEFINE_string("predict_ckpt", None, "Checkpoint to predict/evaluate/export with (default: latest in "
                    "--model_dir).")
flags.DEFINE_integer("seed", 0, "Seed of the head initialisation, dropout and data order.")
# Preprocessing.
flags.DEFINE_bool("do_prepro", False, "Perform preprocessing only.")
flags.DEFINE_integer("num_proc", 1, "Number of preprocessing processes.")
flags.DEFINE_integer("proc_id", 0, "Process id for preprocessing.")
# Model.
flags.DEFINE_string("model_config_path", None, "Model config path (the release's xlnet_config.json).")
flags.DEFINE_float("dropout", 0.1, "Dropout rate.")
flags.DEFINE_float("dropatt", 0.1, "Attention dropout rate.")
flags.DEFINE_integer("clamp_len", -1, "Clamp length.")
flags.DEFINE_string("summary_type", "last", "Unused by SQuAD (kept for command-line compatibility).")
flags.DEFINE_bool("use_bfloat16", False, "Same as --dtype=mixed_bfloat16.")
flags.DEFINE_enum("init", "normal", ["normal", "uniform"], "Initialization method (only 'normal' is supported).")
flags.DEFINE_float("init_std", 0.02, "Initialization std when init is normal.")
flags.DEFINE_float("init_range", 0.1, "Unused ('uniform' init is not supported).")
# I/O paths.
flags.DEFINE_bool("overwrite_data", False, "If False, will use cached data if available.")
flags.DEFINE_string("init_checkpoint", None, "Pretrained model: original TF1 xlnet_model.ckpt or a native "
                    "checkpoint (training only; prediction restores from --model_dir).")
flags.DEFINE_bool("init_global_vars", False, "Unused (kept for command-line compatibility).")
flags.DEFINE_string("output_dir", "", "Cached features (default: <model_dir>/data).")
flags.DEFINE_string("predict_dir", "", "Prediction files (default: <model_dir>/predict).")
flags.DEFINE_string("spiece_model_file", "", "Sentence Piece model path.")
flags.DEFINE_string("model_dir", "", "Fine-tuned checkpoints and TensorBoard summaries.")
flags.DEFINE_string("train_file", "", "Path of train file (SQuAD JSON).")
flags.DEFINE_string("predict_file", "", "Path of prediction file (SQuAD JSON).")
# Data preprocessing config.
flags.DEFINE_integer("max_seq_length", 512, "Max sequence length.")
flags.DEFINE_integer("max_query_length", 64, "Max query length.")
flags.DEFINE_integer("doc_stride", 128, "Doc stride.")
flags.DEFINE_integer("max_answer_length", 64, "Max answer length.")
flags.DEFINE_bool("uncased", False, "Use uncased data.")
# Machines.
flags.DEFINE_bool("use_tpu", False, "Same as --strategy=tpu.")
flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (with --strategy=tpu).")
flags.DEFINE_integer("iterations", 1000, "Steps per host loop (one tf.function call).")
# Training.
flags.DEFINE_bool("do_train", True, "Whether to do training.")
flags.DEFINE_integer("train_batch_size", 48, "Global batch size for training.")
flags.DEFINE_integer("train_steps", 8000, "Number of training steps.")
flags.DEFINE_integer("warmup_steps", 0, "Number of warmup steps.")
flags.DEFINE_integer("save_steps", None, "Save a checkpoint every save_steps (default: at the end).")
flags.DEFINE_integer("max_save", 5, "Max number of checkpoints to keep; 0 keeps all.")
flags.DEFINE_integer("shuffle_buffer", 2048, "Buffer size used for shuffle.")
# Optimization.
flags.DEFINE_float("learning_rate", 3e-5, "Initial learning rate.")
flags.DEFINE_float("min_lr_ratio", 0.0, "Min lr ratio for decay.")
flags.DEFINE_float("clip", 1.0, "Gradient clipping.")
flags.DEFINE_float("weight_decay", 0.0, "Weight decay rate.")
flags.DEFINE_float("adam_epsilon", 1e-6, "Adam epsilon.")
flags.DEFINE_enum("decay_method", "poly", ["poly", "cos"], "poly or cos.")
flags.DEFINE_float("lr_layer_decay_rate", 0.75, "Top layer: lr[L] = learning_rate; lower layers: "
                   "lr[l-1] = lr[l] * lr_layer_decay_rate (true per-layer learning rates).")
# Eval / prediction.
flags.DEFINE_bool("do_predict", False, "Whether to do predict.")
flags.DEFINE_integer("predict_batch_size", 32, "Batch size for prediction.")
flags.DEFINE_integer("n_best_size", 5, "n best size for predictions.")
flags.DEFINE_integer("start_n_top", 5, "Beam size for span start.")
flags.DEFINE_integer("end_n_top", 5, "Beam size for span end.")
flags.DEFINE_string("target_eval_key", "best_f1", "Metric logged as the headline result.")
FLAGS = flags.FLAGS


def validate_flags():
    """Every inconsistency is reported before any work starts."""
    f = FLAGS
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


def main(argv):
    del argv
    apply_config_file(FLAGS, FLAGS.config_file)
    if FLAGS.use_bfloat16:
        FLAGS.dtype = "mixed_bfloat16"
    if FLAGS.use_tpu:
        FLAGS.strategy = "tpu"
    validate_flags()

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
            shards = _training_shards(squad_data, output_dir, feature_settings)
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


def _training_shards(squad_data, output_dir, s):
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


if __name__ == "__main__":
    app.run(main)
