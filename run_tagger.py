"""Fine-tune XLNet for token classification (part-of-speech tags, named entities, chunks); evaluate, predict,
export.

    python run_tagger.py --config_file=configs/tagging_brown_tiny.yaml      # tiny demo on the bundled Brown slice
    python run_tagger.py --data_dir=conll2003 --tag_column=3 --do_train --do_eval --do_predict \\
        --init_checkpoint=xlnet_cased_L-12_H-768_A-12/xlnet_model.ckpt \\
        --model_config_path=xlnet_cased_L-12_H-768_A-12/xlnet_config.json \\
        --spiece_model_file=xlnet_cased_L-12_H-768_A-12/spiece.model --model_dir=runs/ner \\
        --max_seq_length=128 --train_batch_size=32 --learning_rate=3e-5 --train_steps=3000 --warmup_steps=300 \\
        --export_dir=runs/ner/export

Data: ``--data_dir`` with ``train``/``dev``/``test`` files (``.conll``, ``.jsonl``, ``.txt`` or ``.tsv``), or
``--train_file``/``--dev_file``/``--test_file``; the CoNLL layout (one word a line, the tag in ``--tag_column``,
blank lines between sentences, ``-DOCSTART-`` ignored) or JSONL (``{"tokens": [...], "tags": [...]}``). The tags
are those of the training file; BIO-family tags are detected (``--tag_scheme``) and scored by entity F1.
run_classifier.py's flags otherwise (the same runner: training, ``--do_eval``, ``--do_predict``, ``--export_dir``)
but ``--predict_input_glob``: large inputs are tagged through the export (``python -m xlnet_tf.cli.predict
--saved_model=<--export_dir> --input_glob=... --text_fields=text``); a tagging entry point of its own because its
data flags mean nothing to sentence tasks. docs/tagging.md.
"""

from xlnet_tf.cli import flags as cli
from xlnet_tf.tasks.tagging import TaggingSettings

if __name__ == "__main__":
    cli.run(TaggingSettings, "xlnet_tf.runner:run")
