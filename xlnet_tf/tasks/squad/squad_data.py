"""SQuAD v1.1 / v2.0 data for XLNet: reading and validating the JSON, SentencePiece features, cached TFRecords.

Feature building reuses tf-models-official's ``squad_lib_sp.convert_examples_to_features(xlnet_format=True)``:
the original XLNet algorithm (character <-> piece alignment by banded LCS, sliding windows with ``doc_stride``,
``P <sep> Q <sep> <cls>`` with segment ids P=0, Q=1, CLS=2, PAD=3, right padding, ``token_is_max_context``,
spans outside a window labelled at CLS). It is wrapped where it differs from XLNet:

* it looks up ``[SEP]``/``[CLS]``, which an XLNet ``spiece.model`` maps to ``<unk>``: a proxy SentencePiece
  processor maps them to ``<sep>``/``<cls>`` (ids 4/3);
* its ``preprocess_text`` (ALBERT's) does not turn ``` `` ``/``''`` into ``"`` as XLNet's does: the proxy applies
  that before encoding, so the pieces are the ones the original XLNet preprocessing produces;
* it drops examples silently ("MISMATCH DETECTED!") and crashes on some inputs: here it runs one example at a
  time so each drop is counted with its reason and the example's id;
* its ``paragraph_mask`` (1 = paragraph or CLS) becomes XLNet's ``p_mask`` (1 = not an answer position, CLS 0).

Input validation (malformed JSON, answers that are not at their offset, empty questions, answers that fit in no
window) reports the file and the example id; skipped examples are counted in the returned ``stats``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import random
from typing import Iterable, Iterator, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.finetuning import records
from xlnet_tf.io_utils import atomic_write, write_json_atomic
from xlnet_tf.tokenization import XLNetTokenizer, file_sha256
from xlnet_tf.progress_lines import Progress
from xlnet_tf.errors import InputError
UNIQUE_ID_BASE = 1_000_000_000
# 2: the eval features are JSON (1 pickled them: a pickle can run code when read); 3: records.cache_features'
# metadata (num_records, inputs); 4: inputs are records.file_identity (path, size, SHA-256) as every family's.
# Another version is encoded again (records.cached_meta), never misread.
CACHE_VERSION = 4


class SquadFileError(InputError):
    """A SQuAD JSON file that cannot be used (the message names the file and the place): a data file, not a
    setting."""


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question_text: str
    paragraph_text: str
    orig_answer_text: Optional[str] = None
    start_position: Optional[int] = None  # character offset of the answer in paragraph_text
    end_position: Optional[int] = None
    is_impossible: bool = False


@dataclasses.dataclass
class SquadFeature:
    """One window of one example, XLNet layout. ``padding_mask`` is 1 for real tokens (our model's convention)."""

    unique_id: int
    example_index: int
    doc_span_index: int
    tok_start_to_orig_index: list
    tok_end_to_orig_index: list
    token_is_max_context: dict
    input_ids: list
    padding_mask: list
    segment_ids: list
    p_mask: list
    paragraph_len: int  # paragraph pieces in this window
    cls_index: int
    start_position: Optional[int] = None
    end_position: Optional[int] = None
    is_impossible: bool = False


@dataclasses.dataclass
class SquadFile:
    path: str
    examples: list
    data: list  # the file's "data" list, as the official evaluation reads it
    version_2: bool  # scored by SQuAD 2.0's rules, else 1.1's (squad_postprocess.is_version_2)
    has_answers: bool  # gold answers present (evaluation possible)
    skipped: dict  # reason -> [qas_id, ...]


def _where(path, *parts):
    return f"{path}: " + "".join(parts)


@dataclasses.dataclass
class SquadQuestion:
    """One question of a SQuAD file as ``squad_questions`` finds it: ``where`` it is (``data[a].paragraphs[p]
    .qas[q]``), its paragraph's ``context``, and either its fields or the ``problem`` that makes it unusable in
    any tool (no ``id``, a ``question`` that is no string, ``answers`` no list, ``is_impossible`` no boolean)."""

    where: str
    context: str
    qas_id: str = ""
    question: str = ""
    answers: list = dataclasses.field(default_factory=list)
    is_impossible: bool = False
    problem: str = ""


def load_squad_json(path: str) -> tuple[int, list]:
    """``(size in bytes, the "data" list)`` of a SQuAD JSON file; ``SquadFileError`` naming the file (and line)
    if it is missing, not UTF-8, not JSON or has no ``data`` list."""
    size, raw = _load_squad_object(path)
    return size, raw["data"]


def _load_squad_object(path: str) -> tuple[int, dict]:
    """``load_squad_json``'s reading: the whole object (its ``version`` too)."""
    if not tf.io.gfile.exists(path):
        raise SquadFileError(f"{path}: file not found")
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")  # a UTF-8 BOM (some editors write one), dropped as every reader drops it
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise SquadFileError(f"{path}:{line}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadFileError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise SquadFileError(f"{path}: not a SQuAD file (expected an object with a 'data' list, as the official "
                             "train-v1.1.json / train-v2.0.json)")
    return len(data), raw


def squad_questions(path: str, data: list) -> Iterator[SquadQuestion]:
    """The questions of a SQuAD file's ``data`` list in file order: the one reading of the format's structure,
    for training, evaluation and batch prediction alike. An article without a ``paragraphs`` list or a paragraph
    without a ``context`` string or a ``qas`` list is a ``SquadFileError`` naming the file and the place; a
    question's own structural problem is its ``problem`` (each tool reports it its way)."""
    for a, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise SquadFileError(_where(path, f"data[{a}] has no 'paragraphs' list"))
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise SquadFileError(_where(path, f"{where} has no 'context' string"))
            if not isinstance(paragraph.get("qas"), list):
                raise SquadFileError(_where(path, f"{where} has no 'qas' list"))
            for q, qa in enumerate(paragraph["qas"]):
                yield _question(f"{where}.qas[{q}]", paragraph["context"], qa)


def _question(where: str, context: str, qa) -> SquadQuestion:
    if not isinstance(qa, dict) or "id" not in qa or not isinstance(qa.get("question"), str):
        return SquadQuestion(where, context, problem=f"{where} needs an 'id' and a 'question' string")
    qas_id = str(qa["id"])
    answers = qa.get("answers") or []
    if not isinstance(answers, list):
        return SquadQuestion(where, context, qas_id, problem=f"{where} (id {qas_id}): 'answers' is not a list")
    is_impossible = qa.get("is_impossible", False)
    if not isinstance(is_impossible, bool):  # bool("false") is True: every question unanswerable
        return SquadQuestion(where, context, qas_id, problem=f"{where} (id {qas_id}): 'is_impossible' is "
                                                             f"{is_impossible!r}, not true or false")
    return SquadQuestion(where, context, qas_id, qa["question"], answers, is_impossible)


def empty_text(question: SquadQuestion) -> str:
    """Why no tool answers ``question`` although it is well-formed ("empty question", "empty context", a lone
    surrogate: JSON's "\\ud800", no Unicode, which SentencePiece fails on naming no question), or ""."""
    if not question.question.strip():
        return "empty question"
    if not question.context.strip():
        return "empty context"
    bad = [name for name, text in (("question", question.question), ("context", question.context))
           if io_utils.lone_surrogate(text)]
    return f"a lone surrogate in the {' and '.join(bad)} (not valid Unicode)" if bad else ""


def read_squad_file(path: str, is_training: bool) -> SquadFile:
    """Reads an official-layout SQuAD v1.1/v2.0 JSON file.

    Structural problems (not JSON, no ``data`` list, a paragraph without ``context``, a question without ``id``
    or ``question``, an ``is_impossible`` that is not a JSON boolean: ``squad_questions``) raise
    ``SquadFileError`` naming the file and the place. Problems of single examples skip them (and are listed in
    ``skipped`` by reason): empty question or context; in training also no answer, an answer that is not at its
    ``answer_start`` in the context, an impossible question with answers, and duplicate ids.
    """
    from xlnet_tf.tasks.squad.squad_postprocess import is_version_2

    _, raw = _load_squad_object(path)
    data = raw["data"]
    examples, skipped, seen = [], collections.defaultdict(list), set()
    has_answers = False
    for question in squad_questions(path, data):
        if question.problem:
            raise SquadFileError(_where(path, question.problem))
        qas_id, qwhere, answers, is_impossible = (question.qas_id, question.where, question.answers,
                                                  question.is_impossible)
        context = question.context
        has_answers |= bool(answers) or is_impossible

        def skip(reason, detail=""):
            skipped[reason].append(qas_id)
            logging.warning("%s: skipping example %s (%s): %s%s", path, qas_id, qwhere, reason, detail)

        if qas_id in seen:
            skip("duplicate id")
            continue
        if empty_text(question):
            skip(empty_text(question))
            continue
        example = SquadExample(qas_id, question.question, context, is_impossible=is_impossible)
        if is_training:
            if is_impossible and answers:  # which one is wrong is not ours to guess
                skip("impossible with answers", f" (is_impossible is true and 'answers' has {len(answers)}; "
                                                "SQuAD 2.0 keeps those of an impossible one in "
                                                "'plausible_answers')")
                continue
            if not is_impossible:
                if not answers:
                    skip("no answer", " (answerable questions need one; set is_impossible for SQuAD 2.0)")
                    continue
                ans = answers[0]
                if not isinstance(ans, dict) or not isinstance(ans.get("text"), str) or \
                        not isinstance(ans.get("answer_start"), int) or not ans["text"]:
                    skip("malformed answer", f" {ans!r}")
                    continue
                start, ans_text = ans["answer_start"], ans["text"]
                if context[start:start + len(ans_text)] != ans_text:
                    skip("answer not at its offset",
                         f": {ans_text!r} at answer_start={start}, context there is "
                         f"{context[start:start + len(ans_text)]!r}")
                    continue
                example.orig_answer_text, example.start_position = ans_text, start
                example.end_position = start + len(ans_text) - 1
            else:
                example.orig_answer_text, example.start_position = "", -1
        seen.add(qas_id)
        examples.append(example)
    if not examples:
        raise SquadFileError(f"{path}: no usable examples (skipped: {_counts(skipped) or 'none'})")
    return SquadFile(path, examples, data, is_version_2(data, raw.get("version")), has_answers, dict(skipped))


def _counts(skipped: dict) -> str:
    return ", ".join(f"{len(ids)} {reason}" for reason, ids in skipped.items())


class _XLNetPieces:
    """SentencePiece proxy for squad_lib_sp: XLNet's special pieces and XLNet's quote normalisation."""

    _SPECIAL = {"[SEP]": "<sep>", "[CLS]": "<cls>"}

    def __init__(self, sp):
        self._sp = sp

    def PieceToId(self, piece):  # noqa: N802 (SentencePiece API)
        return self._sp.PieceToId(self._SPECIAL.get(piece, piece))

    def EncodeAsPieces(self, text):  # noqa: N802
        return self._sp.EncodeAsPieces(text.replace("``", '"').replace("''", '"'))

    def __getattr__(self, name):
        return getattr(self._sp, name)


@contextlib.contextmanager
def _absl_verbosity(level):
    old = logging.get_verbosity()
    logging.set_verbosity(level)
    try:
        yield
    finally:
        logging.set_verbosity(old)


# squad_lib_sp aligns a paragraph's characters to its pieces with an n x m float32 table (n, m ~ the paragraph's
# length): 16k characters are 1 GiB. SQuAD's longest paragraphs have about 4k.
MAX_PARAGRAPH_CHARS = 16_384


def convert_examples_to_features(examples: list, tokenizer: XLNetTokenizer, max_seq_length: int, doc_stride: int,
                                 max_query_length: int, is_training: bool, example_index_offset: int = 0,
                                 unique_id_base: int = UNIQUE_ID_BASE, source: str = "") -> tuple[list, dict]:
    """Features of ``examples`` (squad_lib_sp's algorithm in XLNet format) and ``skipped`` (reason -> ids).

    Examples whose paragraph cannot be aligned to its pieces are skipped, and in training also those whose
    answer lies inside no window (too long for ``max_seq_length``/``doc_stride``).
    """
    from official.nlp.data import squad_lib_sp  # imports tf_keras internally (data utilities only)

    if max_seq_length - max_query_length - 3 < 1:
        raise InputError(f"max_seq_length={max_seq_length} leaves no room for the paragraph after "
                         f"max_query_length={max_query_length} and 3 special tokens")
    proxy = type("Tokenizer", (), {})()
    proxy.sp_model = _XLNetPieces(tokenizer.sp)
    features, skipped = [], collections.defaultdict(list)
    unique_id = unique_id_base
    # 18,000 questions took 3.5 min, in silence.
    progress = Progress(f"{source or 'SQuAD'}: features", len(examples), unit="questions")
    for index, example in enumerate(examples):
        progress.advance()
        if len(example.paragraph_text) > MAX_PARAGRAPH_CHARS:
            skipped["paragraph too long"].append(example.qas_id)
            logging.warning("%s: skipping example %s: its paragraph has %d characters; aligning characters to "
                            "pieces takes memory quadratic in that, so at most %d are accepted", source,
                            example.qas_id, len(example.paragraph_text), MAX_PARAGRAPH_CHARS)
            continue
        lib_example = squad_lib_sp.SquadExample(
            qas_id=example.qas_id, question_text=example.question_text, paragraph_text=example.paragraph_text,
            orig_answer_text=example.orig_answer_text, start_position=example.start_position,
            is_impossible=example.is_impossible)
        produced = []
        try:
            with _absl_verbosity(logging.WARNING):  # squad_lib_sp logs every window of its first 20 examples
                squad_lib_sp.convert_examples_to_features(
                    [lib_example], proxy, max_seq_length, doc_stride, max_query_length, is_training,
                    output_fn=(produced.append if is_training else lambda f, is_padding: produced.append(f)),
                    do_lower_case=tokenizer.lower, xlnet_format=True, batch_size=1)
        except UnboundLocalError:  # squad_lib_sp (eval mode) when the only example was dropped as a mismatch
            produced = []
        except AssertionError:  # answer start after answer end once mapped to pieces
            skipped["answer not alignable to pieces"].append(example.qas_id)
            logging.warning("%s: skipping example %s: its answer cannot be mapped to SentencePiece pieces",
                            source, example.qas_id)
            continue
        if not produced:
            skipped["paragraph not alignable to pieces"].append(example.qas_id)
            logging.warning("%s: skipping example %s: fewer than 80%% of its paragraph's characters align with "
                            "its SentencePiece pieces (squad_lib_sp 'MISMATCH DETECTED!')", source, example.qas_id)
            continue
        if is_training and not example.is_impossible and all(f.is_impossible for f in produced):
            skipped["answer in no window"].append(example.qas_id)
            logging.warning("%s: skipping example %s: its answer %r is not inside any %d-token window (raise "
                            "--max_seq_length or lower --doc_stride)", source, example.qas_id,
                            example.orig_answer_text, max_seq_length)
            continue
        for f in produced:
            features.append(_to_xlnet_feature(f, unique_id, example_index_offset + index))
            unique_id += 1
    return features, dict(skipped)


def _to_xlnet_feature(f, unique_id: int, example_index: int) -> SquadFeature:
    paragraph_mask = np.asarray(f.paragraph_mask, np.int32)
    return SquadFeature(
        unique_id=unique_id, example_index=example_index, doc_span_index=f.doc_span_index,
        tok_start_to_orig_index=list(f.tok_start_to_orig_index), tok_end_to_orig_index=list(f.tok_end_to_orig_index),
        token_is_max_context=dict(f.token_is_max_context), input_ids=list(f.input_ids),
        padding_mask=list(f.input_mask), segment_ids=list(f.segment_ids), p_mask=(1 - paragraph_mask).tolist(),
        paragraph_len=len(f.tok_start_to_orig_index), cls_index=f.class_index,
        start_position=f.start_position, end_position=f.end_position, is_impossible=bool(f.is_impossible))


# ---------------------------------------------------------------------------------------------------------------
# Cached features: train TFRecords (one shard per --proc_id) and eval features as JSON (never a pickle: a cache
# directory may be shared, and reading a pickle can run code), each with the metadata of ``records.cache_features``:
# a changed input file rebuilds them, other settings are refused (--overwrite_data), as every task's caches.


@dataclasses.dataclass(frozen=True)
class FeatureSettings:
    spiece_model_file: str
    max_seq_length: int
    max_query_length: int
    doc_stride: int
    uncased: bool

    def prefix(self) -> str:
        return os.path.basename(self.spiece_model_file)

    def expected(self, data_file: str, split: str) -> dict:
        """What a cache of ``data_file``'s features must have been written with (``records.cached_meta``)."""
        return dict(cache_version=CACHE_VERSION, task="squad", split=split,
                    spiece_sha256=file_sha256(self.spiece_model_file), max_seq_length=self.max_seq_length,
                    max_query_length=self.max_query_length, doc_stride=self.doc_stride, uncased=self.uncased,
                    inputs=records.file_identity(data_file))


def train_record_path(output_dir: str, s: FeatureSettings, proc_id) -> str:
    return os.path.join(output_dir, f"{s.prefix()}.{proc_id}.slen-{s.max_seq_length}.qlen-{s.max_query_length}"
                                    ".train.tf_record")


def eval_feature_path(output_dir: str, s: FeatureSettings) -> str:
    return os.path.join(output_dir, f"{s.prefix()}.slen-{s.max_seq_length}.qlen-{s.max_query_length}"
                                    ".eval.features.json")


def feature_row(f: SquadFeature) -> dict:
    """A training feature as the columns of its record (``feature_spec``)."""
    return dict(unique_ids=[f.unique_id], input_ids=f.input_ids, padding_mask=np.asarray(f.padding_mask, np.float32),
                p_mask=np.asarray(f.p_mask, np.float32), segment_ids=f.segment_ids, cls_index=[f.cls_index],
                start_positions=[f.start_position], end_positions=[f.end_position],
                is_impossible=np.float32(f.is_impossible))


def feature_spec(seq_length: int) -> dict:
    """The columns of a training record (``records.parse_fn``)."""
    seq = [seq_length]
    return dict(unique_ids=([], tf.int64), input_ids=(seq, tf.int64), padding_mask=(seq, tf.float32),
                p_mask=(seq, tf.float32), segment_ids=(seq, tf.int64), cls_index=([], tf.int64),
                start_positions=([], tf.int64), end_positions=([], tf.int64), is_impossible=([], tf.float32))


def prepare_train_shard(train_file: str, output_dir: str, s: FeatureSettings, num_proc: int = 1, proc_id: int = 0,
                        overwrite: bool = False, seed: int = 0) -> dict:
    """Writes (or reuses) the training TFRecord shard ``proc_id`` of ``num_proc`` (examples ``proc_id::num_proc``
    as the original's ``--do_prepro``) and returns its metadata (counts and skipped examples)."""
    path = train_record_path(output_dir, s, proc_id)

    def encode():
        squad = read_squad_file(train_file, is_training=True)
        examples = squad.examples[proc_id::num_proc]
        random.Random(seed + proc_id).shuffle(examples)  # pre-shuffle, as the original, so a small buffer suffices
        tokenizer = XLNetTokenizer(s.spiece_model_file, lower=s.uncased)
        features, skipped = convert_examples_to_features(
            examples, tokenizer, s.max_seq_length, s.doc_stride, s.max_query_length, is_training=True,
            unique_id_base=UNIQUE_ID_BASE + proc_id * 100_000_000, source=train_file)
        if not features:
            raise SquadFileError(f"{train_file}: no training features (shard {proc_id}/{num_proc}; skipped: "
                                 f"{_counts(skipped) or 'none'})")
        skipped = {**squad.skipped, **skipped}
        impossible = sum(f.is_impossible for f in features)
        logging.info("%s: %d examples -> %d features (%d labelled no-answer) in %s; skipped: %s", train_file,
                     len(examples), len(features), impossible, path, _counts(skipped) or "none")
        # The query is cut to max_query_length inside squad_lib_sp, unseen here: no feature counts as truncated.
        return (dict(source=train_file, num_examples=len(examples), num_impossible=impossible, skipped=skipped),
                ((feature_row(f), False) for f in features))

    expected = dict(s.expected(train_file, "train"), num_proc=num_proc, proc_id=proc_id)
    return records.cache_features(path, expected, overwrite, encode)[1]


def train_shards(output_dir: str, s: FeatureSettings) -> list[str]:
    """The training shards written for these settings; warns if some of a --num_proc split are missing."""
    paths = io_utils.glob(train_record_path(output_dir, s, "*"))
    expected = {records.read_meta(path).get("num_proc", 1) for path in paths if io_utils.exists(path + ".json")}
    if expected and len(paths) < max(expected):
        logging.warning("%s: %d of %d preprocessing shards present; training on those", output_dir, len(paths),
                        max(expected))
    return paths


def training_shards(output_dir: str, train_file: str, s: FeatureSettings, seed: int = 0,
                    overwrite: bool = False) -> list[str]:
    """The training shards a run trains on. Its own cache (one process, as ``prepare_train_shard`` writes it
    without --num_proc) is reused, or written now where it is absent, --overwrite_data, of another format or of
    other input files (logged, as every family's caches: ``records.cache_features``). A ``--do_prepro --num_proc``
    split is only checked (``check_train_shards``): its processes wrote it, and one run cannot write it again.
    Shards of other settings are refused either way."""
    shards = train_shards(output_dir, s)
    if overwrite:
        for path in shards:
            for p in (path, path + ".json"):
                io_utils.remove(p)
        shards = []
    if len(shards) <= 1 and all(records.read_meta(p).get("num_proc", 1) == 1 for p in shards):
        prepare_train_shard(train_file, output_dir, s, seed=seed)
        return train_shards(output_dir, s)
    check_train_shards(shards, train_file, s)
    return shards


def check_train_shards(paths: list, train_file: str, s: FeatureSettings) -> None:
    """``InputError`` unless every shard at ``paths`` holds ``train_file``'s features for these settings: a
    training run cannot rebuild the shards of a ``--do_prepro --num_proc`` split, so it says how to."""
    expected = s.expected(train_file, "train")
    for path in paths:
        meta = records.read_meta(path)
        if meta.get("cache_version") != CACHE_VERSION:
            raise InputError(f"{path}: features cached in another format (version {meta.get('cache_version')}, "
                             f"now {CACHE_VERSION}); rerun --do_prepro or pass --overwrite_data")
        stale = records.differences(meta, expected)
        if stale:
            raise InputError(f"{path}: cached features differ from the current run in {', '.join(stale)}; "
                             "rerun --do_prepro or pass --overwrite_data")


def prepare_eval_features(predict_file: str, output_dir: str, s: FeatureSettings, overwrite: bool = False):
    """``(SquadFile, features, skipped)`` of the evaluation file, with the features cached as JSON."""
    squad = read_squad_file(predict_file, is_training=False)
    path = eval_feature_path(output_dir, s)
    expected = s.expected(predict_file, "eval")
    if not overwrite and records.cached_meta(path, expected) is not None:
        features, skipped = _read_eval_features(path)
        logging.info("using cached eval features %s (%d features)", path, len(features))
    else:
        for stale in (path, path + ".json"):  # a failed encoding below must not leave an outdated cache behind
            io_utils.remove(stale)
        tokenizer = XLNetTokenizer(s.spiece_model_file, lower=s.uncased)
        features, skipped = convert_examples_to_features(
            squad.examples, tokenizer, s.max_seq_length, s.doc_stride, s.max_query_length, is_training=False,
            source=predict_file)
        _write_eval_features(path, features, skipped)
        write_json_atomic(path + ".json", dict(expected, source=predict_file, num_examples=len(squad.examples),
                                               num_records=len(features)))
    skipped = {**squad.skipped, **skipped}
    logging.info("%s: %d examples -> %d features; skipped: %s", predict_file, len(squad.examples), len(features),
                 _counts(skipped) or "none")
    return squad, features, skipped


def _write_eval_features(path: str, features: list, skipped: dict) -> None:
    rows = []
    for f in features:
        row = dataclasses.asdict(f)
        row["token_is_max_context"] = [[int(k), bool(v)] for k, v in f.token_is_max_context.items()]  # int keys
        rows.append(row)
    atomic_write(path, lambda f: json.dump({"features": rows, "skipped": skipped}, f, default=_plain))


def _plain(value):
    """NumPy scalars in a feature, as JSON numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _read_eval_features(path: str) -> tuple:
    try:
        with io_utils.open(path, encoding="utf-8") as f:
            cached = json.load(f)
        features = []
        for row in cached["features"]:
            row["token_is_max_context"] = {int(k): bool(v) for k, v in row["token_is_max_context"]}
            features.append(SquadFeature(**row))
        return features, dict(cached["skipped"])
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: damaged feature cache ({e}); delete it (or pass --overwrite_data)") from None


# ---------------------------------------------------------------------------------------------------------------
# tf.data pipelines.


def train_dataset(paths: Iterable[str], batch_size: int, seq_length: int,
                  input_context: Optional[tf.distribute.InputContext] = None, shuffle_buffer: int = 2048,
                  seed: int = 0, start_step: int = 0) -> tf.data.Dataset:
    """Shuffled, repeated batches of ``batch_size`` (per replica) from the training shards (their manifests give
    the record counts), from the batch optimizer step ``start_step`` takes on (``records.shuffled_epochs``: a
    resumed run continues the uninterrupted run's order)."""
    from xlnet_tf.finetuning.records import pipeline_position, shuffled_epochs

    paths = list(paths)
    counts = [num_train_features(path) for path in paths]
    pipeline, pipelines, skip = pipeline_position(input_context, batch_size, start_step)
    ds = tf.data.Dataset.from_tensor_slices(paths)
    interleave = dict(map_func=tf.data.TFRecordDataset, cycle_length=min(8, len(paths)))
    if pipelines > 1 and len(paths) >= pipelines:  # whole shards per pipeline
        ds = ds.shard(pipelines, pipeline).interleave(**interleave)
        mine = sum(counts[pipeline::pipelines])
    else:
        ds = ds.interleave(**interleave)
        if pipelines > 1:
            ds = ds.shard(pipelines, pipeline)
        mine = len(range(pipeline, sum(counts), pipelines))
    ds = shuffled_epochs(ds, mine, shuffle_buffer, seed, skip, pipeline)
    ds = ds.map(records.parse_fn(feature_spec(seq_length)), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def num_train_features(path: str) -> int:
    """The number of records of training shard ``path``, from its metadata (``prepare_train_shard``)."""
    return int(records.read_meta(path, "num_records")["num_records"])


INFERENCE_KEYS = ("input_ids", "segment_ids", "padding_mask", "p_mask", "cls_index")


def eval_dataset(features: list, batch_size: int) -> tf.data.Dataset:
    """Global batches of the evaluation features, in order, padded to whole batches (static shapes: what XLA and
    TPUs need) with copies of the first feature marked ``feature_index`` -1; real rows carry their index in
    ``features`` (int32), by which the host matches results back to ``unique_ids`` (``results_by_unique_id``): the
    int64 ids stay on the host. No features: no batches."""
    count = len(features)
    rows = list(range(count)) + [0] * (-count % batch_size if count else 0)

    def column(name, dtype):
        return np.array([getattr(features[i], name) for i in rows], dtype) if rows else np.zeros([0], dtype)

    columns = {
        "feature_index": np.array(list(range(count)) + [-1] * (len(rows) - count), np.int32),
        "input_ids": column("input_ids", np.int32),
        "segment_ids": column("segment_ids", np.int32),
        "padding_mask": column("padding_mask", np.float32),
        "p_mask": column("p_mask", np.float32),
        "cls_index": column("cls_index", np.int32),
    }
    return tf.data.Dataset.from_tensor_slices(columns).batch(batch_size, drop_remainder=True)


def results_by_unique_id(features: list, results: dict) -> dict:
    """``results`` of ``eval_dataset``'s batches (arrays with a ``feature_index`` column) without the padding rows,
    with the features' ``unique_ids`` (int64, on the host) added: what ``squad_postprocess.compute_predictions``
    takes."""
    index = np.asarray(results["feature_index"]).reshape(-1).astype(np.int64)
    real = index >= 0
    out = {k: np.asarray(v)[real] for k, v in results.items() if k != "feature_index"}
    out["unique_ids"] = np.array([features[i].unique_id for i in index[real]], np.int64)
    return out
