"""Token classification data: the CoNLL and JSONL readers, word-to-piece alignment, windows, metrics.

Files (``read_sentences``): ``*.jsonl`` holds one ``{"tokens": [...], "tags": [...]}`` object a line (an ``id`` is
kept if present; unique); any other file is the CoNLL layout: one word a line, columns split on whitespace (as
many on every line), the word in ``word_column`` and its tag in ``tag_column`` (default: the last), a blank line
between sentences, ``-DOCSTART-`` lines ignored. A sentence's id is ``<file name>:<line of its first word>``
(JSONL: its ``id``, else the line). A test file may lack tags (``has_tags``: a CoNLL file whose first word line has
no tag column apart from the word's, a JSONL file whose first object has no ``tags``); every line is then read so.

Alignment (the BERT/XLNet token-classification recipe): every word is encoded on its own
(``XLNetTokenizer.encode_ids``, the in-graph ``XLNetPreprocessor.tokenize`` gives the same ids); its tag goes on
its first piece, the other pieces are ignored by the loss (label -1). A word with no pieces (e.g. only control
characters) becomes ``<unk>``; a word is cut to ``max_tokens`` pieces.

Windows: a sentence's pieces are cut into windows of ``max_tokens = max_seq_length - 2`` pieces (``pieces <sep>
<cls>``, left-padded as the classifier), each ``stride`` pieces after the previous one, until the last piece is
in one (SQuAD's rule). Training labels every first piece of every window. Evaluation and prediction label each
word once: in the window where its first piece has the most context, min(pieces to its left, pieces to its right)
+ 0.01 x window length, the earliest on a tie (SQuAD's ``_check_is_max_context``); that window's ``score_mask``
is 1 at the piece.

Metrics: token accuracy for every scheme; for BIO-family tags (IOB1, IOB2, IOBES) also entity precision, recall
and F1 by the CoNLL ``conlleval`` definition, computed by ``seqeval`` (its default mode: conlleval's chunk rules,
extended with IOBES's ``E-``/``S-``; ``tests/test_tagging.py`` checks it against hand-computed conlleval counts).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from typing import Optional

import numpy as np

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError
from xlnet_tf.finetuning import records
from xlnet_tf.tokenization import UNK_ID

SCHEMES = ("auto", "bio", "plain")
DOCSTART = "-DOCSTART-"
IGNORE = -1  # label of a piece the loss and the metrics skip
# A BIO-family tag: O, or a one-letter prefix (B, I, E, S and the L/U of BILOU), a dash and a type.
_BIO_TAG = re.compile(r"^(O|[BIESLU]-.+)$")
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # the bytes errors="surrogateescape" could not decode


@dataclasses.dataclass
class Sentence:
    guid: str
    words: list
    tags: list  # empty for an unlabelled file


def _has_tag_column(fields: list, word_column: int, tag_column: int) -> bool:
    """Whether a CoNLL line's ``fields`` hold the tag column apart from the word's."""
    at = {c % len(fields) for c in (word_column, tag_column) if -len(fields) <= c < len(fields)}
    return len(at) == 2


def _conll(path: str, word_column: int, tag_column: int, labelled: Optional[bool]) -> list:
    sentences, words, tags, first = [], [], [], 0
    name = os.path.basename(path)
    width = None  # (columns, line) of the file's first word line: a CoNLL file's layout is fixed

    def flush():
        if words:
            sentences.append(Sentence(f"{name}:{first}", list(words), list(tags)))
        words.clear(), tags.clear()

    # Bytes that are not UTF-8 are kept as surrogates and reported with their line (a decoding error would give a
    # byte offset in the file); text mode keeps the line breaks \r\n and \r.
    with io_utils.open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for n, line in enumerate(f, 1):
            bad = _UNDECODABLE.search(line)
            if bad:
                raise InputError(f"{path}:{n}: not UTF-8 text (byte {ord(bad.group()) - 0xdc00:#04x} at character "
                                 f"{bad.start() + 1} of the line)")
            fields = line.split()
            if not fields or fields[0] == DOCSTART:
                flush()
                continue
            if labelled is None:  # a test file: tagged if its first word line has the tag column
                labelled = _has_tag_column(fields, word_column, tag_column)
            columns = (word_column, tag_column) if labelled else (word_column,)
            at = {c % len(fields) for c in columns if -len(fields) <= c < len(fields)}
            if len(at) != len(columns):  # a missing column, or the word's column taken for the tag
                raise InputError(f"{path}:{n}: {len(fields)} column(s), but the word is column {word_column} and "
                                 f"the tag column {tag_column} (--word_column, --tag_column)")
            # A line with another column count would put another column in the word's or the tag's place (a word
            # with a space, "New York np", would be the word "New"; a stray column the tag).
            width = width or (len(fields), n)
            if len(fields) != width[0]:
                raise InputError(f"{path}:{n}: {len(fields)} column(s), but line {width[1]} has {width[0]} (columns "
                                 "are split on whitespace: a word with a space, or a stray column?)")
            if not words:
                first = n
            words.append(fields[word_column])
            if labelled:
                tags.append(fields[tag_column])
    flush()
    return sentences


def _jsonl(path: str, labelled: Optional[bool]) -> list:
    sentences, ids = [], {}
    auto = labelled is None  # a test file: tagged if its first object has "tags", then every line must be
    first = None
    for n, obj in io_utils.read_jsonl(path):
        tokens = obj.get("tokens") if isinstance(obj, dict) else None
        if auto and isinstance(obj, dict):
            if labelled is None:
                labelled, first = "tags" in obj, n
            elif ("tags" in obj) != labelled:  # untagged lines would count as errors, tags alone be ignored
                raise InputError(f"{path}:{n}: {'no' if labelled else 'has'} 'tags', but line {first} "
                                 f"{'has' if labelled else 'has none'} (tag every sentence of the file, or none)")
        if not isinstance(tokens, list) or not all(isinstance(t, str) and t.strip() for t in tokens):
            raise InputError(f'{path}:{n}: expected {{"tokens": [non-empty strings], "tags": [...]}}')
        spaced = next((t for t in tokens if any(ch.isspace() for ch in t)), None)
        if spaced is not None:  # one word here, several in the .conll output, a CoNLL file and the raw-text export
            raise InputError(f"{path}:{n}: token {spaced!r} holds whitespace (words are split at whitespace "
                             "everywhere else: give its parts as tokens)")
        bad = io_utils.surrogate_keys(obj)
        if bad:
            raise InputError(f"{path}:{n}: {', '.join(map(repr, bad))} holds a lone surrogate (not valid Unicode)")
        if not tokens:  # was dropped silently: a prediction file then had fewer output rows than input rows
            raise InputError(f"{path}:{n}: 'tokens' is empty (a sentence needs a word; remove the line)")
        tags = obj.get("tags") if labelled else []
        if labelled and (not isinstance(tags, list) or len(tags) != len(tokens)
                         or not all(isinstance(t, str) and t and not any(c.isspace() for c in t) for t in tags)):
            raise InputError(f"{path}:{n}: 'tags' must be a list of {len(tokens)} non-empty strings without "
                             "whitespace, one per token")
        guid = str(obj.get("id", f"{os.path.basename(path)}:{n}"))
        if guid in ids:  # the predictions are keyed by id
            raise InputError(f"{path}:{n}: id {guid!r} is also the id of line {ids[guid]} (ids must be unique)")
        ids[guid] = n
        sentences.append(Sentence(guid, tokens, list(tags)))
    return sentences


def read_sentences(path: str, word_column: int = 0, tag_column: int = -1, labelled: Optional[bool] = True
                   ) -> list:
    """The sentences of a CoNLL or JSONL file (by its extension; see the module docstring); ``labelled=None``:
    with tags if the file has them (``has_tags``), else without. A line that is not UTF-8, has other columns than
    the file's first word line, or (JSONL) no tokens, a token or tag holding whitespace, a lone surrogate, an id an
    earlier line has or (``labelled=None``) tags where the first line has none or the reverse is an InputError
    naming the file and line."""
    if not io_utils.exists(path):
        raise InputError(f"{path}: file not found")
    if path.endswith(".jsonl"):
        return _jsonl(path, labelled)
    return _conll(path, word_column, tag_column, labelled)


def has_tags(path: str, word_column: int = 0, tag_column: int = -1) -> bool:
    """Whether the file carries tags, judged by its first sentence as ``read_sentences(labelled=None)`` does (a
    CoNLL word line with the tag column apart from the word's; a JSONL object with ``tags``): cheap, for deciding
    before the features' cache is read whether a test file can be evaluated. False for a file of no sentence."""
    if not io_utils.exists(path):
        raise InputError(f"{path}: file not found")
    if path.endswith(".jsonl"):
        return next((isinstance(obj, dict) and "tags" in obj for _, obj in io_utils.read_jsonl(path)), False)
    with io_utils.open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] != DOCSTART:
                return _has_tag_column(fields, word_column, tag_column)
    return False


