"""Writes XLNet pretraining TFRecords from raw text, as the original ``data_utils.py`` but resumable and parallel.

    python -m xlnet_tf.cli.create_data --input_glob='corpus/*.txt' --spiece_model_file=spiece.model \\
        --save_dir=proc_data --seq_len=512 --reuse_len=256 --bsz_per_host=32 --num_core_per_host=8 \\
        --num_predict=85 --bi_data --num_workers=8

Input: text files, one sentence per line, a blank line between documents (``<eod>`` with ``--use_eod``).
Output in ``save_dir``: ``tfrecords/<split>-pass<P>-task<T>-<k>.tfrecord`` shards of whole host batches, a
``parts/`` JSON per task and ``manifest.json`` (every setting training must match, shards in stream order with
record counts). Record features (int64): ``input``, ``is_masked``, ``seg_id`` [seq_len], ``label`` [1]. There is
no ``target`` feature: for the permutation LM the target of a position is its own input token, which the reader
takes from ``input`` (the original stored next-token targets that only its unused LM variant needed).

How the stream is built (as the original): a task's files (``--task`` of ``--num_task``, files interleaved) are
tokenised, shuffled with seed ``100*task + pass_id`` and concatenated; the stream is cut into ``bsz_per_host``
parallel rows (``bi_data``: forward rows and their reversals, per core) and read in windows that slide by
``reuse_len``, so row r of host batch k+1 continues row r of host batch k (what the model's memory needs).

Robustness: a shard is written under a temporary name and renamed when complete; its sidecar JSON records the
settings, input fingerprint and size, so a rerun skips finished shards and rewrites missing or damaged ones (a
killed run resumes without duplicate or missing records). Each task's part lists the passes asked for, so the
manifest is complete only when all of them are written by every task. All randomness is seeded per host batch from
``(--seed, task, pass_id, batch index)``, so the output does not depend on ``--num_workers`` or on resuming.
Unreadable input (bad UTF-8, over-long lines, empty or unreadable files) is skipped and reported with file and
line number.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import logging as _pylogging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from typing import Optional

import numpy as np

from xlnet_tf import io_utils
from xlnet_tf.data import examples as ex
from xlnet_tf.data import manifest as mf
from xlnet_tf.errors import InputError
from xlnet_tf.progress_lines import Progress
from xlnet_tf.tokenization import EOD_ID, XLNetTokenizer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported by the shard writers
log = _pylogging.getLogger("xlnet_tf.data")
MAX_REPORTED = 100  # bad-input lines kept in the manifest (all are counted)
PROGRESS_EVERY_S = 10.0  # between the progress lines of a long step (tokenising a file, writing shards)


@dataclasses.dataclass(frozen=True)
class WriterConfig:
    input_glob: str
    sp_path: str
    save_dir: str
    settings: ex.ExampleSettings = ex.ExampleSettings()
    uncased: bool = False
    use_eod: bool = True
    pass_id: int = 0
    num_passes: int = 1  # passes pass_id, pass_id + 1, ...
    task: int = 0
    num_task: int = 1
    split: str = "train"
    seed: int = 0
    num_workers: int = 1
    batches_per_shard: int = 500
    max_line_bytes: int = 200_000
    min_shards: int = 1  # fewer batches per shard where the task's batches would fill fewer (input pipelines)

    def errors(self) -> list:
        """Every reason these settings cannot work, each naming the flag."""
        errors = self.settings.errors()
        if not 0 <= self.task < self.num_task:
            errors.append(f"--task={self.task} must be in [0, --num_task={self.num_task})")
        if self.pass_id < 0:
            errors.append(f"--pass_id={self.pass_id} must be >= 0")
        if self.num_passes < 1:
            errors.append(f"--num_passes={self.num_passes} must be >= 1")
        if self.num_workers < 1:
            errors.append(f"--num_workers={self.num_workers} must be >= 1")
        if self.batches_per_shard < 1:
            errors.append(f"--batches_per_shard={self.batches_per_shard} must be >= 1")
        if self.min_shards < 1:
            errors.append(f"min_shards={self.min_shards} must be >= 1")
        if self.max_line_bytes < 1:
            errors.append(f"--max_line_bytes={self.max_line_bytes} must be >= 1")
        errors += io_utils.unmatched_globs(self.input_glob, "--input_glob")
        if not self.sp_path or io_utils.probe(self.sp_path) is False:  # a URI: checked once TensorFlow loads
            errors.append(f"--spiece_model_file={self.sp_path!r}: SentencePiece model not found")
        return errors

    def validate(self) -> None:
        """Raises an InputError listing ``errors()`` (then the example settings' warnings)."""
        errors = self.errors()
        if errors:
            raise InputError("impossible data settings:\n  " + "\n  ".join(errors))
        self.settings.validate()


# ----------------------------------------------------------------------------------------------------------
# Tokenisation
# ----------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class TokenizedFile:
    path: str
    tokens: np.ndarray       # int32
    sent_ids: np.ndarray     # bool, flips at every sentence; <eod> joins its document's last sentence
    sha256: str
    lines: int = 0
    bad: list = dataclasses.field(default_factory=list)  # "path:line: reason"
    num_bad: int = 0


def encode_line(tokenizer: XLNetTokenizer, line: str) -> list[int]:
    """``tokenizer.encode_ids`` with a fast path: SentencePiece's ids as they are unless the digit-comma fix
    applies to one of them. (Decided on the ids, not the text: SentencePiece's normaliser deletes control
    characters, so "1\x01," encodes to the piece "▁1," although no comma follows a digit in the text.)"""
    text = tokenizer.preprocess(line)
    ids = tokenizer.sp.EncodeAsIds(text)
    if tokenizer.digit_comma_ids.isdisjoint(ids):
        return ids
    return tokenizer.encode_ids(text, preprocess=False)


def tokenize_file(path: str, tokenizer: XLNetTokenizer, use_eod: bool, max_line_bytes: int) -> TokenizedFile:
    """Tokenises one text file into (tokens, sent_ids), skipping and reporting lines it cannot use."""
    tokens, sids = array.array("i"), array.array("b")
    out = TokenizedFile(path, np.zeros(0, np.int32), np.zeros(0, bool), "")
    digest = hashlib.sha256()

    def bad(lineno: int, reason: str):
        out.num_bad += 1
        if len(out.bad) < MAX_REPORTED:
            out.bad.append(f"{path}:{lineno}: {reason}")
        if out.num_bad <= 10:
            log.warning("skipping %s:%d: %s", path, lineno, reason)

    sent_id = True

    def end_document():
        # One <eod> per document end (several blank lines in a row, or the end of the file, mark one end). It
        # carries the previous sentence's id, as in the original (which flipped the id twice around it).
        if use_eod and len(tokens) and tokens[-1] != EOD_ID:
            tokens.append(EOD_ID)
            sids.append(int(not sent_id))

    try:
        f = io_utils.open(path, "rb")
        size = io_utils.getsize(path)
    except Exception as e:  # noqa: BLE001  OSError, or tf.errors.OpError for a URI
        bad(0, f"cannot open file: {e}")
        return out
    # One big file takes minutes (~10 MB/s per process): say how far it is, as shard writing does.
    progress = Progress(f"tokenising {path}", size, "MB", PROGRESS_EVERY_S, scale=1e-6, log=log.info)
    with f:
        lineno = read = 0
        while True:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                break
            lineno += 1
            digest.update(raw)
            read += len(raw)
            if not lineno % 1000:  # a clock read per line would cost ~2% of the tokenising
                progress.advance(read - progress.done)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                # Read the rest of the line in bounded chunks (never holding it in memory) and skip it.
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(1 << 20)
                    digest.update(raw)
                    read += len(raw)
                bad(lineno, f"line longer than --max_line_bytes={max_line_bytes}")
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad(lineno, f"invalid UTF-8 at byte {e.start}")
                continue
            if not line.strip():
                end_document()
                continue
            ids = encode_line(tokenizer, line)
            tokens.extend(ids)
            sids.extend([int(sent_id)] * len(ids))
            # Flipped for a line of no tokens too (zero-width or control characters only), as in the original:
            # the sentences on either side then share an id.
            sent_id = not sent_id
        out.lines = lineno
    end_document()
    out.sha256 = digest.hexdigest()
    if not len(tokens):
        bad(0, "empty file (no text)" if out.num_bad == 0 else "no usable text")
    out.tokens = np.frombuffer(tokens, dtype=np.int32).copy()
    out.sent_ids = np.frombuffer(sids, dtype=np.int8).astype(bool)
    return out


_worker_tokenizer: Optional[XLNetTokenizer] = None
_worker_args: tuple = ()


def _init_tokenize_worker(sp_path: str, uncased: bool, use_eod: bool, max_line_bytes: int):
    global _worker_tokenizer, _worker_args
    _worker_tokenizer = XLNetTokenizer(sp_path, lower=uncased)
    _worker_args = (use_eod, max_line_bytes)


def _tokenize_in_worker(path: str) -> TokenizedFile:
    return tokenize_file(path, _worker_tokenizer, *_worker_args)


def build_stream(tokenized: list[TokenizedFile], task: int, pass_id: int) -> tuple[np.ndarray, np.ndarray, list]:
    """Shuffles the task's files (seed ``100*task + pass_id``, as the original) and concatenates them, flipping a
    file's sentence ids where needed so that a new file always starts a new sentence."""
    usable = [t for t in tokenized if len(t.tokens)]
    order = np.random.RandomState(100 * task + pass_id).permutation(len(usable))
    toks, sids, prev = [], [], None
    for i in order:
        t = usable[i]
        s = t.sent_ids
        if prev is not None and s[0] == prev:
            s = ~s
        toks.append(t.tokens)
        sids.append(s)
        prev = s[-1]
    if not toks:
        return np.zeros(0, np.int32), np.zeros(0, bool), []
    return np.concatenate(toks), np.concatenate(sids), [usable[i].path for i in order]


# ----------------------------------------------------------------------------------------------------------
# Shards
# ----------------------------------------------------------------------------------------------------------

def _int64_feature(tf, values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def serialize_example(tf, e: ex.Example) -> bytes:
    feature = {
        "input": _int64_feature(tf, e.input.tolist()),
        "is_masked": _int64_feature(tf, e.is_masked.astype(np.int64).tolist()),
        "seg_id": _int64_feature(tf, e.seg_id.tolist()),
        "label": _int64_feature(tf, [int(e.label)]),
    }
    return io_utils.example_bytes(tf, feature)


@dataclasses.dataclass(frozen=True)
class ShardJob:
    index: int
    first_batch: int
    end_batch: int
    file: str                # relative to save_dir
    sidecar: dict            # settings identity; num_records etc. are added when done


_PLAN_ONLY = ("batches_per_shard",)  # sidecar fields kept for the record, not part of a shard's identity


def _shard_is_done(save_dir: str, job: ShardJob) -> bool:
    """A finished shard has its file, of the size its sidecar records, and a sidecar written with the same settings
    and input; a shard from other settings is refused (it would silently mix two datasets). A shard of another
    size (a partial copy or sync, a restored backup) is rewritten: training refuses it, and a rerun is the repair
    it names."""
    path = os.path.join(save_dir, job.file)
    side = path + ".json"
    if not (io_utils.exists(path) and io_utils.exists(side)):
        return False
    done = mf._read_json(side)
    # A shard's records are fixed by its file name (split, pass, task), its host batch range and the settings:
    # batches_per_shard only plans the ranges, and an older xlnet_tf recorded the flag (500) where the effective
    # value is smaller, so comparing it refused identical shards.
    # (An older writer recorded no stream_sha256: _older_shards decides on those.)
    diff = [k for k in job.sidecar if k not in _PLAN_ONLY and (k in done or k != "stream_sha256")
            and done.get(k) != job.sidecar[k]]
    if diff and set(diff) <= {"first_batch", "end_batch"}:
        raise InputError(f"{path} holds host batches [{done.get('first_batch')}, {done.get('end_batch')}) where "
                         f"this run plans [{job.first_batch}, {job.end_batch}) (planned with batches_per_shard="
                         f"{done.get('batches_per_shard')}, now {job.sidecar['batches_per_shard']}); rerun with "
                         "the --batches_per_shard it was written with, use another --save_dir or delete the old "
                         "shards")
    if "stream_sha256" in diff:
        raise InputError(f"{path} was written from other tokens of the same text (another sentencepiece or "
                         "xlnet_tf version): its shards and this run's would mix two tokenisations; use another "
                         "--save_dir or delete the old shards")
    if diff:
        raise InputError(f"{path} was written with different {', '.join(diff)} (e.g. {diff[0]}: "
                         f"{done.get(diff[0])!r} vs now {job.sidecar[diff[0]]!r}); use another --save_dir or "
                         "delete the old shards")
    size = io_utils.getsize(path)
    if done.get("bytes") is not None and size != done["bytes"]:
        log.warning("rewriting %s: %d bytes, written with %d (truncated or replaced)", job.file, size, done["bytes"])
        return False
    return True


def _older_shards(save_dir: str) -> list:
    """The shards in ``save_dir`` of any split, pass or task whose sidecar is an older writer's, which recorded no
    ``stream_sha256``: complete data of one is used as it is, but new shards beside it (another pass, a shard its
    killed run did not write) could be of other tokens."""
    folder = io_utils.join(save_dir, "tfrecords")
    sidecars = sorted(n for n in io_utils.listdir(folder) if n.endswith(".tfrecord.json"))
    return [f"tfrecords/{n[:-5]}" for n in sidecars if io_utils.exists(io_utils.join(folder, n[:-5]))
            and "stream_sha256" not in mf._read_json(io_utils.join(folder, n))]


class RowBoundaries:
    """Each row's sentence starts (``ex.sentence_boundaries``), found once per pass rather than by every shard
    (which made writing O(shards x tokens)): one flat array and each row's offsets into it, so that shard-writing
    processes map one file instead of each holding a copy."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat, self.offsets = flat, offsets

    @classmethod
    def of(cls, sent_rows: np.ndarray) -> "RowBoundaries":
        per_row = [ex.sentence_boundaries(sent_rows[r]) for r in range(len(sent_rows))]
        offsets = np.cumsum([0] + [len(b) for b in per_row], dtype=np.int64)
        flat = np.concatenate(per_row).astype(np.int64) if per_row else np.zeros(0, np.int64)
        return cls(flat, offsets)

    def save(self, directory: str) -> None:
        np.save(os.path.join(directory, "boundaries.npy"), self.flat)
        np.save(os.path.join(directory, "boundary_offsets.npy"), self.offsets)

    @classmethod
    def load(cls, directory: str) -> "RowBoundaries":
        return cls(np.load(os.path.join(directory, "boundaries.npy"), mmap_mode="r"),
                   np.load(os.path.join(directory, "boundary_offsets.npy")))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, r: int) -> np.ndarray:
        # A plain ndarray view: a memmap slice costs far more per numpy call, and examples make many.
        return np.asarray(self.flat[self.offsets[r]:self.offsets[r + 1]])


def write_shard(save_dir: str, job: ShardJob, rows: np.ndarray, boundaries: RowBoundaries,
                settings: ex.ExampleSettings, is_start: np.ndarray, seed_key: tuple, progress=None) -> dict:
    """Writes host batches [first_batch, end_batch) to ``job.file`` via a temporary file; returns the sidecar.

    ``rows`` may be a memory map: a shard reads only its batches' windows and the random B spans, as views."""
    import tensorflow as tf  # imported here so tokenisation workers and --help stay light

    path = os.path.join(save_dir, job.file)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    row_views = [np.asarray(rows[r]) for r in range(len(rows))]  # views, not copies
    num_records = num_batches = dropped = 0
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for b in range(job.first_batch, job.end_batch):
                rng = np.random.default_rng([*seed_key, b])
                batch = ex.make_host_batch(row_views, boundaries, b, settings, is_start, rng)
                if batch is None:
                    dropped += 1
                    log.info("%s: host batch %d dropped (a row could not be split into A and B)", job.file, b)
                    continue
                for e in batch:
                    writer.write(serialize_example(tf, e))
                num_records += len(batch)
                num_batches += 1
                if progress is not None:
                    progress.advance(len(batch))
        if io_utils.local_path(tmp) is not None:  # fsync where the disk is local (an object store has none)
            with open(io_utils.local_path(tmp), "rb") as f:
                os.fsync(f.fileno())
        sidecar = dict(job.sidecar, num_records=num_records, num_batches=num_batches, dropped_batches=dropped,
                       bytes=io_utils.getsize(tmp))
        # Commit order: sidecar first, then the shard itself; the rename of the shard is what marks it done.
        mf.write_json_atomic(path + ".json", sidecar)
        io_utils.rename(tmp, path)
    except BaseException:
        # A full disk stays full until a rerun otherwise, and Ctrl-C leaves no partial shard either.
        try:
            if io_utils.exists(tmp):
                io_utils.remove(tmp)
        except Exception as e:  # noqa: BLE001  the write's own error is the one to report
            log.warning("could not remove %s: %s", tmp, e)
        raise
    return sidecar


_shard_state: dict = {}


def _init_shard_worker(stream_dir: str, sp_path: str, settings: ex.ExampleSettings, seed_key: tuple,
                       save_dir: str):
    _shard_state.update(
        rows=np.load(os.path.join(stream_dir, "rows.npy"), mmap_mode="r"), boundaries=RowBoundaries.load(stream_dir),
        is_start=ex.start_piece_table(XLNetTokenizer(sp_path)), settings=settings, seed_key=seed_key,
        save_dir=save_dir)


def _write_shard_in_worker(job: ShardJob) -> dict:
    s = _shard_state
    return write_shard(s["save_dir"], job, s["rows"], s["boundaries"], s["settings"], s["is_start"], s["seed_key"])


# ----------------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------------

def _spawn_pool(n: int, initializer, initargs):
    # "spawn": TensorFlow (already loaded in a test or training process) is not fork-safe.
    return multiprocessing.get_context("spawn").Pool(n, initializer=_start_worker, initargs=(initializer, *initargs))


def _start_worker(initializer, *initargs):
    # A terminal's Ctrl-C reaches the workers too: the writer stops them (the pool's exit) and says so once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    initializer(*initargs)


def run(cfg: WriterConfig) -> dict:
    """Writes this task's shards and part manifest of each pass, then (re)merges ``manifest.json``; returns the
    manifest."""
    cfg.validate()
    s = cfg.settings
    files = io_utils.glob_files(cfg.input_glob)
    task_files = files[cfg.task::cfg.num_task]  # interleaved, as the original
    tokenizer = XLNetTokenizer(cfg.sp_path, lower=cfg.uncased)
    params = dict(seq_len=s.seq_len, reuse_len=s.reuse_len, bsz_per_host=s.bsz_per_host,
                  num_core_per_host=s.num_core_per_host, bi_data=s.bi_data, mask_alpha=s.mask_alpha,
                  mask_beta=s.mask_beta, num_predict=s.num_predict, uncased=cfg.uncased, use_eod=cfg.use_eod,
                  vocab_size=tokenizer.vocab_size, sp_sha256=tokenizer.fingerprint())
    io_utils.makedirs(io_utils.join(cfg.save_dir, "tfrecords"))
    passes = f"{cfg.pass_id}-{cfg.pass_id + cfg.num_passes - 1}" if cfg.num_passes > 1 else cfg.pass_id
    log.info("task %d/%d, pass %s: %d of %d input files", cfg.task, cfg.num_task, passes, len(task_files),
             len(files))

    # 1. Tokenise (in parallel over files).
    t0 = time.time()
    tokenized: list[TokenizedFile] = []
    num_tokens = 0

    def got(t: TokenizedFile):
        nonlocal num_tokens
        tokenized.append(t)
        num_tokens += len(t.tokens)
        dt = time.time() - t0
        log.info("tokenised %d/%d files (%s: %d lines, %d tokens, %d bad lines); %d tokens, %.0f tokens/s",
                 len(tokenized), len(task_files), t.path, t.lines, len(t.tokens), t.num_bad, num_tokens,
                 num_tokens / max(dt, 1e-9))

    if cfg.num_workers > 1 and len(task_files) > 1:
        with _spawn_pool(min(cfg.num_workers, len(task_files)), _init_tokenize_worker,
                         (cfg.sp_path, cfg.uncased, cfg.use_eod, cfg.max_line_bytes)) as pool:
            for t in pool.imap(_tokenize_in_worker, task_files):
                got(t)
    else:
        for path in task_files:
            got(tokenize_file(path, tokenizer, cfg.use_eod, cfg.max_line_bytes))
    bad_lines = sum(t.num_bad for t in tokenized)
    if bad_lines:
        log.warning("skipped %d unusable lines/files; first: %s", bad_lines, [b for t in tokenized for b in t.bad][:5])
    # The original's --num_passes: each pass of the text shuffled anew, with other masks (seeds of pass_id).
    # Every part records all the passes asked for, so that the manifest is complete only once the last is written.
    requested = list(range(cfg.pass_id, cfg.pass_id + cfg.num_passes))
    for pass_id in requested:
        manifest = _write_pass(dataclasses.replace(cfg, pass_id=pass_id), tokenized, tokenizer, params, t0,
                               requested)
    return manifest


def _write_pass(cfg: WriterConfig, tokenized: list, tokenizer: XLNetTokenizer, params: dict, t0: float,
                requested: list) -> dict:
    """``run``'s pass ``cfg.pass_id`` over the tokenised files (one of the ``requested`` passes): its shards and
    part manifest, then the merged manifest (returned)."""
    s = cfg.settings
    tokens, sent_ids, order = build_stream(tokenized, cfg.task, cfg.pass_id)
    report = {
        "files": len(tokenized),
        "files_used": len(order),
        "files_without_text": [t.path for t in tokenized if not len(t.tokens)],
        "lines": sum(t.lines for t in tokenized),
        "bad_lines": sum(t.num_bad for t in tokenized),
        "bad_examples": [b for t in tokenized for b in t.bad][:MAX_REPORTED],
        "tokens": int(len(tokens)),
        "file_order": order,
    }

    # 2. Plan shards of whole host batches.
    rows, sent_rows = ex.layout_rows(tokens, sent_ids, s.bsz_per_host, s.num_core_per_host, s.bi_data)
    total_batches = ex.num_host_batches(rows.shape[1], s)
    if total_batches == 0:
        if cfg.num_task == 1:
            raise InputError(_no_records_message(cfg, report))
        log.warning("task %d: %s", cfg.task, _no_records_message(cfg, report))
    # Each input pipeline of a training run reads whole shards of its own: at least min_shards where there are
    # that many host batches (a function of the input, so a rerun plans the same shards).
    per_shard = max(1, min(cfg.batches_per_shard, total_batches // cfg.min_shards))
    writer_info = dict(seed=cfg.seed, original_span_bug=s.original_span_bug, batches_per_shard=per_shard,
                       split=cfg.split, pass_id=cfg.pass_id, task=cfg.task, max_line_bytes=cfg.max_line_bytes,
                       input_glob=cfg.input_glob, sp_path=cfg.sp_path)
    input_sha = hashlib.sha256("".join(t.sha256 for t in tokenized).encode()).hexdigest()
    # The tokens themselves, not only the text and the settings: another tokenisation of the same text (another
    # sentencepiece, an xlnet_tf that tokenised some lines otherwise) resuming a killed run would mix two datasets.
    stream_sha = hashlib.sha256(np.ascontiguousarray(tokens, np.int32).tobytes()
                                + np.ascontiguousarray(sent_ids, np.int8).tobytes()).hexdigest()
    identity = dict(params=params, seed=cfg.seed, original_span_bug=s.original_span_bug, input_sha256=input_sha,
                    stream_sha256=stream_sha, batches_per_shard=per_shard, num_task=cfg.num_task)
    jobs = []
    for k, first in enumerate(range(0, total_batches, per_shard)):
        name = f"tfrecords/{cfg.split}-pass{cfg.pass_id}-task{cfg.task}-{k:05d}.tfrecord"
        end = min(first + per_shard, total_batches)
        jobs.append(ShardJob(k, first, end, name, dict(identity, first_batch=first, end_batch=end)))
    _remove_stale_temps(cfg)
    todo = [j for j in jobs if not _shard_is_done(cfg.save_dir, j)]
    older = _older_shards(cfg.save_dir) if todo else []
    if older:
        raise InputError(f"{cfg.save_dir}: {len(older)} shard(s) written by an xlnet_tf older than 2026-12-01 (e.g. "
                         f"{older[0]}), which tokenised some lines otherwise (a control character between a digit "
                         f"and a comma, lines of no tokens), and {len(todo)} to write: they would mix two "
                         "tokenisations; use another --save_dir or delete the old shards")
    log.info("%d host batches of %d records in %d shards; %d already written, %d to write", total_batches,
             s.bsz_per_host, len(jobs), len(jobs) - len(todo), len(todo))

    # 3. Write the missing shards (in parallel over shards).
    seed_key = (cfg.seed, cfg.task, cfg.pass_id)
    parallel = cfg.num_workers > 1 and len(todo) > 1
    if todo and not parallel:
        import tensorflow  # noqa: F401  (loaded before the clock starts, so records/s is the writing rate)
    progress = Progress("writing shards", sum(j.end_batch - j.first_batch for j in todo) * s.bsz_per_host,
                        "records", PROGRESS_EVERY_S, log=log.info)
    boundaries = RowBoundaries.of(sent_rows) if todo else None
    del sent_rows
    work = f"{cfg.split}-pass{cfg.pass_id}-task{cfg.task}"
    local_work = None if io_utils.is_uri(cfg.save_dir) else os.path.join(cfg.save_dir, ".work", work)
    if parallel:
        # The token rows for the worker processes (np.load with mmap: a local file; next to the data when that
        # is local, else in the local temporary directory).
        stream_dir = local_work or tempfile.mkdtemp(prefix=f"xlnet_data_{work}-")
        try:
            os.makedirs(stream_dir, exist_ok=True)
            np.save(os.path.join(stream_dir, "rows.npy"), np.ascontiguousarray(rows))
            boundaries.save(stream_dir)
            with _spawn_pool(min(cfg.num_workers, len(todo)), _init_shard_worker,
                             (stream_dir, cfg.sp_path, s, seed_key, cfg.save_dir)) as pool:
                for side in pool.imap_unordered(_write_shard_in_worker, todo):
                    progress.advance(side["num_records"], force=True)
        finally:
            _remove_work_dir(stream_dir)
    else:
        if local_work:  # a copy of the stream (~1.2x the corpus) that a killed parallel run left
            _remove_work_dir(local_work)
        is_start = ex.start_piece_table(tokenizer)
        for job in todo:
            write_shard(cfg.save_dir, job, rows, boundaries, s, is_start, seed_key, progress)
            progress.advance(0, force=True)

    # 4. Part manifest for this task, then the merged manifest (written last, atomically).
    shards = []
    for job in jobs:
        side = mf._read_json(os.path.join(cfg.save_dir, job.file + ".json"))
        shards.append({"file": job.file, "num_records": side["num_records"], "num_batches": side["num_batches"],
                       "bytes": side.get("bytes"), "task": cfg.task, "pass_id": cfg.pass_id})
    part = {"params": params, "writer": writer_info, "task": cfg.task, "pass_id": cfg.pass_id,
            "passes_requested": requested, "num_task": cfg.num_task, "shards": shards, "input_report": report}
    mf.write_json_atomic(mf.part_path(cfg.save_dir, cfg.split, cfg.pass_id, cfg.task), part)
    manifest = mf.merge_parts(cfg.save_dir, cfg.split)
    if manifest["complete"] and manifest["num_records"] == 0:
        raise InputError(f"no writer task produced a record; this task's input: {_no_records_message(cfg, report)}")
    mf.write_json_atomic(os.path.join(cfg.save_dir, mf.manifest_name(cfg.split)), manifest)
    log.info("task %d pass %d done: %d records in %d shards (%.1f s); manifest: %d records, complete=%s",
             cfg.task, cfg.pass_id, sum(x["num_records"] for x in shards), len(shards), time.time() - t0,
             manifest["num_records"], manifest["complete"])
    return manifest


def _no_records_message(cfg: WriterConfig, report: dict) -> str:
    """Why the input makes no record: its size against what one host batch needs."""
    s = cfg.settings
    rows = s.bsz_per_host // (2 if s.bi_data else 1)
    return (f"--input_glob={cfg.input_glob!r} produced no pretraining records: {report['tokens']} tokens from "
            f"{report['files']} files ({report['lines']} lines, {report['bad_lines']} unusable), but one host batch "
            f"lays the text out in {rows} rows of at least seq_len={s.seq_len} tokens each "
            f"(about {rows * s.seq_len} tokens). Give more text, or a smaller batch size or --seq_len.")


def _remove_work_dir(stream_dir: str) -> None:
    """Deletes a pass's copy of the token stream, and ``.work`` once no task's copy is left in it."""
    shutil.rmtree(stream_dir, ignore_errors=True)
    parent = os.path.dirname(stream_dir)
    if os.path.basename(parent) == ".work":
        try:
            os.rmdir(parent)
        except OSError:  # not empty: another task of a cluster run is writing
            pass


def _remove_stale_temps(cfg: WriterConfig) -> None:
    """Deletes temporary shards a killed run of this task left behind (never another task's files)."""
    d = os.path.join(cfg.save_dir, "tfrecords")
    prefix = f".{cfg.split}-pass{cfg.pass_id}-task{cfg.task}-"
    for name in io_utils.listdir(d):
        if name.startswith(prefix) and ".tmp-" in name:
            log.info("removing unfinished %s", name)
            io_utils.remove(io_utils.join(d, name))
