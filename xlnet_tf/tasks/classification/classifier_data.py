"""GLUE (official TSV layouts), IMDB and Yelp data for XLNet sequence classification / regression.

tf-models-official's GLUE processors (``official.nlp.data.classifier_data_lib``) now read TFDS, not the GLUE
TSV files users download, and ``MnliProcessor`` even calls ``tfds.load`` (a download) when constructed. So the
label sets, task names and ``InputExample`` come from the library, and the files are read here: the TSV layouts
with column positions per task and split as in the official GLUE files (and BERT/XLNet's processors), each row
checked, and aclImdb's directory layout as ``ImdbProcessor`` reads it (which names no file that is not UTF-8).

Headers (``_header_columns``): one naming all the layout's columns is read by name; a first row that is data, or
a header naming some of the layout's columns elsewhere, is an error naming what the layout expects.

Row problems: a row with the wrong number of columns (the header's; in a file without one, the layout's), a CSV
row running over lines (an unclosed quote), a TSV row holding a carriage return or an empty text (IMDB: an empty
review) is *skipped* and counted (with its file and line); text that is not UTF-8 or a label outside the task's
label set (or a regression label that is not a number) is an *error* naming the file and line, since it means
wrong data or a wrong --task_name.

The test split is the exception: its predictions are a submission (GLUE's server wants one per test row, in the
file's order), so none of its rows is skipped. A row with an empty text is predicted from the empty text (counted
and logged); a row that cannot be read (the wrong number of columns, a carriage return inside it, an unclosed
quote; JSON lines: no text string, a lone surrogate) is an *error* naming the file and line.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import math
import os
import sys
from typing import Optional

from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.io_utils import GZIP_MAGIC
from xlnet_tf.finetuning import records
from xlnet_tf.errors import InputError, MissingInputError


@dataclasses.dataclass(frozen=True)
class Columns:
    """Column positions in a TSV row (negative = from the end); ``index`` is the GLUE submission id column;
    ``names``: the official header's names of the columns used, in the order text_a, text_b, label, index."""
    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None
    index: Optional[int] = None
    names: tuple = ()

    def roles(self) -> list:
        """``(role, position)`` of the columns used, in the order of ``names``."""
        return [(r, getattr(self, r)) for r in ("text_a", "text_b", "label", "index") if getattr(self, r) is not None]


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    library_processor: str  # class name in official.nlp.data.classifier_data_lib (labels, display name)
    files: dict  # split -> file name under data_dir
    labeled: Optional[Columns] = None  # train/dev layout
    test: Optional[Columns] = None
    header: tuple = ("train", "dev", "test")  # splits whose file starts with a header row
    submission: str = ""  # GLUE submission file name (without .tsv)
    metrics: tuple = ("accuracy",)
    labels: Optional[tuple] = None  # only for tasks the library lacks
    reader: str = "tsv"  # tsv | imdb | csv | jsonl
    label_range: Optional[tuple] = None  # regression: the scores' documented range (inclusive)
    head_scope: Optional[str] = None  # the classifier head's scope when not the task's name (--cls_scope overrides)

    @property
    def regression(self) -> bool:
        return self.library_processor == "StsBProcessor"

    def label_list(self) -> Optional[list]:
        if self.labels is not None:
            return list(self.labels)
        if self.regression:
            return None
        from official.nlp.data import classifier_data_lib as lib
        # get_labels does not use the instance; MnliProcessor must not be constructed (it calls tfds.load).
        return list(getattr(lib, self.library_processor).get_labels(None))


def _glue(name, processor, files, labeled, test, submission, metrics=("accuracy",), header=("train", "dev", "test"),
          label_range=None):
    return TaskSpec(name, processor, files, labeled, test, header, submission, metrics, label_range=label_range)


BROWN_GENRES = ("press: reportage", "press: editorial", "press: reviews", "religion", "skill and hobbies",
                "popular lore", "belles-lettres", "miscellaneous: government & house organs", "learned",
                "fiction: general", "fiction: mystery", "fiction: science", "fiction: adventure", "fiction: romance",
                "humor")
_GLUE_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}


def _pair(label: str, first: int = 1) -> Columns:
    return Columns(first, first + 1, -1, names=("sentence1", "sentence2", label))


def _pair_test(first: int = 1) -> Columns:
    return Columns(first, first + 1, None, 0, ("sentence1", "sentence2", "index"))


