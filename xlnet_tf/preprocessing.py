"""XLNet's text preprocessing as a Keras layer: raw strings in, model inputs out, inside the TensorFlow graph.

``XLNetPreprocessor`` does in TensorFlow ops (tensorflow-text's SentencePiece kernel, ICU normalisation,
``tf.strings`` regexes, ragged ops) what ``xlnet_tf.tokenization.XLNetTokenizer`` and the fine-tuning encoders
(``classifier_data.encode_example``, ``race_data.encode_example``) do in Python, with the same ids (tested on
every bundled text and a Unicode fuzz: ``tests/test_preprocessing.py``). Serving clients send raw strings; a
SavedModel holding the layer needs ``tensorflow`` and ``tensorflow_text`` only: the SentencePiece model proto
travels inside the graph as a constant.

What can differ from the Python tokenizer (``docs/serving.md``, "Python, raw strings"): invalid UTF-8 bytes
become U+FFFD (as Python's ``bytes.decode("utf-8", errors="replace")``, which the Python tokenizer needs before it
can take such text at all); where two segmentations score the same (the same pieces in another order: "ff" + "f"
or "f" + "ff" for "fff"), tensorflow-text's SentencePiece may pick the other one; NFKD comes from ICU, not from
Python's ``unicodedata``, which can differ on code points one Unicode version assigns and the other does not.
"""

from __future__ import annotations

import base64
import functools
import os
import sys
import unicodedata

import keras
import tensorflow as tf

from xlnet_tf.finetune.records import SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD
from xlnet_tf.tokenization import CLS_ID, SEP_ID, SPECIAL_SYMBOLS, SPIECE_UNDERLINE


def _char_class(predicate) -> str:
    """An RE2 character class (``[...]``) of every code point for which ``predicate(chr(cp))`` holds, as ranges.

    Built from this Python's ``unicodedata`` so that the graph makes exactly the decisions the Python tokenizer
    makes (``str.isspace``, ``unicodedata.combining``) rather than RE2's own Unicode tables."""
    ranges, start = [], None
    for cp in range(sys.maxunicode + 2):
        hit = cp <= sys.maxunicode and not 0xD800 <= cp <= 0xDFFF and predicate(chr(cp))
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            ranges.append(f"\\x{{{start:X}}}" + (f"-\\x{{{cp - 1:X}}}" if cp - 1 > start else ""))
            start = None
    return "[" + "".join(ranges) + "]"


@functools.lru_cache(maxsize=None)
def _classes() -> dict:
    return {"space": _char_class(str.isspace),
            "combining": _char_class(lambda c: unicodedata.combining(c) != 0)}


def _text_tensor(strings, name: str) -> tf.Tensor:
    """``strings`` (a str, list, numpy array or tensor) as a tf.string tensor; ValueError naming ``name``."""
    if isinstance(strings, tf.RaggedTensor):
        raise ValueError(f"{name}: expected a dense tensor of strings, got a RaggedTensor")
    try:
        tensor = tf.convert_to_tensor(strings)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: expected strings, got {type(strings).__name__} ({error})") from None
    if tensor.dtype != tf.string:
        raise ValueError(f"{name}: expected a tensor of strings, got dtype {tensor.dtype.name}")
    return tensor


def _batch_of_strings(strings, name: str) -> tf.Tensor:
    """A [B] string tensor from [B] (or [B, 1], as Keras sometimes feeds 1-D inputs; a scalar is a batch of 1)."""
    tensor = _text_tensor(strings, name)
    if tensor.shape.rank == 0:
        return tensor[None]
    if tensor.shape.rank == 2 and tensor.shape[1] == 1:
        return tensor[:, 0]
    if tensor.shape.rank != 1:
        raise ValueError(f"{name}: expected a batch of strings of shape [batch], got shape {tensor.shape}")
    return tensor


def _positions(ragged: tf.RaggedTensor) -> tf.RaggedTensor:
    """Each element's index within its row, same ragged shape as ``ragged`` ([N, (T)])."""
    return tf.ragged.range(ragged.row_lengths())


def _column(values: tf.Tensor) -> tf.RaggedTensor:
    """[N] -> ragged [N, (1)]."""
    return tf.RaggedTensor.from_tensor(values[:, None])


