"""XLNet pretraining on TPU, GPUs or CPUs.

With no flags it runs the embedded default (``configs/pretrain_tiny.yaml``): the tiny model on the bundled
corpus, writing the TFRecords first if they are missing, in a few minutes on a laptop CPU.

    python run_pretrain.py                                          # embedded default
    python run_pretrain.py --config_file=configs/pretrain_base.yaml --data_dir=gs://.../data \\
        --model_dir=gs://.../xlnet_base --strategy=tpu --tpu=my-tpu

Flags keep the original ``train.py`` names. ``--config_file`` (YAML of flag values) is applied first; flags
given on the command line override it. A rerun with the same ``--model_dir`` resumes from its last
checkpoint (weights, optimizer, step and data position). See README.md for the memory and checkpoint rules.
"""

import os

from absl import app, flags, logging

from xlnet_tf.training.flag_config import apply_config_file

REPO = os.path.dirname(os.path.abspath(__file__))

# Run configuration.
flags.DEFINE_string("config_file", os.path.join(REPO, "configs", "pretrain_tiny.yaml"),
                    "YAML file of flag values; explicit flags override it. Empty: flags only.")
flags.DEFINE_enum("strategy", "one_device", ["one_device", "mirrored", "multi_worker", "tpu"],
                  "tf.distribute strategy.")
flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (with --strategy=tpu).")
flags.DEFINE_string("model_dir", None, "Checkpoints and TensorBoard summaries.")
flags.DEFINE_string("init_checkpoint", None, "Warm start: original TF1 release checkpoint or native checkpoint.")
flags.DEFINE_string("model_config_path", None, "xlnet_config.json of the model shape.")
# Data.
flags.DEFINE_string("data_dir", None, "Directory written by xlnet_tf.data.create_pretraining_data "
                    "(alias of the original's --record_info_dir).")
flags.DEFINE_string("record_info_dir", None, "Original name of --data_dir.")
flags.DEFINE_string("input_glob", None, "If --data_dir holds no data yet, write it from these text files first.")
flags.DEFINE_string("spiece_model_file", None, "SentencePiece model (used when writing data).")
flags.DEFINE_integer("num_core_per_host", None, "Replicas per host the data is laid out for (default: replicas).")
flags.DEFINE_bool("uncased", False, "Lower-case text (data writing; must match the data).")
flags.DEFINE_integer("seed", 0, "Seed of the factorization orders and of weight initialisation.")
# Shapes of the pretraining task.
flags.DEFINE_integer("train_batch_size", None, "Global batch size (all replicas).")
flags.DEFINE_integer("seq_len", None, "Sequence length.")
flags.DEFINE_integer("reuse_len", None, "Leading tokens of a sequence cached as memory for the next step.")
flags.DEFINE_integer("mem_len", 0, "Transformer-XL memory length (0 = none).")
flags.DEFINE_integer("perm_size", None, "Local permutation block size (default: reuse_len).")
flags.DEFINE_integer("num_predict", None, "Predicted tokens per sequence.")
flags.DEFINE_bool("bi_data", False, "Half of each batch read backwards (data must be written the same way).")
flags.DEFINE_integer("mask_alpha", 6, "Span masking context ratio (data writing).")
flags.DEFINE_integer("mask_beta", 1, "Span masking span ratio (data writing).")
flags.DEFINE_integer("clamp_len", -1, "Clamp relative distances (-1 = off).")
flags.DEFINE_bool("same_length", False, "Same attention length for every position ('uni' only).")
flags.DEFINE_float("dropout", 0.1, "Dropout rate.")
flags.DEFINE_float("dropatt", 0.1, "Attention dropout rate.")
# Optimisation.
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("warmup_steps", 0, "Linear warmup steps.")
flags.DEFINE_enum("decay_method", "poly", ["poly", "cos"], "Decay after warmup.")
flags.DEFINE_float("min_lr_ratio", 0.001, "Final learning rate / peak.")
flags.DEFINE_float("weight_decay", 0.0, "Decoupled weight decay (LayerNorm and biases excluded).")
flags.DEFINE_float("adam_epsilon", 1e-8, "Adam epsilon.")
flags.DEFINE_float("clip", 1.0, "Global gradient-norm clip (<= 0: off).")
flags.DEFINE_integer("train_steps", None, "Total optimizer steps.")
flags.DEFINE_integer("iterations", 1000, "Steps per host loop (one tf.function call; memory restarts per loop).")
flags.DEFINE_integer("save_steps", None, "Checkpoint every N steps (default: at the end).")
flags.DEFINE_integer("max_save", 5, "Checkpoints kept.")
flags.DEFINE_integer("grad_accum_steps", 1, "Micro-batches per optimizer step (train_batch_size is per micro-batch).")
flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_bfloat16", "mixed_float16"],
                  "Precision policy (mixed_bfloat16 on TPU and AMX CPUs, mixed_float16 with loss scaling on GPU).")
flags.DEFINE_bool("jit_compile", False, "Compile the training step with XLA.")
FLAGS = flags.FLAGS

REQUIRED = ("model_dir", "model_config_path", "train_batch_size", "seq_len", "reuse_len", "num_predict",
            "train_steps")


