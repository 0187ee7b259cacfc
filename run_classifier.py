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
``--task_module`` (a dotted module name or a .py file) loads task families of your own (``xlnet_tf.tasks``);
their tasks are then ``--task_name`` values like the built-in ones.
``--config_file`` (YAML of flag values) is applied first; flags on the command line override it.
"""

from xlnet_tf import tasks
from xlnet_tf.cli import flags as cli
from xlnet_tf.tasks.task_settings import ClassifierSettings


def task_defaults(flags) -> dict:
    """The flag defaults of --task_name's family (e.g. run_race.py's for race); none for an unknown task, which
    the settings check reports."""
    try:
        tasks.load_module(flags.task_module)
        family = tasks.for_task(flags.task_name)
    except ValueError:
        return {}
    return family.flag_defaults(family.canonical_task(flags.task_name))


if __name__ == "__main__":
    cli.run(ClassifierSettings, "xlnet_tf.runner:run", defaults_for=task_defaults)
