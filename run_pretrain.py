"""XLNet pretraining on TPU, GPUs or CPUs.

    python run_pretrain.py --config_file=configs/pretrain_tiny.yaml   # demo: the tiny model on the bundled corpus
    python run_pretrain.py --config_file=configs/pretrain_tiny.yaml --objective=pmlm --mem_len=0 \\
        --model_dir=runs/tiny/pretrain_pmlm                               # UniLMv2's objective on the same data
    python run_pretrain.py --config_file=configs/pretrain_base.yaml --data_dir=gs://.../data \\
        --model_dir=gs://.../xlnet_base --strategy=tpu --tpu=my-tpu

Flags keep the original ``train.py`` names: one per field of ``PretrainSettings`` (``--helpfull`` lists them
with their help). ``--config_file`` (YAML of flag values) is applied first; flags given on the command line
override it; without one, the model shape, batch, steps and directories must be given as flags. Data is written
first (from ``--input_glob``) only when ``--input_glob`` is given and ``--data_dir`` holds none yet. A rerun with
the same ``--model_dir`` resumes from its last checkpoint (weights, optimizer, step and data position). See
docs/pretraining.md for the memory and checkpoint rules.
"""

from xlnet_tf.cli import flags as cli
from xlnet_tf.training.settings import PretrainSettings

if __name__ == "__main__":
    cli.run(PretrainSettings, "xlnet_tf.training.pretraining:pretrain")
