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

from absl import app, flags

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


def main(argv):
    del argv
    apply_config_file(FLAGS, FLAGS.config_file)
    from xlnet_tf.finetune import squad_runner  # light: TensorFlow loads only after the flags are validated

    squad_runner.run(FLAGS)


if __name__ == "__main__":
    app.run(main)