TASKS = {t.name: t for t in [
    # CoLA train/dev: source, label, original label, sentence (no header); test: index, sentence (header).
    _glue("cola", "ColaProcessor", _GLUE_FILES, Columns(3, None, 1), Columns(1, None, None, 0, ("sentence", "index")),
          "CoLA", ("mcc", "accuracy"), header=("test",)),
    _glue("sst-2", "SstProcessor", _GLUE_FILES, Columns(0, None, 1, names=("sentence", "label")),
          Columns(1, None, None, 0, ("sentence", "index")), "SST-2"),
    # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String.
    _glue("mrpc", "MrpcProcessor", _GLUE_FILES, Columns(3, 4, 0, names=("#1 String", "#2 String", "Quality")),
          Columns(3, 4, None, 0, ("#1 String", "#2 String", "index")), "MRPC", ("f1", "accuracy")),
    # STS-B: index genre filename year old_index source1 source2 sentence1 sentence2 score.
    _glue("sts-b", "StsBProcessor", _GLUE_FILES, Columns(7, 8, -1, names=("sentence1", "sentence2", "score")),
          Columns(7, 8, None, 0, ("sentence1", "sentence2", "index")), "STS-B", ("pearson", "spearman"),
          label_range=(0.0, 5.0)),
    # QQP: id qid1 qid2 question1 question2 is_duplicate; test: id question1 question2.
    _glue("qqp", "QqpProcessor", _GLUE_FILES, Columns(3, 4, 5, names=("question1", "question2", "is_duplicate")),
          Columns(1, 2, None, 0, ("question1", "question2", "id")), "QQP", ("f1", "accuracy")),
    # MNLI: ... sentence1(8) sentence2(9) [label1 ... ] gold_label(last).
    _glue("mnli_matched", "MnliProcessor", {"train": "train.tsv", "dev": "dev_matched.tsv",
                                            "test": "test_matched.tsv"},
          _pair("gold_label", 8), _pair_test(8), "MNLI-m"),
    _glue("mnli_mismatched", "MnliProcessor", {"train": "train.tsv", "dev": "dev_mismatched.tsv",
                                               "test": "test_mismatched.tsv"},
          _pair("gold_label", 8), _pair_test(8), "MNLI-mm"),
    # GLUE's diagnostic set (AX): MNLI's classes on sentence pairs, a test file only (index sentence1 sentence2),
    # which a GLUE submission needs predicted (AX.tsv) by the MNLI model: --task_name=ax --model_dir=<an MNLI run>.
    # Its head is MNLI's: a release-format (TF1) MNLI checkpoint holds classification_mnli_matched/.
    TaskSpec("ax", "MnliProcessor", {"test": "diagnostic.tsv"}, test=_pair_test(), header=("test",),
             submission="AX", head_scope="mnli_matched"),
    _glue("qnli", "QnliProcessor", _GLUE_FILES, Columns(1, 2, -1, names=("question", "sentence", "label")),
          Columns(1, 2, None, 0, ("question", "sentence", "index")), "QNLI"),
    _glue("rte", "RteProcessor", _GLUE_FILES, _pair("label"), _pair_test(), "RTE"),
    _glue("wnli", "WnliProcessor", _GLUE_FILES, _pair("label"), _pair_test(), "WNLI"),
    # IMDB: aclImdb/{train,test}/{pos,neg}/*.txt (the library's ImdbProcessor); dev = test as in the original.
    TaskSpec("imdb", "ImdbProcessor", {"train": "train", "dev": "test"}, reader="imdb", submission="IMDB"),
    # Yelp review full / polarity CSVs: "label","text" with labels 1..5 / 1..2; dev = test.csv (original).
    TaskSpec("yelp5", "", {"train": "train.csv", "dev": "test.csv"}, Columns(1, None, 0), header=(),
             labels=("1", "2", "3", "4", "5"), reader="csv", submission="Yelp5"),
    TaskSpec("yelp2", "", {"train": "train.csv", "dev": "test.csv"}, Columns(1, None, 0), header=(),
             labels=("1", "2"), reader="csv", submission="Yelp2"),
    # Brown Corpus genres of whole documents (~2,000 words; --long_document=memory reads past the first segment):
    # JSON lines {"id", "text", "label"} (data/README.md).
    TaskSpec("brown_genre", "", {"train": "genre_train.jsonl", "dev": "genre_dev.jsonl", "test": "genre_test.jsonl"},
             labels=BROWN_GENRES, reader="jsonl", submission="brown_genre"),
]}
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "diagnostic": "ax", "mnli": "mnli_matched", "mnli-m": "mnli_matched",
           "mnli-mm": "mnli_mismatched", "imdb-sentiment": "imdb"}


