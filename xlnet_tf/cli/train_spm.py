"""Trains a SentencePiece model with XLNet's special symbols and ids on your corpus.

    python -m xlnet_tf.cli.train_spm --input='corpus/*.txt' --model_prefix=spm/spiece --vocab_size=32000

The ids match the released spiece.model: <unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7 <eop>=8.
"""

import glob

from absl import app, flags, logging

flags.DEFINE_string("input", None, "Comma-separated globs of text files, one sentence per line.")
flags.DEFINE_string("model_prefix", None, "Output prefix: writes <prefix>.model and <prefix>.vocab.")
flags.DEFINE_integer("vocab_size", 32000, "Vocabulary size (the released models use 32000).")
flags.DEFINE_float("character_coverage", 0.99995, "SentencePiece character coverage (the original's value).")
flags.DEFINE_integer("input_sentence_size", 10_000_000, "Sentences sampled for training.")
flags.DEFINE_bool("uncased", False, "Lower-case the text before training.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if not FLAGS.input or not FLAGS.model_prefix:
        raise app.UsageError("--input and --model_prefix are required")
    files = sorted(f for pattern in FLAGS.input.split(",") for f in glob.glob(pattern.strip()))
    if not files:
        raise app.UsageError(f"--input={FLAGS.input} matches no file")
    from xlnet_tf.tokenization import train_sentencepiece

    path = train_sentencepiece(files, FLAGS.model_prefix, FLAGS.vocab_size, FLAGS.character_coverage,
                               FLAGS.input_sentence_size, lower=FLAGS.uncased)
    logging.info("wrote %s (vocab %d, from %d files)", path, FLAGS.vocab_size, len(files))


if __name__ == "__main__":
    app.run(main)
