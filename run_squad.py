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
official metrics (SQuAD 1.1's or 2.0's, by the file: EM, F1, HasAns/NoAns, best no-answer threshold), logged,
written to ``eval_results.json`` and to TensorBoard (``model_dir/eval``). predictions.json holds the best non-null
answer of every question; ``--null_score_diff_threshold=<best_f1_thresh>`` makes it a SQuAD 2.0 submission ("" where
the null odds exceed it). ``--export_dir`` writes a TF Serving SavedModel.
"""

from xlnet_tf.cli import flags as cli
from xlnet_tf.tasks.squad import SquadSettings

if __name__ == "__main__":
    cli.run(SquadSettings, "xlnet_tf.runner:run")
