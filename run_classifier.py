"""Fine-tune XLNet on GLUE (every task, official TSV layouts), IMDB, Yelp and RACE; evaluate, predict, export.

    python run_classifier.py --config_file=configs/finetune_sentiment_tiny.yaml     # tiny demo, ~2 min on CPU
    python run_classifier.py --task_name=sts-b --data_dir=glue/STS-B --do_train --do_eval \\
        --init_checkpoint=xlnet_cased_L-24_H-1024_A-16/xlnet_model.ckpt \\
        --model_config_path=xlnet_cased_L-24_H-1024_A-16/xlnet_config.json \\
        --spiece_model_file=xlnet_cased_L-24_H-1024_A-16/spiece.model --model_dir=runs/sts-b \\
        --train_batch_size=32 --learning_rate=5e-5 --train_steps=1200 --warmup_steps=120 --save_steps=600
    python run_classifier.py --task_name=race --data_dir=RACE ...   # run_race.py's flags and defaults

Flags keep the original run_classifier.py / run_race.py names and defaults (with --task_name=race the
run_race.py defaults apply to flags not set explicitly). Batch sizes are global (all replicas).
``--config_file`` (YAML of flag values) is applied first; flags on the command line override it.
"""

from absl import app, flags, logging

from xlnet_tf.training.flag_config import apply_config_file

# Run configuration.
flags.DEFINE_string("config_file", None, "YAML file of flag values; explicit flags override it.")
flags.DEFINE_enum("strategy", "one_device", ["one_device", "mirrored", "multi_worker", "tpu"],
                  "tf.distribute strategy.")
flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (with --strategy=tpu).")
flags.DEFINE_bool("use_tpu", False, "Original flag: same as --strategy=tpu.")
flags.DEFINE_integer("num_hosts", 1, "Original flag, unused (hosts come from the strategy).")
flags.DEFINE_integer("num_core_per_host", None, "Original flag, unused (replicas come from --strategy).")
flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_bfloat16", "mixed_float16"], "Precision policy.")
flags.DEFINE_bool("use_bfloat16", False, "Original flag: same as --dtype=mixed_bfloat16.")
flags.DEFINE_integer("seed", 0, "Seed of weight initialisation, dropout and shuffling.")
# Model.
flags.DEFINE_string("model_config_path", None, "xlnet_config.json of the pretrained model.")
flags.DEFINE_float("dropout", 0.1, "Dropout rate.")
flags.DEFINE_float("dropatt", 0.1, "Attention dropout rate.")
flags.DEFINE_integer("clamp_len", -1, "Clamp relative distances (-1 = off).")
flags.DEFINE_enum("summary_type", "last", ["last", "first", "mean"], "How a sequence is summarised.")
flags.DEFINE_bool("use_summ_proj", True, "tanh projection of the summary (as pretrained XLNet heads).")
flags.DEFINE_string("cls_scope", None, "Classifier head scope (default: the task name).")
flags.DEFINE_bool("is_regression", False, "Regression task (implied by --task_name=sts-b).")
# I/O.
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli_matched, mnli_mismatched, qnli, "
                    "rte, wnli, imdb, yelp2, yelp5 or race.")
flags.DEFINE_string("data_dir", None, "Task data in its official layout.")
flags.DEFINE_string("output_dir", None, "Cached encoded features (default: model_dir/features).")
flags.DEFINE_bool("overwrite_data", False, "Re-encode the data even if cached features exist.")
flags.DEFINE_string("init_checkpoint", None, "Pretrained (or fine-tuned) checkpoint: the original TF1 "
                    "xlnet_model.ckpt or a native one.")
