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
from xlnet_tf.config import SUMMARY_TYPES
from xlnet_tf.finetuning.task_settings import ClassifierSettings

define = cli.define_finetune_flags(ClassifierSettings)
TASKS = [name for family in tasks.families() if family.settings_class is ClassifierSettings
         for name in family.task_names()]
define.string("task_name", f"{', '.join(TASKS)}, or a task of a --task_module.")
define.string("task_module", "Task families of your own: a module (dotted name, or the path of a .py file) that "
              "registers them (xlnet_tf.tasks.register).")
define.string("data_dir", "Task data in its official layout.")
define.string("eval_split", "dev or test.")
define.integer("eval_batch_size", "Global eval batch size.")
define.string("predict_input_glob", "--do_predict over these files instead of --eval_split's: comma-separated "
              "globs (local or gs://) of *.tsv (header row) or *.jsonl, streamed; one <name>.predictions.jsonl per "
              "file in --predict_dir, resumable (docs/batch.md).")
define.string("predict_text_fields", "With --predict_input_glob: text column(s)/key(s), 'a' or 'a,b' for pairs.")
define.string("predict_id_field", "With --predict_input_glob: column/key copied to each output row as 'id'.")
define.boolean("eval_all_ckpt", "Evaluate every checkpoint in model_dir and report the best.")
# Head.
define.enum("summary_type", SUMMARY_TYPES, "How a sequence is summarised.")
define.boolean("use_summ_proj", "tanh projection of the summary (as pretrained XLNet heads).")
define.string("cls_scope", "Classifier head scope (default: the task name).")
define.boolean("is_regression", "Regression task (implied by --task_name=sts-b).")
# RACE (the multiple_choice family).
define.integer("max_qa_length", "RACE: question+option tokens kept (from the end).")
define.boolean("high_only", "RACE: high-school passages only.")
define.boolean("middle_only", "RACE: middle-school passages only.")
# Original flags without effect here.
define.integer("num_hosts", "Original flag, unused (hosts come from the strategy).", default=1)
define.integer("num_core_per_host", "Original flag, unused (replicas come from --strategy).", default=None)
define.float("predict_threshold", "Original flag, unused.", default=0)


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
    cli.run(ClassifierSettings, "xlnet_tf.finetuning.runner:run", defaults_for=task_defaults)