def reads_pairs(task: TaskSpec) -> bool:
    """Whether the task's examples are sentence pairs: its files have a second text column (a test-only task,
    GLUE's diagnostic, has only its test layout)."""
    columns = task.labeled or task.test
    return columns is not None and columns.text_b is not None


def get_task(name: str) -> TaskSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        raise InputError(f"--task_name={name!r}: unknown task; known: {', '.join(sorted(TASKS))}, race "
                         f"(aliases: {', '.join(sorted(ALIASES))})")
    return TASKS[key]


# The format of prepare_features' cache; another is encoded again (records.cached_meta), never reused. 2: the test
# split keeps a row with an empty text (1, unnamed: skipped it, and a cache of a test file holding one is short).
CACHE_VERSION = 2

TEST_ROWS_NOT_SKIPPED = ("a test row cannot be skipped: the submission needs one prediction per test row, in the "
                         "file's order; fix the row")


@dataclasses.dataclass
class ExampleSet:
    """Examples of one split (``tf-models`` ``InputExample``s; ``example_id`` holds 'file:line'), the rows skipped
    (with reasons) and the file read."""
    examples: list
    skipped: list
    source: str


def _decoded_lines(path: str, f):
    """The lines of the binary file ``f`` as text; a UTF-8 byte-order mark (written by some spreadsheet tools)
    is dropped from the first, and a line that is not UTF-8 is an error naming its line and column: the text
    reader would only give a byte position in the file."""
    for line_no, raw in enumerate(f, start=1):
        if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            hint = " (a gzip file? decompress it first)" if line_no == 1 and raw.startswith(GZIP_MAGIC) else ""
            raise InputError(f"{path}:{line_no}: not UTF-8 text (byte {e.start + 1} of the line: "
                             f"{e.reason}){hint}") from None


def _read_rows(path: str, delimiter: str):
    """(first line, last line, row or the reason it is unreadable) for every row; the GLUE files are TSV without
    quoting (the official readers' csv ``quotechar=None``); Yelp CSVs use standard quoting, so a row can run over
    lines (an unclosed quote)."""
    csv.field_size_limit(sys.maxsize)
    with io_utils.open(path, "rb") as f:
        lines = _decoded_lines(path, f)
        if delimiter == "\t":
            for number, line in enumerate(lines, start=1):
                cells, problem = io_utils.tsv_cells(line)
                if problem and not line.endswith("\n") and number == 1:
                    raise InputError(f"{path}:1: a carriage return (\\r) inside the file's only line "
                                     f"({io_utils.CR_LINE_ENDINGS})")
                yield number, number, cells if cells is not None else problem
            return
        reader = csv.reader(lines)
        last = 0
        try:
            for row in reader:
                yield last + 1, reader.line_num, row
                last = reader.line_num
        except csv.Error as e:
            why = "a carriage return (\\r) inside a row: mixed line endings" if "new-line" in str(e) else str(e)
            raise InputError(f"{path}:{reader.line_num}: malformed CSV ({why})") from None


def _looks_like_data(task: TaskSpec, columns: Columns, labels: Optional[list], row: list) -> str:
    """Why a file's first row is taken for data rather than its header ("" if not): its label cell holds one of
    the task's labels (a number for a regression), or its index cell a number."""
    def cell(position):
        return row[position].strip() if position is not None and -len(row) <= position < len(row) else None

    label, index = cell(columns.label), cell(columns.index)
    if label is not None:
        if task.regression:
            try:
                float(label)
                return f"its label column holds {label!r}, a score"
            except ValueError:
                pass
        elif label in labels:
            return f"its label column holds {label!r}, one of the labels"
    if index is not None and index.isdigit():
        return f"its index column holds {index!r}, an id"
    return ""


