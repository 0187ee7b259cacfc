"""Batch prediction's inputs, read once for every engine (``xlnet_tf.batch.prediction`` on one machine,
``xlnet_tf.batch.beam`` on a Beam runner): which files a glob names, their format, and their rows with file line
numbers and the reason a bad row cannot be used (module docstring of ``xlnet_tf.batch.prediction``). Local paths
and ``gs://`` through ``tf.io.gfile``."""

from __future__ import annotations

import codecs
import dataclasses
import json
from typing import Iterator, Optional

import tensorflow as tf

from xlnet_tf import io_utils, tasks
from xlnet_tf.batch import DEFAULT_MAX_LINE_BYTES
from xlnet_tf.errors import InputError
from xlnet_tf.io_utils import GZIP_MAGIC
from xlnet_tf.tasks.base import Row


@dataclasses.dataclass(frozen=True)
class Fields:
    """Where a row's text is: ``text_a`` (and ``text_b`` for pairs) and an optional ``id``, by column name (TSV
    header) or key (JSON Lines)."""
    text_a: str = "sentence"
    text_b: Optional[str] = None
    id: Optional[str] = None

    @classmethod
    def parse(cls, text_fields: str, id_field: Optional[str] = None, flag: str = "--text_fields") -> "Fields":
        names = [n.strip() for n in (text_fields or "").split(",")]
        if not 1 <= len(names) <= 2 or not all(names):
            raise InputError(f"{flag}={text_fields!r}: give one field name, or two for sentence pairs (a,b)")
        return cls(names[0], names[1] if len(names) > 1 else None, id_field or None)


def list_shards(input_glob: str, flag: str = "--input_glob") -> list:
    """The files matching the comma-separated globs of ``input_glob``, sorted, each once (a local file named two
    ways, e.g. through ``..`` or a link, too); an error naming the pattern if one matches nothing."""
    files, seen = [], set()
    for pattern in (p.strip() for p in (input_glob or "").split(",")):
        if not pattern:
            continue
        matched = sorted(f for f in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(f))
        if not matched:
            error = InputError if tf.io.gfile.isdir(pattern) else FileNotFoundError
            raise error(io_utils.no_file_message(pattern, flag, "*.tsv"))
        for f in matched:
            key = io_utils.canonical(f)
            if key not in seen:
                seen.add(key)
                files.append(f)
    if not files:
        raise InputError(f"{flag} is empty")
    return files


def family_formats() -> dict:
    """Input formats of the registered task families: name -> reader(path) of ``Row``s."""
    return {name: reader for family in tasks.families() if family.batch is not None
            for name, reader in family.batch.input_formats().items()}


def shard_format(path: str, input_format: str = "auto", family=None) -> str:
    """The format of a shard: ``input_format``, or by its name (a format of the model's task ``family``, e.g. a
    ``*.json`` file is a SQuAD file for a SQuAD model; else TSV or JSON Lines)."""
    if input_format != "auto":
        return input_format
    if path.endswith(".tsv"):
        return "tsv"
    own = family.batch.input_format_of(path) if family is not None and family.batch is not None else None
    if own:
        return own
    if path.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise InputError(f"{path}: unknown input format (name TSV files *.tsv, JSON Lines *.jsonl, SQuAD files *.json, "
                     "or set --input_format)")


