"""Trains a SentencePiece model with XLNet's special symbols and ids on your corpus.

    python -m xlnet_tf.cli.train_spm --input='corpus/*.txt' --model_prefix=spm/spiece --vocab_size=32000

The ids match the released spiece.model: <unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7 <eop>=8.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.cli import flags as cli
from xlnet_tf.errors import InputError
from xlnet_tf.training.settings import Settings, output_dir_problem, setting


@dataclasses.dataclass
class TrainSpmSettings(Settings):
    input: Optional[str] = setting(None, "Comma-separated globs of text files, one sentence per line.")
    model_prefix: Optional[str] = setting(None, "Output prefix: writes <prefix>.model and <prefix>.vocab.")
    vocab_size: int = setting(32000, "Vocabulary size (the released models use 32000).")
    character_coverage: float = setting(0.99995, "SentencePiece character coverage (the original's value).")
    input_sentence_size: int = setting(10_000_000, "Sentences sampled for training.")
    uncased: bool = setting(False, "Lower-case the text before training.")

    @property
    def files(self) -> list:
        return io_utils.glob_files(self.input or "")

    def required(self) -> tuple:
        return ("input", "model_prefix")

    def errors(self) -> list:
        errors = super().errors()
        if self.input:
            errors += io_utils.unmatched_globs(self.input, "--input")
        if self.model_prefix:  # (a prefix: the directory it writes into is its parent)
            folder = io_utils.dirname(io_utils.abspath(self.model_prefix))
            problem = f"{folder} is a file, not a directory" if io_utils.isfile(folder) else output_dir_problem(folder)
            if problem:
                errors.append(f"--model_prefix={self.model_prefix}: {problem}")
        if self.vocab_size <= len("<unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop>".split()):
            errors.append(f"--vocab_size={self.vocab_size} leaves no room beyond XLNet's 9 special symbols")
        if not 0 < self.character_coverage <= 1:
            errors.append(f"--character_coverage={self.character_coverage} must be in (0, 1]")
        if self.input_sentence_size <= 0:
            errors.append(f"--input_sentence_size={self.input_sentence_size} must be positive")
        return errors


def main(s: TrainSpmSettings) -> None:
    """The command: trains the model on the files of ``--input``."""
    from xlnet_tf.tokenization import train_sentencepiece

    files = s.files
    try:
        path = train_sentencepiece(files, s.model_prefix, s.vocab_size, s.character_coverage,
                                   s.input_sentence_size, lower=s.uncased)
    except RuntimeError as e:
        # SentencePiece's trainer reports a vocabulary the text cannot fill (or one smaller than its characters),
        # and input without a line of text, as an INTERNAL RuntimeError with a C++ traceback: the flag to change
        # is ours.
        message = str(e)
        if "sentences_.empty()" in message:
            raise InputError(f"--input={s.input}: no text to train on ({len(files)} file(s), every one empty or "
                             "blank)") from None
        if "Vocabulary size" not in message:
            raise
        detail = " ".join(message[message.index("Vocabulary size"):].split())
        raise InputError(f"--vocab_size={s.vocab_size} does not fit the text of --input={s.input}: {detail}") from None
    logging.info("wrote %s (vocab %d, from %d files)", path, s.vocab_size, len(files))


if __name__ == "__main__":
    cli.run(TrainSpmSettings, main, tensorflow=False)