def _header_columns(task: TaskSpec, split: str, columns: Columns, labels: Optional[list], header: list,
                    where: str) -> Columns:
    """The layout of a file whose first row is ``header``: a header naming every column of the official layout
    is read by name (so one that orders them otherwise is read as it says); one naming some of them elsewhere,
    or a first row that is data (a file without a header would lose its first example), is an error naming
    what the layout expects; any other header (one of the user's own names) keeps the official positions."""
    names = [cell.strip() for cell in header]
    roles = columns.roles()
    layout = ", ".join(n for n in _layout_order(columns))
    twice = sorted({n for n in names if n in columns.names and names.count(n) > 1})
    if twice:
        raise InputError(f"{where}: the header names column(s) {', '.join(map(repr, twice))} more than once")
    if all(n in names for n in columns.names):
        return dataclasses.replace(columns, **{r: names.index(n) for (r, _), n in zip(roles, columns.names)})
    moved = [n for (_, position), n in zip(roles, columns.names)
             if n in names and names.index(n) != (position if position >= 0 else len(names) + position)]
    if moved:
        raise InputError(f"{where}: the header names {', '.join(map(repr, moved))} but not every column "
                         f"the {task.name} {split} layout needs ({layout}) (give them all by name, or none)")
    data = _looks_like_data(task, columns, labels, header)
    if data:
        raise InputError(f"{where}: the first row looks like data, not a header ({data}); {task.name} {split} files "
                         f"start with a header row (the official one: {layout}); add one")
    return columns


def _layout_order(columns: Columns) -> list:
    """The names of the columns used, in the order of their positions in the official layout."""
    return [n for _, n in sorted(zip((p if p >= 0 else 1 << 20 for _, p in columns.roles()), columns.names))]


def _column_word(n: int) -> str:
    return f"{n} column{'' if n == 1 else 's'}"


def read_examples(task: TaskSpec, data_dir: str, split: str) -> ExampleSet:
    """Reads ``split`` (train, dev, test) of ``task`` from ``data_dir`` in its official layout."""
    from official.nlp.data import classifier_data_lib as lib

    if split not in task.files:
        raise InputError(f"task {task.name} has no {split!r} split (it has: {', '.join(task.files)})")
    path = os.path.join(data_dir, task.files[split])
    if not io_utils.exists(path):
        raise MissingInputError(f"{path}: {task.name} {split} data not found (expected the official layout: "
                                f"{', '.join(task.files.values())} under --data_dir)")
    if task.reader == "imdb":
        return _read_imdb(path)

    labels = task.label_list()
    if task.reader == "jsonl":
        return _read_jsonl(path, labels, split != "test")
    columns = task.test if split == "test" else task.labeled
    labeled = split != "test"
    has_header = split in task.header
    # Every data row must have the header's columns; a file without a header (CoLA train/dev, Yelp) has exactly
    # the columns its layout names, so an extra tab or an unquoted comma is not read as a shorter text.
    width = None
    needed = 1 + max(p for _, p in columns.roles() if p >= 0)
    examples, skipped, empty = [], [], []

    def skip(problem: str) -> None:
        if not labeled:  # the test split's predictions are a submission: a skipped row would leave it short
            raise InputError(f"{problem}; {TEST_ROWS_NOT_SKIPPED}")
        skipped.append(problem)

    for line, end, row in _read_rows(path, "\t" if task.reader == "tsv" else ","):
        where = f"{path}:{line}"
        if isinstance(row, str):
            if has_header and width is None:
                raise InputError(f"{where}: a carriage return (\\r) inside the header ({io_utils.CR_LINE_ENDINGS})")
            skip(f"{where}: {row}")
            continue
        if not any(cell.strip() for cell in row):  # a blank line (trailing ones are common): no row, no skip
            continue
        if has_header and width is None:
            columns = _header_columns(task, split, columns, labels, row, where)
            width = len(row)
            needed = 1 + max(p for _, p in columns.roles() if p >= 0)
            continue
        if end != line:  # Yelp CSVs write a review's newlines as \n: a real one is an unclosed quote's doing
            skip(f"{where}: a quoted field runs on to line {end} (an unclosed quote?)"
                 + (f"; the rows of lines {line}-{end} are skipped" if labeled else ""))
            continue
        if width is not None and len(row) != width:
            skip(f"{where}: {_column_word(len(row))}, the header has {width}")
            continue
        if len(row) < needed or (width is None and len(row) != needed):
            names = f" ({', '.join(_layout_order(columns))})" if columns.names else ""
            skip(f"{where}: {_column_word(len(row))}, the {task.name} {split} layout needs {needed}{names}")
            continue
        text_a = row[columns.text_a].strip()
        if task.reader == "csv":  # Yelp CSVs escape newlines as a literal backslash-n
            text_a = text_a.replace("\\n", " ")
        text_b = row[columns.text_b].strip() if columns.text_b is not None else None
        if not text_a or (columns.text_b is not None and not text_b):
            if labeled:
                skipped.append(f"{where}: empty text")
                continue
            empty.append(where)  # a test row is predicted all the same: encode_example reads "" as no tokens
        label = None
        if labeled:
            raw = row[columns.label].strip()
            if task.regression:
                try:
                    label = float(raw)
                except ValueError:
                    raise InputError(f"{where}: label {raw!r} is not a number ({task.name} is a regression "
                                     "task)") from None
                low, high = task.label_range or (-math.inf, math.inf)
                if not (math.isfinite(label) and low <= label <= high):
                    raise InputError(f"{where}: score {raw!r} is outside {task.name}'s range [{low:g}, {high:g}] "
                                     "(a corrupted file, or a wrong --task_name?)")
            else:
                if raw not in labels:
                    raise InputError(f"{where}: label {raw!r} is not in task {task.name}'s label set {labels} "
                                     "(wrong --task_name or a corrupted file?)")
                label = raw
        guid = row[columns.index].strip() if columns.index is not None else str(len(examples))
        examples.append(lib.InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label, example_id=where))
    if skipped:
        logging.warning("%s: skipped %d malformed row(s), e.g. %s", path, len(skipped), "; ".join(skipped[:3]))
    _log_empty_test_texts(path, empty)
    return ExampleSet(examples, skipped, path)