def detect_scheme(tags) -> str:
    """"bio" if every tag is O or prefix-type (B-PER, I-LOC, E-ORG, S-MISC) and one is not O, else "plain"."""
    tags = set(tags)
    return "bio" if tags - {"O"} and all(_BIO_TAG.match(t) for t in tags) else "plain"


def tag_list(sentences: list) -> list:
    """The tags of the training data, sorted (the head's classes)."""
    return sorted({t for s in sentences for t in s.tags})


# -- alignment and windows --------------------------------------------------------------------------------------
def word_pieces(tokenizer, words: list, max_tokens: int) -> list:
    """The piece ids of each word (at least one: ``<unk>`` for a word with none; at most ``max_tokens``)."""
    return [tokenizer.encode_ids(w)[:max_tokens] or [UNK_ID] for w in words]


def windows(num_pieces: int, max_tokens: int, stride: int) -> list:
    """``(start, length)`` of the windows over ``num_pieces`` pieces (see the module docstring)."""
    if num_pieces <= 0:
        return []
    count = 1 + max(num_pieces - max_tokens + stride - 1, 0) // stride
    return [(k * stride, min(num_pieces - k * stride, max_tokens)) for k in range(count)]


def best_windows(num_pieces: int, spans: list) -> list:
    """For each piece, the index of the window where it has the most context (the earliest on a tie)."""
    best = [(-1.0, -1)] * num_pieces
    for k, (start, length) in enumerate(spans):
        for p in range(start, start + length):
            score = min(p - start, start + length - 1 - p) + 0.01 * length
            if score > best[p][0]:
                best[p] = (score, k)
    return [k for _, k in best]