def _keep_first(ragged: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """Each row cut to its first ``lengths[i]`` elements."""
    return tf.ragged.boolean_mask(ragged, _positions(ragged) < tf.cast(lengths, tf.int64)[:, None])


def _keep_last(ragged: tf.RaggedTensor, count: int) -> tf.RaggedTensor:
    """Each row cut to its last ``count`` elements (Python's ``row[-count:]``)."""
    start = ragged.row_lengths() - count
    return tf.ragged.boolean_mask(ragged, _positions(ragged) >= start[:, None])


def pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor, budget: int):
    """The lengths ``classifier_data.truncate_pair`` leaves, in closed form: it pops from the longer of A and B
    (B on a tie) until ``len_a + len_b <= budget``, so the longer one is cut to the other's length first and then
    both alternately, ending with A = ceil(budget / 2), B = floor(budget / 2)."""
    fits = len_a + len_b <= budget
    kept_a = tf.minimum(len_a, tf.maximum((budget + 1) // 2, budget - len_b))
    return tf.where(fits, len_a, kept_a), tf.where(fits, len_b, budget - kept_a)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPreprocessor(keras.layers.Layer):
    """Raw strings -> XLNet's fine-tuning inputs, in TensorFlow ops (CPU), ids equal to ``XLNetTokenizer``'s.

    Args:
      spiece_model: the SentencePiece model proto (the bytes of ``spiece.model``; ``from_file`` reads a file). It
        is held inside the layer (a graph constant), so a SavedModel using the layer is self-contained.
      seq_length: S, the length of every output sequence (>= 3: ``<sep> <sep> <cls>`` of a pair).
      lower_case: lower-case after normalising (the uncased models; ``--uncased``).
      keep_accents: keep accents (skip NFKD + dropping combining marks).
      remove_space: collapse whitespace runs to one space and strip the ends (XLNet always does).
      max_qa_length: multiple choice: the question+option tokens kept (the last ones), as ``--max_qa_length``;
        default 128 (``run_classifier.py``'s) or ``seq_length - 3`` if that is smaller.

    Calls (strings are tf.string tensors, Python lists or numpy arrays; B = batch, C = choices):
      ``pre(sentence)`` / ``pre(sentence, sentence2)``: [B] (and [B]) -> dict of ``input_ids`` int32 [B, S],
        ``segment_ids`` int32 [B, S], ``padding_mask`` float32 [B, S] (1 = token, 0 = padding), the layout of
        ``classifier_data.encode_example``: ``A <sep> B <sep> <cls>`` (a single sentence: ``A <sep> <cls>``),
        left-padded with id 0; segments A=0 (with its sep), B=1 (with its sep), CLS=2, PAD=4; a pair longer than
        S is cut by ``truncate_pair``'s rule (tokens popped from the end of the longer of A and B).
      ``pre.multiple_choice(article, question, options)``: [B], [B], [B, C] -> the same three keys, each
        [B, C, S], as ``race_data.encode_example``: ``article <sep> question-with-option <sep> <cls>`` (a ``_`` in
        the question is replaced by the option, else the option is appended after a space), the question+option
        part cut to its last ``max_qa_length`` tokens and the article to what is left.
      ``pre.tokenize(strings)``: [N] -> tf.RaggedTensor int32 [N, (tokens)], ``XLNetTokenizer.encode_ids``.

    Invalid UTF-8 is not an error: each bad byte sequence becomes U+FFFD as Python's ``errors="replace"`` does.
    The string ops are placed on the CPU (``tf.device("/CPU:0")``), so the layer serves on a GPU host too.

    ``get_config`` holds the proto base64-encoded under ``spiece_model`` (about 1.1 MB for XLNet's 32k-piece model),
    so ``from_config(get_config())`` and ``.keras`` files need nothing else.

    Example::

        pre = XLNetPreprocessor.from_file("data/spiece.model", seq_length=128)
        features = pre(["A gripping film.", "Dull."])      # input_ids [2, 128] ...
        features = pre(["A man plays."], ["Someone plays music."])
        logits = classifier(features)["logits"]             # an xlnet_tf.models.heads.XLNetClassifier
    """

    def __init__(self, spiece_model: bytes, seq_length: int = 512, lower_case: bool = False,
                 keep_accents: bool = False, remove_space: bool = True, max_qa_length: int | None = None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if not isinstance(spiece_model, (bytes, bytearray)):
            raise ValueError(f"spiece_model: expected the SentencePiece model's bytes, got "
                             f"{type(spiece_model).__name__} (use XLNetPreprocessor.from_file(path) for a file)")
        if not isinstance(seq_length, int) or seq_length < 3:
            raise ValueError(f"seq_length={seq_length!r}: must be an int >= 3 (a pair needs <sep> <sep> <cls>)")
        if max_qa_length is None:
            max_qa_length = min(128, seq_length - 3)
        if not isinstance(max_qa_length, int) or not 1 <= max_qa_length <= seq_length - 3:
            raise ValueError(f"max_qa_length={max_qa_length!r}: must be in [1, seq_length - 3 = {seq_length - 3}]")
        import tensorflow_text as tf_text  # imported here: only the preprocessor needs it

        self.spiece_model = bytes(spiece_model)
        self.seq_length, self.max_qa_length = seq_length, max_qa_length
        self.lower_case, self.keep_accents, self.remove_space = lower_case, keep_accents, remove_space
        self._classes = _classes()
        with tf.device("/CPU:0"):
            try:  # the vocabulary, read once here; the graph needs only the tables built from it below
                vocab = tf_text.SentencepieceTokenizer(model=self.spiece_model)
                pieces = [p.decode("utf-8") for p in vocab.id_to_string(tf.range(vocab.vocab_size())).numpy()]
                # FastSentencepieceTokenizer, not SentencepieceTokenizer: the latter's SentencePiece breaks ties
                # between equal-score segmentations ("7"+"77" vs "77"+"7" in "5777") unlike the sentencepiece
                # package, the former agrees with it (tested).
                self._sentencepiece = tf_text.FastSentencepieceTokenizer(self.spiece_model)
            except (tf.errors.OpError, ValueError, RuntimeError) as error:
                raise ValueError(f"spiece_model: not a SentencePiece model proto ({error})") from None
            piece_ids = {p: i for i, p in reversed(list(enumerate(pieces)))}
            wrong = [f"{s}={piece_ids.get(s)} (want {w})" for s, w in SPECIAL_SYMBOLS.items() if piece_ids.get(s) != w]
            if wrong:
                raise ValueError(f"spiece_model: not an XLNet SentencePiece model, special ids differ: "
                                 f"{', '.join(wrong)}")
            self._digit_comma_tables(pieces, piece_ids)
        self.vocabulary_size = len(pieces)
        # Keras 3: take strings and keyword tensors as they are (no float conversion, no symbolic build).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.supports_jit = False  # string ops have no XLA kernels: a model holding the layer is not jit-compiled
        self.built = True

    @classmethod
    def from_file(cls, path: str, **kwargs) -> "XLNetPreprocessor":
        """The preprocessor of the SentencePiece model at ``path`` (read once; the layer keeps the bytes)."""
        path = os.fspath(path)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"{path}: SentencePiece model not found")
        with tf.io.gfile.GFile(path, "rb") as f:
            return cls(spiece_model=f.read(), **kwargs)

    # --- tokenization ------------------------------------------------------------------------------------------

    def clean(self, strings) -> tf.Tensor:
        """``tokenization.preprocess_text`` on a string tensor (any shape): U+FFFD for invalid UTF-8, whitespace
        collapsed and stripped, ``` `` ```/``''`` -> ``"``, NFKD without combining marks, lower-case."""
        text = _text_tensor(strings, "strings")
        with tf.device("/CPU:0"):
            text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
            if self.remove_space:  # " ".join(text.strip().split()): Python's whitespace, not RE2's \s
                text = tf.strings.regex_replace(text, self._classes["space"] + "+", " ")
                text = tf.strings.regex_replace(text, "^ | $", "")
            text = tf.strings.regex_replace(text, "``", '"')
            text = tf.strings.regex_replace(text, "''", '"')
            if not self.keep_accents:
                import tensorflow_text as tf_text
                text = tf_text.normalize_utf8(text, "NFKD")
                text = tf.strings.regex_replace(text, self._classes["combining"], "")
            if self.lower_case:  # in pieces between NULs: tf.strings.lower's ICU conversion stops at the first NUL
                parts = tf.strings.split(text, "\x00")  # (and reduce_join's separator too: joined by hand)
                nul = tf.where(_positions(parts).flat_values < tf.repeat(parts.row_lengths() - 1, parts.row_lengths()),
                               "\x00", "")
                text = tf.strings.reduce_join(parts.with_flat_values(
                    tf.strings.lower(parts.flat_values, encoding="utf-8") + nul), axis=-1)
            return text

    def tokenize(self, strings) -> tf.RaggedTensor:
        """[N] strings -> tf.RaggedTensor int32 [N, (tokens)]: ``XLNetTokenizer(lower=lower_case).encode_ids``."""
        text = self.clean(_batch_of_strings(strings, "strings"))
        with tf.device("/CPU:0"):
            ids = self._sentencepiece.tokenize(text).with_row_splits_dtype(tf.int64)
            return self._split_digit_commas(ids)

    def _digit_comma_tables(self, pieces: list, piece_ids: dict) -> None:
        """Per-id tables for ``_split_digit_commas``, computed with Python's string tests as ``encode_pieces``
        applies them. (An unknown piece, whose text the id no longer has, never ends in digit + comma nor starts
        with the known piece ``▁``, so deciding by id is deciding by text.)"""
        def splits(p):
            return len(p) > 1 and p[-1] == "," and p[-2].isdigit()

        self._splits = tf.constant([splits(p) for p in pieces])
        self._digits_text = tf.constant([p[:-1].replace(SPIECE_UNDERLINE, "") if splits(p) else "" for p in pieces])
        self._leading_underline = tf.constant([p[:1] == SPIECE_UNDERLINE for p in pieces])
        # The id of the piece without its leading ``▁`` (unknown if that is no piece), -1: drop it (``▁`` alone).
        self._without_underline = tf.constant([-1 if p == SPIECE_UNDERLINE else piece_ids.get(p[1:], 0)
                                               for p in pieces], tf.int32)
        self._comma_id = piece_ids[","]

    def _split_digit_commas(self, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        """The original ``encode_pieces`` fix: a piece ending in digit + comma (``▁2000,``) is replaced by the
        encoding of its text without the comma and any ``▁`` (with the leading ``▁`` dropped again if the piece
        had none) and ``,``. [N, (T)] -> [N, (T')] ids."""
        flat = ids.flat_values
        split = tf.gather(self._splits, flat)
        chosen = tf.boolean_mask(flat, split)  # [F]
        sub = self._sentencepiece.tokenize(tf.gather(self._digits_text, chosen)).with_row_splits_dtype(tf.int64)
        had_no_underline = tf.repeat(~tf.gather(self._leading_underline, chosen), sub.row_lengths())
        strip = ((_positions(sub).flat_values == 0) & had_no_underline
                 & tf.gather(self._leading_underline, sub.flat_values))
        values = tf.where(strip, tf.gather(self._without_underline, sub.flat_values), sub.flat_values)
        sub = tf.ragged.boolean_mask(sub.with_flat_values(values), sub.with_flat_values(values >= 0))
        expanded = tf.concat([sub, _column(tf.fill(tf.shape(chosen), self._comma_id))], axis=1)  # [F, (k')]
        # Every piece becomes a row: itself, or (for the F split ones) its expansion; then the rows are merged.
        rows = tf.concat([_column(flat), expanded], axis=0)  # [P + F, (m)]
        count = tf.size(flat, out_type=tf.int64)
        index = tf.where(split, count + tf.cumsum(tf.cast(split, tf.int64)) - 1, tf.range(count))
        return ids.with_flat_values(tf.gather(rows, index)).merge_dims(1, 2)

    # --- fine-tuning layouts -----------------------------------------------------------------------------------

    def _pack(self, tokens_a: tf.RaggedTensor, tokens_b=None) -> dict:
        """``truncate_pair`` + ``records.pack_sequence`` on ragged ids [N, (T)] -> dense features [N, S]."""
        S = self.seq_length
        len_a = tf.cast(tokens_a.row_lengths(), tf.int32)
        if tokens_b is None:
            len_a, len_b = tf.minimum(len_a, S - 2), None
        else:
            len_a, len_b = pair_lengths(len_a, tf.cast(tokens_b.row_lengths(), tf.int32), S - 3)
        n = tf.shape(len_a)[0]
        sep, cls = tf.fill([n], SEP_ID), tf.fill([n], CLS_ID)
        parts = [_keep_first(tokens_a, len_a), _column(sep)]
        if tokens_b is not None:
            parts += [_keep_first(tokens_b, len_b), _column(sep)]
        parts.append(_column(cls))
        tokens = tf.concat(parts, axis=1)
        pad = S - tf.cast(tokens.row_lengths(), tf.int32)
        padding = tf.RaggedTensor.from_row_lengths(tf.zeros([tf.reduce_sum(pad)], tf.int32), tf.cast(pad, tf.int64))
        input_ids = tf.concat([padding, tokens], axis=1).to_tensor(shape=[None, S])
        # Segments from the lengths: [PAD]*pad, [A]*(len_a + 1), [B]*(len_b + 1), CLS.
        j = tf.range(S)[None, :]
        end_a = pad[:, None] + len_a[:, None] + 1
        end_b = end_a + (len_b[:, None] + 1 if len_b is not None else 0)
        segment_ids = tf.where(j < pad[:, None], SEG_ID_PAD,
                               tf.where(j < end_a, SEG_ID_A, tf.where(j < end_b, SEG_ID_B, SEG_ID_CLS)))
        padding_mask = tf.cast(j >= pad[:, None], tf.float32)
        return {"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}

    def call(self, sentence, sentence2=None):
        """[B] strings (and [B] second sentences) -> ``input_ids``, ``segment_ids``, ``padding_mask`` [B, S]."""
        first = _batch_of_strings(sentence, "sentence")
        second = None if sentence2 is None else _batch_of_strings(sentence2, "sentence2")
        with tf.device("/CPU:0"):
            return self._pack(self.tokenize(first), None if second is None else self.tokenize(second))

    def multiple_choice(self, article, question, options) -> dict:
        """RACE's layout: article [B], question [B], options [B, C] -> the three features, each [B, C, S]."""
        article = _batch_of_strings(article, "article")
        question = _batch_of_strings(question, "question")
        options = _text_tensor(options, "options")
        if options.shape.rank != 2:
            raise ValueError(f"options: expected shape [batch, choices], got {options.shape}")
        with tf.device("/CPU:0"):
            batch, choices = tf.shape(options)[0], tf.shape(options)[1]
            option = tf.reshape(options, [-1])  # [B * C]
            qa = _qa_text(tf.repeat(question, choices), option)
            tokens_qa = _keep_last(self.tokenize(qa), self.max_qa_length)
            context = tf.gather(self.tokenize(article), tf.repeat(tf.range(batch), choices))
            budget = self.seq_length - 3 - tokens_qa.row_lengths()
            features = self._pack(_keep_first(context, budget), tokens_qa)
            return {k: tf.reshape(v, [batch, choices, self.seq_length]) for k, v in features.items()}

    def get_config(self):
        config = super().get_config()
        config.update(spiece_model=base64.b64encode(self.spiece_model).decode("ascii"), seq_length=self.seq_length,
                      lower_case=self.lower_case, keep_accents=self.keep_accents, remove_space=self.remove_space,
                      max_qa_length=self.max_qa_length)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("spiece_model"), str):
            config["spiece_model"] = base64.b64decode(config["spiece_model"])
        return cls(**config)


def _qa_text(question: tf.Tensor, option: tf.Tensor) -> tf.Tensor:
    """``race_data.qa_text`` on [N] strings: every ``_`` in the question replaced by the option, or the option
    appended after a space if there is none."""
    parts = tf.strings.split(question, "_")  # [N, (k)]: "a_b_" -> "a", "b", ""
    is_last = _positions(parts) == parts.row_lengths()[:, None] - 1
    filler = tf.where(is_last.flat_values, "", tf.repeat(option, parts.row_lengths()))
    joined = tf.strings.reduce_join(parts.with_flat_values(parts.flat_values + filler), axis=1)
    return tf.where(tf.strings.regex_full_match(question, "(?s).*_.*"), joined, question + " " + option)
