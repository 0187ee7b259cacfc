"""XLNet's text preprocessing and SentencePiece encoding, as the original ``prepro_utils.py``.

The special-symbol ids are those of the released ``spiece.model``; ``train_sentencepiece`` produces a model with
exactly these ids on a user's corpus (the released model cannot be downloaded in air-gapped setups, and other
languages need their own).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import unicodedata
from typing import Iterable

import sentencepiece as spm
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError, MissingInputError

SPIECE_UNDERLINE = "\u2581"

UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, PAD_ID, MASK_ID, EOD_ID, EOP_ID = range(9)
SPECIAL_SYMBOLS = {"<unk>": UNK_ID, "<s>": BOS_ID, "</s>": EOS_ID, "<cls>": CLS_ID, "<sep>": SEP_ID,
                   "<pad>": PAD_ID, "<mask>": MASK_ID, "<eod>": EOD_ID, "<eop>": EOP_ID}
# Segment ids of the fine-tuning input layouts (the original's SEG_ID_*), here with the special ids so that the
# Python encoders (finetuning.records, tasks.squad.data) and the in-graph preprocessor share one definition.
# Sequence tasks (classification, RACE): A <sep> B <sep> <cls>, left-padded; 3 (SEP) is unused.
SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD = 0, 1, 2, 4
# SQuAD: P <sep> Q <sep> <cls>, right-padded.
SQUAD_SEG_ID_P, SQUAD_SEG_ID_Q, SQUAD_SEG_ID_CLS, SQUAD_SEG_ID_PAD = 0, 1, 2, 3
PAIR_SPECIAL_TOKENS = 3  # the <sep> <sep> <cls> of a pair (RACE: article <sep> question-option <sep> <cls>)


def max_qa_length_limit(seq_length: int) -> int:
    """The most question+option tokens RACE's layout holds in ``seq_length`` (``--max_qa_length``, the
    preprocessor's ``max_qa_length``): all but the special tokens, the article then cut to none. One bound for the
    settings check and the preprocessor, which had drifted apart (``seq_length - 4`` and ``- 3``)."""
    return seq_length - PAIR_SPECIAL_TOKENS


def preprocess_text(text: str, lower: bool = False, remove_space: bool = True, keep_accents: bool = False) -> str:
    """Collapses whitespace, turns ``` and '' into ", strips accents (NFKD) and optionally lower-cases."""
    out = " ".join(text.strip().split()) if remove_space else text
    out = out.replace("``", '"').replace("''", '"')
    if not keep_accents and not out.isascii():  # ASCII is unchanged by NFKD: skip the slow path
        out = unicodedata.normalize("NFKD", out)
        out = "".join(c for c in out if not unicodedata.combining(c))
    if lower:
        out = out.lower()
    return out


def is_digit_comma_piece(piece: str) -> bool:
    """The original ``encode_pieces``' rule: this piece is split into its digits and the comma."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


class XLNetTokenizer:
    """SentencePiece tokenizer with XLNet's preprocessing and the original's digit-comma fix.

    ``encode_ids("In 2000, ...")`` splits a piece such as ``▁2000,`` into ``▁2000`` + ``,`` as the original
    ``encode_pieces`` does, so ids match the original preprocessing for the same ``spiece.model``.
    """

    def __init__(self, model_file: str, lower: bool = False):
        model_file = os.fspath(model_file)
        if not io_utils.exists(model_file):
            raise MissingInputError(f"{model_file}: SentencePiece model not found")
        self.model_file = model_file
        self.lower = lower
        self.sp = spm.SentencePieceProcessor()
        # Loaded from its bytes: SentencePiece reads local files only, the model may be a URI (gs://...).
        self.model_proto = io_utils.read_bytes(model_file)
        try:
            self.sp.LoadFromSerializedProto(self.model_proto)
        except (OSError, RuntimeError) as error:  # sentencepiece raises OSError for a file it cannot parse
            raise InputError(f"{model_file}: not a SentencePiece model ({error})") from None
        check_special_ids(self.sp, model_file)

    @property
    def vocab_size(self) -> int:
        return self.sp.GetPieceSize()

    @functools.cached_property
    def digit_comma_ids(self) -> frozenset:
        """The ids of the pieces ``encode_pieces`` splits (a digit then a comma, "▁2000,"): SentencePiece's own
        ids equal ``encode_ids``' unless one of these is among them."""
        return frozenset(i for i in range(self.vocab_size) if is_digit_comma_piece(self.sp.IdToPiece(i)))

    def preprocess(self, text: str) -> str:
        return preprocess_text(text, lower=self.lower)

    def encode_pieces(self, text: str, preprocess: bool = True, sample: bool = False) -> list[str]:
        if preprocess:
            text = self.preprocess(text)
        pieces = self.sp.SampleEncodeAsPieces(text, 64, 0.1) if sample else self.sp.EncodeAsPieces(text)
        out = []
        for piece in pieces:
            if is_digit_comma_piece(piece):
                digits = self.sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
                if piece[0] != SPIECE_UNDERLINE and digits[0][0] == SPIECE_UNDERLINE:
                    digits = digits[1:] if len(digits[0]) == 1 else [digits[0][1:]] + digits[1:]
                out.extend(digits)
                out.append(piece[-1])
            else:
                out.append(piece)
        return out

    def encode_ids(self, text: str, preprocess: bool = True, sample: bool = False) -> list[int]:
        return [self.sp.PieceToId(p) for p in self.encode_pieces(text, preprocess, sample)]

    def decode_ids(self, ids: Iterable[int]) -> str:
        return self.sp.DecodeIds([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self.sp.IdToPiece(int(i))

    def fingerprint(self) -> str:
        """SHA-256 of the model file: recorded in data manifests so mismatched vocabularies are caught."""
        return hashlib.sha256(self.model_proto).hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with io_utils.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_special_ids(sp: spm.SentencePieceProcessor, source: str = "spiece.model") -> None:
    """Raises InputError (a ValueError) unless the model maps XLNet's special symbols to the released ids."""
    wrong = [f"{sym}={sp.PieceToId(sym)} (want {want})" for sym, want in SPECIAL_SYMBOLS.items()
             if sp.PieceToId(sym) != want]
    if wrong:
        raise InputError(f"{source}: not an XLNet SentencePiece model, special ids differ: {', '.join(wrong)}. "
                         "Train one with `python -m xlnet_tf.cli.train_spm`.")


def train_sentencepiece(input_files: list[str], model_prefix: str, vocab_size: int = 32000,
                        character_coverage: float = 0.99995, input_sentence_size: int = 10_000_000,
                        model_type: str = "unigram", lower: bool = False, num_threads: int | None = None) -> str:
    """Trains a SentencePiece model with the original XLNet recipe and special ids; returns the .model path.

    Text goes through ``preprocess_text`` first (as the original data pipeline feeds it), one line per sentence.
    A line that is not UTF-8 is skipped and reported (``file:line``, as ``create_data`` does): decoded with
    replacement characters it trained the model on U+FFFD, and every accented letter of a Latin-1 corpus was
    ``<unk>``. Input with no UTF-8 line at all is an ``InputError``.
    The model and vocab are written under temporary names and renamed, so a killed run leaves no partial model.
    Inputs and ``model_prefix`` may be URIs (the trainer itself works in a local temporary directory).
    """
    for path in input_files:
        if not io_utils.exists(path):
            raise MissingInputError(f"{path}: input file not found")
    local_out = io_utils.local_path(model_prefix)
    out_dir = os.path.dirname(os.path.abspath(local_out)) if local_out is not None else None
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".spm-") as tmp:
        text_path = os.path.join(tmp, "input.txt")
        longest, bad, lines = 0, [], 0
        with open(text_path, "w", encoding="utf-8") as out:
            for path in input_files:
                with io_utils.open(path, "rb") as f:
                    for number, raw in enumerate(f, start=1):
                        lines += 1
                        try:
                            text = raw.decode("utf-8")
                        except UnicodeDecodeError as e:
                            bad.append(f"{path}:{number}: invalid UTF-8 at byte {e.start}")
                            if len(bad) <= 10:
                                logging.warning("skipping %s", bad[-1])
                            continue
                        # the line breaks text mode read before: \r\n and a lone \r end a line too
                        for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                            line = preprocess_text(line, lower=lower)
                            if line:
                                out.write(line + "\n")
                                longest = max(longest, len(line.encode("utf-8")))
        if bad:
            logging.warning("skipped %d unusable lines; first: %s", len(bad), bad[:5])
            if len(bad) == lines:
                raise InputError(f"no UTF-8 text to train on: all {lines} line(s) of {len(input_files)} file(s) "
                                 f"are not UTF-8, e.g. {bad[0]}")
        tmp_prefix = os.path.join(tmp, "spiece")
        spm.SentencePieceTrainer.Train(
            input=text_path, model_prefix=tmp_prefix, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, input_sentence_size=input_sentence_size,
            # SentencePiece skips, silently, lines over max_sentence_length (default 4192 bytes): a corpus of a
            # paragraph per line lost them all. It counts words, so a long line costs no more than its text.
            max_sentence_length=max(longest, 4192), shuffle_input_sentence=True, unk_id=UNK_ID, bos_id=BOS_ID,
            eos_id=EOS_ID, pad_id=-1,
            control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"],
            user_defined_symbols=["<eop>", ".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac"],
            num_threads=num_threads or os.cpu_count() or 1, minloglevel=2)
        for ext in (".model", ".vocab"):
            if local_out is not None:
                os.replace(tmp_prefix + ext, local_out + ext)
            else:  # one object each: it appears whole
                io_utils.copy(tmp_prefix + ext, model_prefix + ext)
    model_path = model_prefix + ".model"
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(io_utils.read_bytes(model_path))
    check_special_ids(sp, model_path)
    return model_path
