"""XLNet pretraining on TPU, GPUs or CPUs.

    python run_pretrain.py --config_file=configs/pretrain_tiny.yaml   # demo: the tiny model on the bundled corpus
    python run_pretrain.py --config_file=configs/pretrain_tiny.yaml --objective=pmlm --mem_len=0 \\
        --model_dir=runs/tiny/pretrain_pmlm                               # UniLMv2's objective on the same data
    python run_pretrain.py --config_file=configs/pretrain_base.yaml --data_dir=gs://.../data \\
        --model_dir=gs://.../xlnet_base --strategy=tpu --tpu=my-tpu

Flags keep the original ``train.py`` names. ``--config_file`` (YAML of flag values) is applied first; flags
given on the command line override it; without one, the model shape, batch, steps and directories must be given
as flags. Data is written first (from ``--input_glob``) only when ``--input_glob`` is given and ``--data_dir``
holds none yet. A rerun with the same ``--model_dir`` resumes from its last checkpoint (weights, optimizer, step
and data position). See docs/pretraining.md for the memory and checkpoint rules.
"""

from xlnet_tf.cli import flags as cli
from xlnet_tf.objectives import OBJECTIVES
from xlnet_tf.training.settings import PretrainSettings

define = cli.define_common_flags(PretrainSettings)
define.enum("objective", list(OBJECTIVES), "Pretraining objective: plm (XLNet's permutation LM), pmlm (UniLMv2's "
            "pseudo-masked LM) or mpnet (MPNet); every one trains the same network (see docs/objectives.md).")
# Data.
define.string("data_dir", "Directory written by xlnet_tf.data.writer (alias of the original's "
              "--record_info_dir).")
define.string("record_info_dir", "Original name of --data_dir.", default=None)
define.string("input_glob", "If --data_dir holds no data yet, write it from these text files first.")
define.integer("num_core_per_host", "Replicas per host the data is laid out for (default: replicas).")
define.integer("mask_alpha", "Span masking context ratio (data writing).")
define.integer("mask_beta", "Span masking span ratio (data writing).")
# Shapes of the pretraining task.
define.integer("seq_len", "Sequence length.")
define.integer("reuse_len", "Leading tokens of a sequence cached as memory for the next step.")
define.integer("mem_len", "Transformer-XL memory length (0 = none).")
define.integer("perm_size", "Local permutation block size (default: reuse_len).")
define.integer("num_predict", "Predicted tokens per sequence.")
define.boolean("bi_data", "Half of each batch read backwards (data must be written the same way).")
define.boolean("same_length", "Same attention length for every position ('uni' only).")
# Training step.
define.integer("grad_accum_steps", "Micro-batches per optimizer step (train_batch_size is per micro-batch).")
define.boolean("jit_compile", "Compile the training step with XLA.")

if __name__ == "__main__":
    cli.run(PretrainSettings, "xlnet_tf.training.pretraining:pretrain")
