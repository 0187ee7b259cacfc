"""XLNet's text preprocessing as a Keras layer: raw strings in, model inputs out, inside the TensorFlow graph.

``XLNetPreprocessor`` does in TensorFlow ops (tensorflow-text's SentencePiece kernel, ICU normalisation,
``tf.strings`` regexes, ragged ops) what ``xlnet_tf.tokenization.XLNetTokenizer`` and the fine-tuning encoders
(``classifier_data.encode_example``, ``race_data.encode_example``) do in Python, with the same ids (tested on
every bundled text and a Unicode fuzz: ``tests/test_preprocessing.py``). Serving clients send raw strings; a
SavedModel holding the layer needs ``tensorflow`` and ``tensorflow_text`` only: the SentencePiece model proto
travels inside the graph as a constant.

What can differ from the Python tokenizer (``docs/exactness.md``, "In-graph tokenization"): invalid UTF-8 bytes
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

from xlnet_tf.tokenization import CLS_ID, PAIR_SPECIAL_TOKENS, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID, \
    SPECIAL_SYMBOLS, SPIECE_UNDERLINE, is_digit_comma_piece, max_qa_length_limit
from xlnet_tf.errors import InputError, MissingInputError


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
def char_classes() -> dict:
    """RE2 classes of Python's ``str.isspace`` (``space``) and combining marks (``combining``): what the
    graphs of the task families test characters with, deciding as the Python tokenizer decides."""
    return {"space": _char_class(str.isspace),
            "combining": _char_class(lambda c: unicodedata.combining(c) != 0)}


def text_tensor(strings, name: str) -> tf.Tensor:
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


def batch_of_strings(strings, name: str) -> tf.Tensor:
    """A [B] string tensor from [B] (or [B, 1], as Keras sometimes feeds 1-D inputs; a scalar is a batch of 1)."""
    tensor = text_tensor(strings, name)
    if tensor.shape.rank == 0:
        return tensor[None]
    if tensor.shape.rank == 2 and tensor.shape[1] == 1:
        return tensor[:, 0]
    if tensor.shape.rank != 1:
        raise ValueError(f"{name}: expected a batch of strings of shape [batch], got shape {tensor.shape}")
    return tensor


def check_same_rows(first_name: str, first: tf.Tensor, **others):
    """A ValueError naming the one of ``others`` (name = [B] tensor) that has not as many rows as ``first``, instead
    of a gather's error. Checked where the shapes are known (eager calls, fixed batches); a traced graph
    adds no assertion (see the ragged note below) and fails in the gather."""
    for name, tensor in others.items():
        rows, theirs = first.shape[0], tensor.shape[0]
        if rows is not None and theirs is not None and rows != theirs:
            raise ValueError(f"{name}: {theirs} rows for the {rows} of {first_name}")


# Ragged arithmetic here works on the flat values with per-element row numbers: a ragged op that broadcasts a
# dense [N, 1] against a ragged [N, (T)] (or masks, concatenates or gathers ragged rows) adds assertions on the row
# partitions, each an If with two branch functions. They cannot fail for partitions built here, yet they made up
# half the time to trace the SQuAD graph and to start every tf.data iterator over it (fit, evaluate, predict).
def positions(ragged: tf.RaggedTensor) -> tf.RaggedTensor:
    """Each element's index within its row, same ragged shape as ``ragged`` ([N, (T)])."""
    return tf.ragged.range(ragged.row_lengths())


def row_values(ragged: tf.RaggedTensor, per_row: tf.Tensor) -> tf.Tensor:
    """``per_row`` [N] repeated for each element of ``ragged`` [N, (T)] -> [sum T], aligned with its flat values."""
    return tf.gather(per_row, ragged.value_rowids())


def _keep(ragged: tf.RaggedTensor, keep: tf.Tensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """The flat values of ``ragged`` where ``keep`` holds, as rows of ``lengths`` (the kept count of each row)."""
    return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(ragged.flat_values, keep), lengths, validate=False)