def validate_flags():
    """Every inconsistency is reported before any work starts."""
    missing = [f"--{name}" for name in REQUIRED if getattr(FLAGS, name) in (None, "")]
    if missing:
        raise app.UsageError(f"missing required flag(s): {', '.join(missing)}")
    errors = []
    if FLAGS.mem_len and FLAGS.reuse_len > FLAGS.seq_len:
        errors.append(f"--reuse_len={FLAGS.reuse_len} exceeds --seq_len={FLAGS.seq_len}")
    if FLAGS.train_batch_size <= 0 or FLAGS.train_steps <= 0:
        errors.append("--train_batch_size and --train_steps must be positive")
    if FLAGS.warmup_steps >= FLAGS.train_steps:
        errors.append(f"--warmup_steps={FLAGS.warmup_steps} must be below --train_steps={FLAGS.train_steps}")
    if FLAGS.save_steps is not None and FLAGS.save_steps <= 0:
        errors.append(f"--save_steps={FLAGS.save_steps} must be positive")
    if FLAGS.strategy == "tpu" and FLAGS.tpu is None:
        errors.append("--strategy=tpu needs --tpu (name, grpc:// address, or 'local')")
    if not os.path.exists(FLAGS.model_config_path):
        errors.append(f"--model_config_path={FLAGS.model_config_path}: file not found")
    if errors:
        raise app.UsageError("; ".join(errors))


def main(argv):
    del argv
    apply_config_file(FLAGS, FLAGS.config_file)
    FLAGS.data_dir = FLAGS.data_dir or FLAGS.record_info_dir
    FLAGS.perm_size = FLAGS.perm_size or FLAGS.reuse_len
    validate_flags()

    import keras  # TensorFlow is imported only after the flags are known to be usable

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.data.pretrain_dataset import pretrain_dataset
    from xlnet_tf.training.distribute import create_strategy, num_hosts
    from xlnet_tf.training.pretraining import PretrainSettings, run_pretraining
    from xlnet_tf.training.pretrain_data import ensure_pretraining_data

    strategy = create_strategy(FLAGS.strategy, FLAGS.tpu)
    replicas = strategy.num_replicas_in_sync
    if FLAGS.train_batch_size % replicas:
        raise app.UsageError(f"--train_batch_size={FLAGS.train_batch_size} is not divisible by the "
                             f"{replicas} replicas of --strategy={FLAGS.strategy}")
    per_replica = FLAGS.train_batch_size // replicas
    if FLAGS.bi_data and per_replica % 2:
        raise app.UsageError(f"--bi_data needs an even batch per replica, got {per_replica}")
    model_config = XLNetConfig.from_json(FLAGS.model_config_path, mem_len=FLAGS.mem_len, reuse_len=FLAGS.reuse_len,
                                         bi_data=FLAGS.bi_data, clamp_len=FLAGS.clamp_len,
                                         same_length=FLAGS.same_length, dropout=FLAGS.dropout,
                                         dropatt=FLAGS.dropatt)
    hosts = num_hosts(strategy)
    manifest = ensure_pretraining_data(
        FLAGS.data_dir, input_glob=FLAGS.input_glob, spiece_model_file=FLAGS.spiece_model_file,
        seq_len=FLAGS.seq_len, reuse_len=FLAGS.reuse_len, num_predict=FLAGS.num_predict, bi_data=FLAGS.bi_data,
        bsz_per_host=FLAGS.train_batch_size // hosts,
        num_core_per_host=FLAGS.num_core_per_host or replicas // hosts, mask_alpha=FLAGS.mask_alpha,
        mask_beta=FLAGS.mask_beta, uncased=FLAGS.uncased)
    if manifest["params"]["vocab_size"] != model_config.n_token:
        raise app.UsageError(f"--model_config_path n_token={model_config.n_token} but the data's SentencePiece "
                             f"vocabulary has {manifest['params']['vocab_size']} pieces")

    keras.utils.set_random_seed(FLAGS.seed)
    settings = PretrainSettings(
        model_dir=FLAGS.model_dir, train_steps=FLAGS.train_steps, per_replica_batch_size=per_replica,
        seq_len=FLAGS.seq_len, num_predict=FLAGS.num_predict, iterations=FLAGS.iterations,
        save_steps=FLAGS.save_steps, max_save=FLAGS.max_save, learning_rate=FLAGS.learning_rate,
        warmup_steps=FLAGS.warmup_steps, decay_method=FLAGS.decay_method, min_lr_ratio=FLAGS.min_lr_ratio,
        weight_decay=FLAGS.weight_decay, adam_epsilon=FLAGS.adam_epsilon, clip=FLAGS.clip,
        grad_accum_steps=FLAGS.grad_accum_steps, dtype=FLAGS.dtype, jit_compile=FLAGS.jit_compile,
        init_checkpoint=FLAGS.init_checkpoint)

    def dataset_fn(ctx, start_step):
        batches_per_step = (ctx.num_replicas_in_sync // ctx.num_input_pipelines) * FLAGS.grad_accum_steps
        return pretrain_dataset(FLAGS.data_dir, per_replica, FLAGS.seq_len, FLAGS.reuse_len, FLAGS.perm_size,
                                FLAGS.num_predict, FLAGS.bi_data, input_context=ctx, seed=FLAGS.seed,
                                skip_batches=start_step * batches_per_step)

    metrics = run_pretraining(strategy, model_config, settings, dataset_fn)
    logging.info("done: %s", {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()})


if __name__ == "__main__":
    app.run(main)