def _log_empty_test_texts(path: str, empty: list) -> None:
    if empty:
        logging.warning("%s: %d test row(s) with an empty text, predicted from the empty text (the submission "
                        "needs every row), e.g. %s", path, len(empty), ", ".join(empty[:3]))


def _read_imdb(path: str) -> ExampleSet:
    """aclImdb's ``{neg,pos}/*.txt`` under ``path``, one review a file, as ``ImdbProcessor`` reads them (text
    stripped, ``<br />`` a space), in file-name order. Its reader gave a bare UnicodeDecodeError naming no file and
    kept empty reviews: here a file that is not UTF-8 is an error naming the file and line (as the TSV reader) and
    an empty review is skipped and counted."""
    from official.nlp.data import classifier_data_lib as lib

    examples, skipped = [], []
    for label in ("neg", "pos"):
        folder = os.path.join(path, label)
        for name in io_utils.listdir(folder):
            review = os.path.join(folder, name)
            if not name.endswith("txt"):
                continue
            with io_utils.open(review, "rb") as f:
                text = "".join(_decoded_lines(review, f)).strip().replace("<br />", " ")
            if not text:
                skipped.append(f"{review}: empty review")
                continue
            i = len(examples)
            examples.append(lib.InputExample(guid=str(i), text_a=text, text_b=None, label=label,
                                             example_id=review))
    if skipped:
        logging.warning("%s: skipped %d empty review(s), e.g. %s", path, len(skipped), "; ".join(skipped[:3]))
    return ExampleSet(examples, skipped, path)


def _read_jsonl(path: str, labels: list, labeled: bool) -> ExampleSet:
    """JSON lines ``{"id", "text", "label"}`` (``id`` optional: the example's number); the label is required in
    labelled splits. A line that is no JSON object is an error; one without text, or with a lone surrogate (JSON's
    "\\ud800", no Unicode) in a value, is skipped, except in the test split (a submission: one prediction per line),
    where an empty or blank text is predicted and a line without a text string or with a lone surrogate is an
    error."""
    from official.nlp.data import classifier_data_lib as lib

    examples, skipped, empty = [], [], []
    for line_number, row in io_utils.read_jsonl(path):
        where = f"{path}:{line_number}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: not a JSON object")
        text = row.get("text")
        bad = io_utils.surrogate_keys(row)
        problem = ""
        if not isinstance(text, str) or (labeled and not text.strip()):
            problem = f"{where}: no text"
        elif bad:
            problem = f"{where}: {', '.join(map(repr, bad))} holds a lone surrogate (not valid Unicode)"
        if problem:
            if not labeled:  # a submission's line (see read_examples)
                raise InputError(f"{problem}; {TEST_ROWS_NOT_SKIPPED}")
            skipped.append(problem)
            continue
        if not text.strip():
            empty.append(where)  # a test line is predicted all the same (see read_examples)
        label = row.get("label")
        if labeled and label not in labels:
            raise InputError(f"{where}: label {label!r} is not in the task's label set {labels} (wrong "
                             "--task_name or a corrupted file?)")
        guid = str(row.get("id", len(examples)))
        examples.append(lib.InputExample(guid=guid, text_a=text, text_b=None,
                                         label=label if labeled else None, example_id=where))
    if skipped:
        logging.warning("%s: skipped %d line(s) without usable text, e.g. %s", path, len(skipped),
                        "; ".join(skipped[:3]))
    _log_empty_test_texts(path, empty)
    return ExampleSet(examples, skipped, path)