def keep_first(ragged: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """Each row cut to its first ``lengths[i]`` elements."""
    ragged = ragged.with_row_splits_dtype(tf.int64)
    lengths = tf.clip_by_value(tf.cast(lengths, tf.int64), 0, ragged.row_lengths())
    return _keep(ragged, positions(ragged).flat_values < row_values(ragged, lengths), lengths)


def keep_last(ragged: tf.RaggedTensor, count: int) -> tf.RaggedTensor:
    """Each row cut to its last ``count`` elements (Python's ``row[-count:]``)."""
    ragged = ragged.with_row_splits_dtype(tf.int64)
    start = ragged.row_lengths() - count
    return _keep(ragged, positions(ragged).flat_values >= row_values(ragged, start),
                 tf.minimum(ragged.row_lengths(), count))


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
      max_query_length, doc_stride: SQuAD: the question tokens kept (the first ones) and the stride of the
        paragraph windows, as ``run_squad.py``'s flags; default 64 (or ``seq_length - 4`` if smaller) and 128.

    Calls (strings are tf.string tensors, Python lists or numpy arrays; B = batch, C = choices):
      ``pre(sentence)`` / ``pre(sentence, sentence2)``: [B] (and [B]) -> dict of ``input_ids`` int32 [B, S],
        ``segment_ids`` int32 [B, S], ``padding_mask`` float32 [B, S] (1 = token, 0 = padding), the layout of
        ``classifier_data.encode_example``: ``A <sep> B <sep> <cls>`` (a single sentence: ``A <sep> <cls>``),
        left-padded with id 0; segments A=0 (with its sep), B=1 (with its sep), CLS=2, PAD=4; a pair longer than
        S is cut by ``truncate_pair``'s rule (tokens popped from the end of the longer of A and B).
      ``pre.tokenize(strings)``: [N] -> tf.RaggedTensor int32 [N, (tokens)], ``XLNetTokenizer.encode_ids``.
      ``pre.encode_with_offsets(strings)``: [N] -> the tokens and the characters each comes from.

    The task families' layouts take the preprocessor as their first argument and live with their family:
    ``multiple_choice_graph.encode_choices(pre, article, question, options)`` (``xlnet_tf.tasks.multiple_choice``:
    RACE's, ``race_data.encode_example``), ``squad_graph.squad_windows(pre, question, context)``
    (``xlnet_tf.tasks.squad``: the paragraph windows of ``squad_data``), ``tagging_graph.encode_words``. They build
    on ``tokenize``, ``encode_with_offsets``, ``pack`` and this module's ragged helpers.

    Invalid UTF-8 is not an error: each bad byte sequence becomes U+FFFD as Python's ``errors="replace"`` does.
    The string ops are placed on the CPU (``tf.device("/CPU:0")``), so the layer serves on a GPU host too.

    ``get_config`` holds the proto base64-encoded under ``spiece_model`` (about 1.1 MB for XLNet's 32k-piece model),
    so ``from_config(get_config())`` and ``.keras`` files need nothing else.

    Example::

        pre = XLNetPreprocessor.from_file("data/spiece.model", seq_length=128)
        features = pre(["A gripping film.", "Dull."])      # input_ids [2, 128] ...
        features = pre(["A man plays."], ["Someone plays music."])
        logits = classifier(features)["logits"]             # an xlnet_tf.XLNetTextClassifier's network
    """

    def __init__(self, spiece_model: bytes, seq_length: int = 512, lower_case: bool = False,
                 keep_accents: bool = False, remove_space: bool = True, max_qa_length: int | None = None,
                 max_query_length: int | None = None, doc_stride: int = 128, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if not isinstance(spiece_model, (bytes, bytearray)):
            raise InputError(f"spiece_model: expected the SentencePiece model's bytes, got "
                             f"{type(spiece_model).__name__} (use XLNetPreprocessor.from_file(path) for a file)")
        if not isinstance(seq_length, int) or seq_length < 3:
            raise ValueError(f"seq_length={seq_length!r}: must be an int >= 3 (a pair needs <sep> <sep> <cls>)")
        if max_qa_length is None:
            max_qa_length = min(128, max_qa_length_limit(seq_length))
        if not isinstance(max_qa_length, int) or not 1 <= max_qa_length <= max_qa_length_limit(seq_length):
            raise ValueError(f"max_qa_length={max_qa_length!r}: must be in [1, seq_length - {PAIR_SPECIAL_TOKENS} = "
                             f"{max_qa_length_limit(seq_length)}]")
        if max_query_length is None:
            max_query_length = min(64, seq_length - 4)
        if not isinstance(max_query_length, int) or not 1 <= max_query_length <= seq_length - 4:
            raise ValueError(f"max_query_length={max_query_length!r}: must be in [1, seq_length - 4 = "
                             f"{seq_length - 4}] (SQuAD windows need room for a paragraph token)")
        if not isinstance(doc_stride, int) or doc_stride < 1:
            raise ValueError(f"doc_stride={doc_stride!r}: must be a positive int")
        self.max_query_length, self.doc_stride = max_query_length, doc_stride
        import tensorflow_text as tf_text  # imported here: only the preprocessor needs it

        self.spiece_model = bytes(spiece_model)
        self.seq_length, self.max_qa_length = seq_length, max_qa_length
        self.lower_case, self.keep_accents, self.remove_space = lower_case, keep_accents, remove_space
        self._classes = char_classes()
        with tf.device("/CPU:0"):
            try:  # the vocabulary, read once here; the graph needs only the tables built from it below
                vocab = tf_text.SentencepieceTokenizer(model=self.spiece_model)
                pieces = [p.decode("utf-8") for p in vocab.id_to_string(tf.range(vocab.vocab_size())).numpy()]
                # FastSentencepieceTokenizer, not SentencepieceTokenizer: the latter's SentencePiece breaks ties
                # between equal-score segmentations ("7"+"77" vs "77"+"7" in "5777") unlike the sentencepiece
                # package, the former agrees with it (tested).
                self._sentencepiece = tf_text.FastSentencepieceTokenizer(self.spiece_model)
                # SQuAD needs each token's place in the text, which only this one reports.
                self._sentencepiece_offsets = vocab
            except (tf.errors.OpError, ValueError, RuntimeError) as error:
                raise InputError(f"spiece_model: not a SentencePiece model proto ({error})") from None
            piece_ids = {p: i for i, p in reversed(list(enumerate(pieces)))}
            wrong = [f"{s}={piece_ids.get(s)} (want {w})" for s, w in SPECIAL_SYMBOLS.items() if piece_ids.get(s) != w]
            if wrong:
                raise InputError(f"spiece_model: not an XLNet SentencePiece model, special ids differ: "
                                 f"{', '.join(wrong)}")
            self._digit_comma_tables(pieces, piece_ids)
        self.vocabulary_size = len(pieces)
        # Keras 3: take strings and keyword tensors as they are (no float conversion, no symbolic build).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        # supports_jit stays True although string ops have no XLA kernels: the layer runs in tf.data pipelines and
        # serving graphs, never in a Keras step, and a task model holding it (xlnet_tf.XLNetText*) must be able
        # to compile its network with XLA (Keras refuses jit_compile for a model with any layer that says no).
        self.built = True

    @classmethod
    def from_file(cls, path: str, **kwargs) -> "XLNetPreprocessor":
        """The preprocessor of the SentencePiece model at ``path`` (read once; the layer keeps the bytes)."""
        path = os.fspath(path)
        if not tf.io.gfile.exists(path):
            raise MissingInputError(f"{path}: SentencePiece model not found")
        with tf.io.gfile.GFile(path, "rb") as f:
            return cls(spiece_model=f.read(), **kwargs)

    # --- tokenization ------------------------------------------------------------------------------------------

    def clean(self, strings, quotes_last: bool = False) -> tf.Tensor:
        """``tokenization.preprocess_text`` on a string tensor (any shape): U+FFFD for invalid UTF-8, whitespace
        collapsed and stripped, ``` `` ```/``''`` -> ``"``, NFKD without combining marks, lower-case.
        ``quotes_last``: the quotes are replaced after the rest, as SQuAD's features do it (``squad_data``)."""
        text = text_tensor(strings, "strings")
        with tf.device("/CPU:0"):
            text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
            if self.remove_space:  # " ".join(text.strip().split()): Python's whitespace, not RE2's \s
                text = tf.strings.regex_replace(text, self._classes["space"] + "+", " ")
                text = tf.strings.regex_replace(text, "^ | $", "")
            if not quotes_last:
                text = _replace_quotes(text)
            if not self.keep_accents:
                text = self._strip_accents(text)
            if self.lower_case:
                text = _lower(text)
            return _replace_quotes(text) if quotes_last else text

    def _strip_accents(self, text: tf.Tensor) -> tf.Tensor:
        import tensorflow_text as tf_text
        return tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFKD"), self._classes["combining"], "")

    def tokenize(self, strings, quotes_last: bool = False) -> tf.RaggedTensor:
        """[N] strings -> tf.RaggedTensor int32 [N, (tokens)]: ``XLNetTokenizer(lower=lower_case).encode_ids``
        (``quotes_last``: cleaned as SQuAD's features are, see ``clean``)."""
        text = self.clean(batch_of_strings(strings, "strings"), quotes_last=quotes_last)
        with tf.device("/CPU:0"):
            return self._encode(text)

    def _digit_comma_tables(self, pieces: list, piece_ids: dict) -> None:
        """Per-id tables for ``_split_digit_commas``, computed with Python's string tests as ``encode_pieces``
        applies them. (An unknown piece, whose text the id no longer has, never ends in digit + comma nor starts
        with the known piece ``▁``, so deciding by id is deciding by text.)"""
        self._splits = tf.constant([is_digit_comma_piece(p) for p in pieces])
        self._digits_text = tf.constant([p[:-1].replace(SPIECE_UNDERLINE, "") if is_digit_comma_piece(p) else ""
                                         for p in pieces])
        self._leading_underline = tf.constant([p[:1] == SPIECE_UNDERLINE for p in pieces])
        # The id of the piece without its leading ``▁`` (unknown if that is no piece), -1: drop it (``▁`` alone).
        self._without_underline = tf.constant([-1 if p == SPIECE_UNDERLINE else piece_ids.get(p[1:], 0)
                                               for p in pieces], tf.int32)
        self._comma_id = piece_ids[","]

    def _tokenize_with_offsets(self, text: tf.Tensor):
        """[N] strings -> (ids, begin, end) [N, (T)]: the ids of ``_sentencepiece`` (which breaks ties between
        equal-score segmentations as the ``sentencepiece`` package does) with the byte offsets of
        ``_sentencepiece_offsets`` (which breaks some of them the other way). Where the two differ they hold the
        same number of pieces in another order (a tie: "0" + "00" for "00" + "0"), and each piece takes the
        offsets of the piece at its place, off by a character or two inside a run of one repeated character;
        should the counts differ, the row is the second tokenizer's, ids and offsets."""
        ids = self._sentencepiece.tokenize(text).with_row_splits_dtype(tf.int64)
        other, begin, end = (r.with_row_splits_dtype(tf.int64)
                             for r in self._sentencepiece_offsets.tokenize_with_offsets(text))
        same = tf.equal(ids.row_lengths(), other.row_lengths())
        rows = tf.range(ids.nrows())
        ids = tf.gather(tf.concat([ids, other], axis=0), tf.where(same, rows, ids.nrows() + rows))
        return ids, begin, end

    def _split_digit_commas(self, ids: tf.RaggedTensor, begin=None, end=None):
        """The original ``encode_pieces`` fix: a piece ending in digit + comma (``▁2000,``) is replaced by the
        encoding of its text without the comma and any ``▁`` (with the leading ``▁`` dropped again if the piece
        had none) and ``,``. [N, (T)] -> [N, (T')] ids. With ``begin`` and ``end``, the byte offsets [N, (T)]
        of the pieces in the text (SQuAD), also those (``_tokenize_with_offsets``; the digits' text ends right before
        the comma)."""
        flat = ids.flat_values
        split = tf.gather(self._splits, flat)
        chosen = tf.boolean_mask(flat, split)  # [F]
        digits = tf.gather(self._digits_text, chosen)
        if begin is None:
            sub = self._sentencepiece.tokenize(digits).with_row_splits_dtype(tf.int64)  # [F, (k)]
        else:
            sub, sub_begin, sub_end = self._tokenize_with_offsets(digits)
        had_no_underline = row_values(sub, ~tf.gather(self._leading_underline, chosen))
        strip = ((positions(sub).flat_values == 0) & had_no_underline
                 & tf.gather(self._leading_underline, sub.flat_values))
        values = tf.where(strip, tf.gather(self._without_underline, sub.flat_values), sub.flat_values)
        kept = values >= 0  # a bare "▁" stripped is dropped
        # Every piece becomes a run of the output: itself, or (for the F split ones) its kept replacement pieces
        # and the comma. The runs of the split pieces are laid out one after the other in ``tail`` (the kept
        # pieces of each in order, then its comma), behind the P pieces: the output gathers runs from the two.
        count = tf.size(flat, out_type=tf.int64)
        n_split = tf.size(chosen, out_type=tf.int64)
        kept_rows = tf.boolean_mask(sub.value_rowids(), kept)
        run_length = tf.math.unsorted_segment_sum(tf.ones_like(kept_rows), kept_rows, n_split) + 1  # [F]
        order = tf.argsort(tf.concat([2 * kept_rows, 2 * tf.range(n_split) + 1], axis=0), stable=True)
        # A split piece's row among the F (0 for the others: both branches of the where are computed; the padding
        # keeps the gathers in range when no piece is split).
        rank = tf.maximum(tf.cumsum(tf.cast(split, tf.int64)) - 1, 0)
        run_start = tf.where(split, count + tf.gather(tf.pad(tf.cumsum(run_length, exclusive=True), [[0, 1]]), rank),
                             tf.range(count))
        run_length = tf.where(split, tf.gather(tf.pad(run_length, [[0, 1]]), rank), tf.ones_like(run_start))
        index = tf.ragged.range(run_start, run_start + run_length).flat_values
        lengths = tf.math.unsorted_segment_sum(run_length, ids.value_rowids(), ids.nrows())

        def expand(pieces, replacements, comma):  # [P], [sum k] (sub's flat values), [F] -> [N, (T')]
            tail = tf.gather(tf.concat([tf.boolean_mask(replacements, kept), comma], axis=0), order)
            return tf.RaggedTensor.from_row_lengths(tf.gather(tf.concat([pieces, tail], axis=0), index), lengths,
                                                    validate=False)

        new_ids = expand(flat, values, tf.fill(tf.shape(chosen), tf.cast(self._comma_id, flat.dtype)))
        if begin is None:
            return new_ids
        comma_at = tf.boolean_mask(end.flat_values, split) - 1
        base = row_values(sub, comma_at - tf.cast(tf.strings.length(digits), tf.int64))
        return (new_ids, expand(begin.flat_values, sub_begin.flat_values + base, comma_at),
                expand(end.flat_values, sub_end.flat_values + base, comma_at + 1))

    # --- fine-tuning layouts -----------------------------------------------------------------------------------

    def pack(self, tokens_a: tf.RaggedTensor, tokens_b=None) -> dict:
        """``truncate_pair`` + ``records.pack_sequence`` on ragged ids [N, (T)] -> dense features [N, S]."""
        S = self.seq_length
        len_a = tf.cast(tokens_a.row_lengths(), tf.int32)
        if tokens_b is None:
            len_a, len_b = tf.minimum(len_a, S - 2), None
        else:
            len_a, len_b = pair_lengths(len_a, tf.cast(tokens_b.row_lengths(), tf.int32), S - 3)
        # Left-padded: [PAD]*pad, A (len_a tokens) <sep>, B (len_b tokens) <sep>, <cls>; built on the dense [N, S]
        # grid (a ragged concatenation would add assertions on the row partitions to the graph).
        pad = S - len_a - 2 - (len_b + 1 if len_b is not None else 0)
        j = tf.range(S)[None, :]
        end_a = pad[:, None] + len_a[:, None] + 1  # after A's <sep>
        end_b = end_a + (len_b[:, None] + 1 if len_b is not None else 0)

        def tokens_from(tokens, first):  # row i's tokens from position first[i] on (clamped: the caller selects)
            dense = tokens.to_tensor(shape=[None, S])
            return tf.gather(dense, tf.clip_by_value(j - first[:, None], 0, S - 1), batch_dims=1)

        ids = tf.where(j < end_a - 1, tokens_from(tokens_a, pad), SEP_ID)
        if tokens_b is not None:
            ids = tf.where((j >= end_a) & (j < end_b - 1), tokens_from(tokens_b, end_a[:, 0]), ids)
        input_ids = tf.where(j < pad[:, None], 0, tf.where(j == S - 1, CLS_ID, ids))
        segment_ids = tf.where(j < pad[:, None], SEG_ID_PAD,
                               tf.where(j < end_a, SEG_ID_A, tf.where(j < end_b, SEG_ID_B, SEG_ID_CLS)))
        padding_mask = tf.cast(j >= pad[:, None], tf.float32)
        return {"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}

    def call(self, sentence, sentence2=None):
        """[B] strings (and [B] second sentences) -> ``input_ids``, ``segment_ids``, ``padding_mask`` [B, S]."""
        first = batch_of_strings(sentence, "sentence")
        second = None if sentence2 is None else batch_of_strings(sentence2, "sentence2")
        if second is not None:
            check_same_rows("sentence", first, sentence2=second)
        with tf.device("/CPU:0"):
            return self.pack(self.tokenize(first), None if second is None else self.tokenize(second))

    def _encode(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Cleaned [N] strings -> ids [N, (T)] (SentencePiece + the digit-comma fix)."""
        return self._split_digit_commas(self._sentencepiece.tokenize(text).with_row_splits_dtype(tf.int64))

    def encode_with_offsets(self, context: tf.Tensor):
        """[B] raw strings -> (ids, first char, last char), each ragged [B, (T)]: ``tokenize(context,
        quotes_last=True)`` and the characters of the string (after U+FFFD replacement) each token comes from,
        first and last (inclusive). Offsets come from tensorflow-text's ``SentencepieceTokenizer`` (see
        ``_tokenize_with_offsets``): where it breaks a tie between equal-score segmentations the other way, a
        token's characters can be off by one or two inside a run of one repeated character ("3000")."""
        cleaned = self.clean(context, quotes_last=True)
        ids, begin, end = self._split_digit_commas(*self._tokenize_with_offsets(cleaned))
        first, last = self._cleaned_byte_sources(context)  # [B, (bytes of cleaned)] -> chars of the context

        def char_at(source, offsets):  # byte offsets [B, (T)] -> chars (clamped: a zero-width token, its next byte)
            flat = (tf.minimum(tf.maximum(offsets, 0), row_values(ids, tf.maximum(source.row_lengths() - 1, 0)))
                    + row_values(ids, source.row_starts()))
            return ids.with_flat_values(tf.gather(source.flat_values, flat))

        # ids, begin and end share their row lengths
        return (ids, char_at(first, begin.flat_values),
                char_at(last, tf.maximum(end.flat_values - 1, begin.flat_values)))

    def _cleaned_byte_sources(self, context: tf.Tensor):
        """For each byte of ``clean(context, quotes_last=True)``, the first and the last character of the
        context it comes from (two only where a quote pair became one ``"``): two [B, (bytes)] ragged tensors.
        The cleaning is redone character by character: whitespace runs -> the run's first character (none at the
        ends), every other character -> its NFKD without combining marks, lower-cased
        (the same bytes the whole-string functions give: NFKD only reorders the combining marks dropped here,
        and lower-casing's one context rule, the final sigma, keeps the length), then quote pairs -> the first."""
        text = tf.strings.unicode_transcode(context, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
        chars = tf.strings.unicode_split(text, "UTF-8").with_row_splits_dtype(tf.int64)  # [B, (n)]
        flat = chars.flat_values
        out = flat
        if not self.keep_accents:
            out = self._strip_accents(out)
        if self.lower_case:
            out = tf.where(flat == "\x00", flat, tf.strings.lower(out, encoding="utf-8"))
        if self.remove_space:
            space = tf.strings.regex_full_match(flat, self._classes["space"])
            position = positions(chars).flat_values
            row = chars.value_rowids()
            words = tf.where(space, tf.zeros_like(position) - 1, position)
            first = tf.gather(tf.math.unsorted_segment_min(tf.where(space, tf.int64.max, position), row,
                                                           chars.nrows()), row)
            last = tf.gather(tf.math.unsorted_segment_max(words, row, chars.nrows()), row)
            previous_space = tf.concat([[False], space[:-1]], axis=0) & (position > 0)
            kept_space = space & ~previous_space & (position > first) & (position < last)
            out = tf.where(space, tf.where(kept_space, " ", ""), out)
        # Quote pairs, in the characters of the cleaned text (a character may have become several).
        pieces = tf.strings.unicode_split(out, "UTF-8").with_row_splits_dtype(tf.int64)  # [chars, (k)]
        u = pieces.flat_values
        origin = pieces.value_rowids()  # flat context character of each
        row = tf.gather(chars.value_rowids(), origin)
        dropped = tf.zeros_like(u, tf.bool)
        for quote in ("`", "'"):
            dropped |= _second_of_pairs(u == quote, row)
        size = tf.where(dropped, tf.zeros_like(origin), tf.cast(tf.strings.length(u), tf.int64))
        in_row = origin - tf.gather(chars.row_starts(), row)  # the character's index in its context
        pair_end = tf.concat([dropped[1:], [False]], axis=0)  # the first of a pair: the pair ends at the next
        last = tf.where(pair_end, tf.concat([in_row[1:], [0]], axis=0), in_row)
        rows = tf.repeat(row, size)
        return (tf.RaggedTensor.from_value_rowids(tf.repeat(in_row, size), rows, nrows=chars.nrows(), validate=False),
                tf.RaggedTensor.from_value_rowids(tf.repeat(last, size), rows, nrows=chars.nrows(), validate=False))

    def get_config(self):
        config = super().get_config()
        config.update(spiece_model=base64.b64encode(self.spiece_model).decode("ascii"), seq_length=self.seq_length,
                      lower_case=self.lower_case, keep_accents=self.keep_accents, remove_space=self.remove_space,
                      max_qa_length=self.max_qa_length, max_query_length=self.max_query_length,
                      doc_stride=self.doc_stride)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("spiece_model"), str):
            config["spiece_model"] = base64.b64decode(config["spiece_model"])
        return cls(**config)


def _replace_quotes(text: tf.Tensor) -> tf.Tensor:
    return tf.strings.regex_replace(tf.strings.regex_replace(text, "``", '"'), "''", '"')


def _lower(text: tf.Tensor) -> tf.Tensor:
    """Unicode lower-case (as Python's ``str.lower``), in pieces between NULs: ``tf.strings.lower``'s ICU
    conversion stops at the first NUL (and so does ``reduce_join``'s separator: joined by hand)."""
    parts = tf.strings.split(text, "\x00")
    nul = tf.where(positions(parts).flat_values < row_values(parts, parts.row_lengths() - 1), "\x00", "")
    return tf.strings.reduce_join(parts.with_flat_values(tf.strings.lower(parts.flat_values, encoding="utf-8") + nul),
                                  axis=-1)


def _second_of_pairs(is_quote: tf.Tensor, row: tf.Tensor) -> tf.Tensor:
    """In runs of consecutive quote characters (``is_quote`` [U], within the same ``row``), the second character
    of each pair, which a left-to-right replacement of the pair by one character (Python's ``str.replace``)
    removes: "```" -> '"`'."""
    same_row = tf.concat([[False], row[1:] == row[:-1]], axis=0)
    run_start = is_quote & ~(tf.concat([[False], is_quote[:-1]], axis=0) & same_row)
    index = tf.range(tf.size(is_quote, out_type=tf.int64))
    run = tf.maximum(tf.cumsum(tf.cast(run_start, tf.int64)) - 1, 0)
    first = tf.gather(tf.concat([tf.boolean_mask(index, run_start), [0]], axis=0), run)
    return is_quote & ((index - first) % 2 == 1)