flags.DEFINE_string("spiece_model_file", None, "SentencePiece model of the pretrained model.")
flags.DEFINE_string("model_dir", None, "Fine-tuned checkpoints, TensorBoard summaries, eval results.")
flags.DEFINE_string("predict_dir", None, "Prediction files (default: model_dir/predict).")
flags.DEFINE_string("export_dir", None, "Write a SavedModel (serving signature) of the fine-tuned model here.")
flags.DEFINE_bool("uncased", False, "Lower-case text (uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length (tokens, incl. <sep>/<cls>).")
flags.DEFINE_integer("max_qa_length", 128, "RACE: question+option tokens kept (from the end).")
flags.DEFINE_bool("high_only", False, "RACE: high-school passages only.")
flags.DEFINE_bool("middle_only", False, "RACE: middle-school passages only.")
flags.DEFINE_integer("shuffle_buffer", 2048, "Training shuffle buffer.")
# Modes.
flags.DEFINE_bool("do_train", False, "Fine-tune.")
flags.DEFINE_bool("do_eval", False, "Evaluate on --eval_split (official metric of the task).")
flags.DEFINE_bool("do_predict", False, "Write predictions for --eval_split (GLUE submission format).")
flags.DEFINE_string("eval_split", "dev", "dev or test.")
flags.DEFINE_bool("eval_all_ckpt", False, "Evaluate every checkpoint in model_dir and report the best.")
flags.DEFINE_string("predict_ckpt", None, "Checkpoint for eval/predict/export (default: latest in model_dir).")
flags.DEFINE_float("predict_threshold", 0, "Original flag, unused.")
# Optimisation.
flags.DEFINE_integer("train_steps", 1000, "Optimizer steps.")
flags.DEFINE_integer("warmup_steps", 0, "Linear warmup steps.")
flags.DEFINE_float("learning_rate", 1e-5, "Peak learning rate.")
flags.DEFINE_float("lr_layer_decay_rate", 1.0, "Layer l of L trains at lr * rate^(L-1-l); embeddings at "
                   "lr * rate^L; heads at lr.")
flags.DEFINE_float("min_lr_ratio", 0.0, "Final learning rate / peak.")
flags.DEFINE_float("clip", 1.0, "Global gradient-norm clip (<= 0: off).")
flags.DEFINE_integer("max_save", 0, "Checkpoints kept (0 = all).")
flags.DEFINE_integer("save_steps", None, "Checkpoint every N steps (default: at the end).")
flags.DEFINE_integer("iterations", 1000, "Steps per host loop.")
flags.DEFINE_integer("train_batch_size", 8, "Global training batch size (RACE: questions, x4 sequences).")
flags.DEFINE_integer("eval_batch_size", 128, "Global eval batch size.")
flags.DEFINE_integer("predict_batch_size", 128, "Global predict batch size.")
flags.DEFINE_float("weight_decay", 0.0, "Decoupled weight decay (LayerNorm and biases excluded).")
flags.DEFINE_float("adam_epsilon", 1e-8, "Adam epsilon.")
flags.DEFINE_enum("decay_method", "poly", ["poly", "cos"], "Decay after warmup.")
FLAGS = flags.FLAGS

# run_race.py's defaults where they differ from run_classifier.py's.
RACE_DEFAULTS = dict(max_seq_length=512, train_steps=12000, learning_rate=2e-5, adam_epsilon=1e-6,
                     eval_batch_size=32)


def main(argv):
    del argv
    applied = apply_config_file(FLAGS, FLAGS.config_file)
    if (FLAGS.task_name or "").lower() == "race":
        for name, value in RACE_DEFAULTS.items():
            if not FLAGS[name].present and name not in applied:
                setattr(FLAGS, name, value)
    if FLAGS.use_tpu:
        FLAGS.strategy = "tpu"
    if FLAGS.use_bfloat16:
        FLAGS.dtype = "mixed_bfloat16"

    from xlnet_tf.finetune.runner import FlagError, run

    try:
        result = run(FLAGS)
    except FlagError as e:
        raise app.UsageError(str(e)) from None
    logging.info("done: %s", {k: v for k, v in result.items() if k != "train"})


if __name__ == "__main__":
    app.run(main)