def encode_sentence(pieces: list, tag_ids: Optional[list], max_seq_length: int, stride: int) -> list:
    """The windows of one sentence as feature dicts (``input_ids``, ``segment_ids``, ``padding_mask``, ``label``
    (the tag id at first pieces, else -1), ``score_mask`` (1 at the first pieces this window labels),
    ``word_index`` (the word of a scored piece, else -1)). ``pieces``: each word's piece ids."""
    flat, first = [], []
    for w, ids in enumerate(pieces):
        first.append(len(flat))
        flat.extend(ids)
    word_at = {p: w for w, p in enumerate(first)}
    spans = windows(len(flat), max_seq_length - 2, stride)
    best = best_windows(len(flat), spans)
    out = []
    for k, (start, length) in enumerate(spans):
        ids, segs, mask = records.pack_sequence(flat[start:start + length], None, max_seq_length)
        pad = max_seq_length - length - 2
        label = [IGNORE] * max_seq_length
        score = [0] * max_seq_length
        word = [-1] * max_seq_length
        for p in range(start, start + length):
            w = word_at.get(p)
            if w is None:
                continue
            label[pad + p - start] = tag_ids[w] if tag_ids is not None else IGNORE
            if best[p] == k:
                score[pad + p - start], word[pad + p - start] = 1, w
        out.append(dict(input_ids=ids, segment_ids=segs, padding_mask=np.asarray(mask, np.float32), label=label,
                        score_mask=score, word_index=word))
    return out


def feature_spec(max_seq_length: int) -> dict:
    import tensorflow as tf
    seq = [max_seq_length]
    return {"input_ids": (seq, tf.int64), "segment_ids": (seq, tf.int64), "padding_mask": (seq, tf.float32),
            "label": (seq, tf.int64), "score_mask": (seq, tf.int64), "word_index": (seq, tf.int64),
            "is_real_example": ([], tf.int64), "example_index": ([], tf.int64)}


def dummy_features(max_seq_length: int) -> dict:
    ids, segs, mask = records.dummy_sequence(max_seq_length)
    none = np.full([max_seq_length], IGNORE, np.int32)
    return {"input_ids": np.asarray(ids, np.int32), "segment_ids": np.asarray(segs, np.int32),
            "padding_mask": np.asarray(mask, np.float32), "label": none, "score_mask": np.zeros_like(none),
            "word_index": none, "is_real_example": np.int32(0), "example_index": np.int32(-1)}