def check_header(path: str, fmt: str, fields: Fields, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
    """A TSV shard's header must name the fields, and a shard must not be a gzip file: checked for every shard
    before any is predicted (inside the tf.data generator the error would surface as an opaque iterator error)."""
    if fmt not in ("tsv", "jsonl"):
        return
    for row in read_rows(path, fmt, fields, max_line_bytes):  # raises on a bad header or a gzip file, first
        break


def _lines(f, limit: int) -> Iterator[tuple]:
    """``(raw line, its size in bytes)`` of the binary file ``f``; a line longer than ``limit`` bytes (its newline
    not counted) as ``(None, size)`` (newline included, as the offsets count), read past in pieces, never held
    whole."""
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            if not raw:
                break
            size += len(raw)
        yield None, size


def read_rows(path: str, fmt: str, fields: Fields, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Row]:
    """Streams the rows of one shard, line by line (1-based line numbers; TSV line 1 is the header). Blank lines
    are ignored. A TSV header without a named field is an error naming the file. A row longer than
    ``max_line_bytes`` is skipped with its size (never read whole). A task family's own format (e.g. SQuAD files):
    its reader, whose rows carry their ids."""
    readers = family_formats()
    if fmt in readers:
        yield from readers[fmt](path)
        return
    wanted = [n for n in (fields.text_a, fields.text_b, fields.id) if n]
    columns = None
    offset = 0
    # Not GFile's line iterator: it deletes every carriage return, so "half\rline" was predicted as "halfline",
    # a CR-only file was one line, and the byte offsets of progress came short.
    with io_utils.open(path, "rb") as f:
        for line_no, (raw, size) in enumerate(_lines(f, max_line_bytes), start=1):
            offset += size
            if raw is None:
                if fmt == "tsv" and columns is None:
                    raise InputError(f"{path}:{line_no}: the header is {size} bytes, longer than --max_line_bytes="
                                     f"{max_line_bytes} (is it {fmt.upper()} text?)")
                yield Row(line_no, offset, problem=f"{size} bytes, longer than --max_line_bytes={max_line_bytes}")
                continue
            if line_no == 1:
                if raw.startswith(GZIP_MAGIC):
                    raise InputError(f"{path}: a gzip file, not {fmt.upper()} text: decompress it first")
                if raw.startswith(codecs.BOM_UTF8):  # a byte-order mark (spreadsheet exports): not text
                    raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield Row(line_no, offset, problem=f"not UTF-8 ({e.reason})")
                continue
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            if fmt == "tsv":
                cells, problem = io_utils.tsv_cells(line)
                if columns is None:
                    if problem:  # a CR-only file is one line: it was read as a header and no rows, "complete"
                        raise InputError(f"{path}:{line_no}: a carriage return (\\r) inside the header "
                                         f"({io_utils.CR_LINE_ENDINGS})")
                    names = [name.strip() for name in cells]
                    twice = [n for n in wanted if names.count(n) > 1]
                    if twice:  # the last one was read, silently
                        raise InputError(f"{path}:{line_no}: header names column {', '.join(map(repr, twice))} "
                                         "more than once")
                    columns = {name: i for i, name in enumerate(names)}
                    missing = [n for n in wanted if n not in columns]
                    if missing:
                        raise InputError(f"{path}:{line_no}: header has no column {', '.join(map(repr, missing))} "
                                         f"(columns: {', '.join(columns)}); set the text/id field flags")
                    width = len(cells)
                    continue
                if problem:
                    yield Row(line_no, offset, problem=problem)
                    continue
                if len(cells) != width:
                    yield Row(line_no, offset, problem=f"{len(cells)} columns, header has {width}")
                    continue
                values = {n: cells[columns[n]] for n in wanted}
            else:
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    yield Row(line_no, offset, problem=f"not valid JSON ({e.msg})")
                    continue
                if not isinstance(obj, dict):
                    yield Row(line_no, offset, problem="not a JSON object")
                    continue
                absent = [n for n in wanted if n not in obj]
                if absent:
                    yield Row(line_no, offset, problem=f"no {', '.join(map(repr, absent))}")
                    continue
                problem = _json_fields_problem(obj, [n for n in (fields.text_a, fields.text_b) if n], fields.id)
                if problem:
                    yield Row(line_no, offset, problem=problem)
                    continue
                values = {n: obj[n] if isinstance(obj[n], str) else str(obj[n]) for n in wanted}
            # Texts go to the model as written: a tagger's or SQuAD's character offsets count their spaces.
            text_a = values[fields.text_a]
            text_b = values[fields.text_b] if fields.text_b else ""
            if not text_a.strip() or (fields.text_b and not text_b.strip()):
                yield Row(line_no, offset, problem="empty text")
                continue
            yield Row(line_no, offset, text_a, text_b, values[fields.id].strip() if fields.id else "")


def _json_fields_problem(obj: dict, text_fields: list, id_field: str) -> str:
    """Why a JSON row's fields cannot be used ("" if they can): a text must be a string (predicting on the JSON text
    of 123, null or an object would be a silent wrong answer); an id a string or a number; no string may hold a
    lone surrogate ("\\ud800" is valid JSON but not Unicode TensorFlow can encode)."""
    for name in text_fields:
        if not isinstance(obj[name], str):
            kind = "null" if obj[name] is None else type(obj[name]).__name__
            return f"{name!r} is {kind}, not a string"
    if id_field and (isinstance(obj[id_field], bool) or not isinstance(obj[id_field], (str, int, float))):
        return f"{id_field!r} (the id) is {type(obj[id_field]).__name__}, not a string or number"
    for name in [*text_fields, id_field]:
        if name and isinstance(obj[name], str) and io_utils.lone_surrogate(obj[name]):
            return f"{name!r} holds a lone surrogate (not valid Unicode)"
    return ""