def truncate_pair(tokens_a: list, tokens_b: Optional[list], max_tokens: int) -> bool:
    """Pops tokens from the end of the longer of A/B until they fit (in place); True if anything was cut."""
    if tokens_b is None:
        cut = len(tokens_a) > max_tokens
        del tokens_a[max_tokens:]
        return cut
    cut = False
    while len(tokens_a) + len(tokens_b) > max_tokens:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
        cut = True
    return cut


def encode_example(tokenizer, example, max_seq_length: int):
    """(input_ids, segment_ids, padding_mask, truncated) of one example in XLNet's layout."""
    tokens_a = tokenizer.encode_ids(example.text_a)
    tokens_b = tokenizer.encode_ids(example.text_b) if example.text_b is not None else None
    budget = max_seq_length - (3 if tokens_b is not None else 2)
    truncated = truncate_pair(tokens_a, tokens_b, budget)
    return (*records.pack_sequence(tokens_a, tokens_b, max_seq_length), truncated)


def feature_spec(max_seq_length: int, regression: bool) -> dict:
    import tensorflow as tf
    return {"input_ids": ([max_seq_length], tf.int64), "segment_ids": ([max_seq_length], tf.int64),
            "padding_mask": ([max_seq_length], tf.float32),
            "label": ([], tf.float32 if regression else tf.int64),
            "is_real_example": ([], tf.int64), "example_index": ([], tf.int64)}


def dummy_features(max_seq_length: int, regression: bool) -> dict:
    import numpy as np
    ids, segs, mask = records.dummy_sequence(max_seq_length)
    return {"input_ids": np.asarray(ids, np.int32), "segment_ids": np.asarray(segs, np.int32),
            "padding_mask": np.asarray(mask, np.float32),
            "label": np.float32(0) if regression else np.int32(0), "is_real_example": np.int32(0),
            "example_index": np.int32(-1)}


def cache_path(output_dir: str, task: TaskSpec, spiece_model_file: str, max_seq_length: int, split: str) -> str:
    """The original's ``{spm_basename}.len-{L}.{split}.tf_record`` naming, prefixed with the task."""
    return os.path.join(output_dir, f"{task.name}.{os.path.basename(spiece_model_file)}.len-{max_seq_length}."
                                    f"{split}.tf_record")


def prepare_features(task: TaskSpec, data_dir: str, split: str, tokenizer, max_seq_length: int,
                     output_dir: str, overwrite: bool = False) -> tuple[str, dict]:
    """Encodes ``split`` once into a TFRecord cache (reused unless ``overwrite``); returns (path, meta) with
    counts of examples, skipped rows and truncated examples, the label list and the examples' ids."""
    import numpy as np

    path = cache_path(output_dir, task, tokenizer.model_file, max_seq_length, split)
    expected = {"cache_version": CACHE_VERSION, "task": task.name, "split": split, "max_seq_length": max_seq_length,
                "uncased": tokenizer.lower, "spiece_sha256": tokenizer.fingerprint(),
                "inputs": records.file_identity(os.path.join(data_dir, task.files[split]))}

    def encode():
        data = read_examples(task, data_dir, split)
        labels = task.label_list()
        label_ids = {label: i for i, label in enumerate(labels or [])}

        def rows():
            for i, ex in enumerate(data.examples):
                ids, segs, mask, cut = encode_example(tokenizer, ex, max_seq_length)
                if ex.label is None:
                    label = np.float32(0) if task.regression else 0
                else:
                    label = np.float32(ex.label) if task.regression else label_ids[ex.label]
                yield {"input_ids": ids, "segment_ids": segs, "padding_mask": np.asarray(mask, np.float32),
                       "label": label, "is_real_example": 1, "example_index": i}, cut

        logging.info("encoding %d %s examples of %s into %s", len(data.examples), split, task.name, path)
        return dict(source=data.source, num_examples=len(data.examples), num_skipped=len(data.skipped),
                    skipped=data.skipped[:100], labels=labels, guids=[ex.guid for ex in data.examples]), rows()

    return records.cache_features(path, expected, overwrite, encode)