def prepare_features(path: str, sentences_fn, tokenizer, tags: list, max_seq_length: int, stride: int,
                     cache: str, overwrite: bool = False) -> tuple:
    """Encodes the sentences of ``path`` (``sentences_fn()`` reads them) once into the TFRecord cache ``cache``
    (reused while the file, the tags and the settings are the same). A tag the training data lacks gets label -1
    (no loss; the metrics count the word as wrong). The meta's ``labelled``: whether the sentences had tags."""
    expected = {"task": "tagging", "max_seq_length": max_seq_length, "stride": stride, "tags": list(tags),
                "uncased": tokenizer.lower, "spiece_sha256": tokenizer.fingerprint(),
                "inputs": records.file_identity(path)}
    index = {t: i for i, t in enumerate(tags)}

    def encode():
        sentences = sentences_fn()
        unknown = collections.Counter(t for s in sentences for t in s.tags if t not in index)

        def rows():
            for i, s in enumerate(sentences):
                pieces = word_pieces(tokenizer, s.words, max_seq_length - 2)
                tag_ids = [index.get(t, IGNORE) for t in s.tags] if s.tags else None
                for feature in encode_sentence(pieces, tag_ids, max_seq_length, stride):
                    yield dict(feature, is_real_example=1, example_index=i), False

        return dict(source=path, num_examples=len(sentences), num_skipped=0, skipped=[],
                    num_words=sum(len(s.words) for s in sentences), unknown_tags=dict(unknown.most_common(20)),
                    labelled=any(s.tags for s in sentences),
                    num_unknown_tag_words=sum(unknown.values()),
                    guids=[s.guid for s in sentences]), rows()

    return records.cache_features(cache, expected, overwrite, encode)


def word_predictions(outputs: dict, num_sentences: int) -> list:
    """Per sentence, {word index: predicted tag id} from per-window ``predictions``, ``score_mask``,
    ``word_index`` and ``example_index`` (numpy, one row per window)."""
    found = [dict() for _ in range(num_sentences)]
    rows, cols = np.nonzero(outputs["score_mask"] == 1)
    for r, c in zip(rows, cols):
        found[int(outputs["example_index"][r])][int(outputs["word_index"][r, c])] = int(outputs["predictions"][r, c])
    return found


# -- metrics ----------------------------------------------------------------------------------------------------
def tagging_metrics(gold: list, predicted: list, scheme: str) -> dict:
    """Token ``accuracy`` (and the word count); for ``scheme="bio"`` entity ``precision``, ``recall``, ``f1``
    (micro, conlleval's definition via seqeval) and ``f1/<type>`` per entity type. ``gold``, ``predicted``: lists
    of tag lists, one per sentence."""
    words = sum(len(g) for g in gold)
    correct = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    result = {"accuracy": correct / max(words, 1), "num_words": float(words)}
    if scheme == "bio":
        from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

        result.update(precision=precision_score(gold, predicted), recall=recall_score(gold, predicted),
                      f1=f1_score(gold, predicted))
        report = classification_report(gold, predicted, output_dict=True, zero_division=0)
        result.update({f"f1/{k}": v["f1-score"] for k, v in report.items() if not k.endswith(" avg")})
    return {k: float(v) for k, v in result.items()}


def most_frequent_tag_baseline(train: list, evaluated: list) -> dict:
    """Token accuracy of tagging each word with its most frequent training tag (the most frequent tag overall for
    a word not in the training data): the usual floor of a tagger."""
    per_word = collections.defaultdict(collections.Counter)
    overall = collections.Counter()
    for s in train:
        for w, t in zip(s.words, s.tags):
            per_word[w][t] += 1
            overall[t] += 1
    default = overall.most_common(1)[0][0]
    best = {w: c.most_common(1)[0][0] for w, c in per_word.items()}
    total = correct = unseen = 0
    for s in evaluated:
        for w, t in zip(s.words, s.tags):
            total += 1
            unseen += w not in best
            correct += best.get(w, default) == t
    return {"accuracy": correct / max(total, 1), "num_words": total, "unseen_words": unseen, "default_tag": default}
