"""The package's file I/O: every path may be a local path or a URI (``gs://bucket/x``, ``file:///x``, ``ram://x``,
any filesystem ``tf.io.gfile`` knows), and outputs are written atomically: a reader (or a resumed run) never sees
half a file or half a directory.

Plain local paths are served by ``os``/``shutil`` (no TensorFlow needed: the settings layer and the job runner
check local files before TensorFlow loads); every path with a scheme goes through ``tf.io.gfile`` (imported on
first use). ``probe`` answers "does it exist" without importing TensorFlow: for a URI it says "not known yet"
(None) until TensorFlow is loaded, so the tools check URIs after it loads, with the same messages.

Atomic writes. A file is written under a temporary name next to the target (``.<name>.tmp-<host>-<pid>-*`` on a
local disk: a later write of the target removes those of processes gone from this host) and renamed over it. On a
local disk (a plain path or ``file://``) the file is fsynced first and the rename is atomic, for files and
directories alike. On object stores (``gs://``) a rename
is a copy and a delete: still atomic for one file (an object appears whole when its upload ends, and the temporary
object is removed after), not for a directory, which is many objects. So a directory (``atomic_path``) is built
under a temporary name and its files are then moved into place one by one, the files named in ``last`` moved last:
the file a reader takes as "this directory is complete" — ``saved_model.pb`` of an export version (TF Serving and
``xlnet_tf.cli.predict`` load a version once it is there), ``xlnet_model.ckpt.index`` of a release, ``checkpoint``
of a converted checkpoint directory (training checkpoints are TensorFlow's: ``CheckpointManager`` writes the
``checkpoint`` state file after the bundle). A directory replaced on an object store is removed
before the new one is moved in; on a local disk it is renamed aside, the new one renamed in, then it is removed.
Writers of one path are not locked against each other here: each export takes a fresh version number and refuses
one that appeared meanwhile. Where a second writer of a directory would mix its files with the first's (a training
run's checkpoints, a batch prediction's outputs), the writer holds ``directory_lock``.

Unreachable URIs. A URI that cannot be read or written (no network, no credentials, permission denied, a filesystem
TensorFlow lacks) raises an ``InputError`` naming the path and the cause in one line (``uri_error_message``), from
every function here; the command-line tools print the same line for such an error raised inside TensorFlow
(a checkpoint or TFRecord on gs://). A missing bucket or object is "not found", as a missing local file.

ram:// (TensorFlow's in-memory filesystem, used by the tests) matches names by prefix: its listing of "a" includes
the entries of a sibling "a.b", and a checkpoint prefix counts as a directory. ``listdir`` and ``walk`` drop such
entries there; ``checkpoint.resolve_checkpoint`` tests for ``<prefix>.index`` first.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import uuid
from typing import Iterator, Optional

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# The first bytes of a gzip file: readers of text name it when such a file is given as text (a `.tsv.gz` renamed).
GZIP_MAGIC = b"\x1f\x8b"


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


# TensorFlow's errors of a filesystem that could not be used, by class name -> what the user reads.
_URI_FAILURES = {"NotFoundError": "not found", "PermissionDeniedError": "permission denied",
                 "UnauthenticatedError": "not authenticated (no or expired credentials)",
                 "UnimplementedError": "no filesystem for this scheme in this TensorFlow",
                 "FailedPreconditionError": "cannot be reached", "UnavailableError": "cannot be reached",
                 "DeadlineExceededError": "cannot be reached (timed out)", "AbortedError": "cannot be reached",
                 "UnknownError": "cannot be used", "InternalError": "cannot be used"}
_CREDENTIALS_HINT = {"gs": "check the network and the credentials (gcloud auth application-default login, or "
                           "GOOGLE_APPLICATION_CREDENTIALS)"}


def uri_error_message(path: str, error: BaseException) -> Optional[str]:
    """The one line for TensorFlow's ``error`` on the URI ``path`` (see the module docstring), or None if it is not
    a filesystem error."""
    kind = type(error).__name__
    if not type(error).__module__.startswith("tensorflow") or kind not in _URI_FAILURES:
        return None
    text = str(getattr(error, "message", "") or error).strip()
    cause = " ".join(text.splitlines()[0].split()) if text else kind
    cause = re.sub(r"^\{\{[^}]*\}\}\s*", "", cause)[:300]
    if kind == "NotFoundError":
        return f"{path}: not found"
    scheme = path.split("://", 1)[0]
    hint = _CREDENTIALS_HINT.get(scheme, "check the network, the credentials and the path")
    return f"{path}: {_URI_FAILURES[kind]} ({cause}); {hint}"


def _names_uri_errors(fn):
    """Raises TensorFlow's filesystem errors on a URI argument as an InputError naming it (one line): the path given
    to the outermost function of this module (the user's, not a parent directory made on the way)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - only TensorFlow's filesystem errors are translated
            uri = next((a for a in args if isinstance(a, str) and is_uri(a)), None)
            cause = getattr(error, "uri_cause", error)
            message = uri and uri_error_message(uri, cause)
            if message:
                from xlnet_tf.errors import InputError

                translated = InputError(message)
                translated.uri_cause = cause
                raise translated from None
            raise
    return wrapper


def is_uri(path: str) -> bool:
    """True for a path with a scheme (gs://, file://, ram://, ...): served by tf.io.gfile."""
    return bool(_SCHEME.match(str(path)))


def local_path(path: str) -> Optional[str]:
    """The operating-system path of a plain path or a ``file://`` URI; None for other filesystems."""
    path = str(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if is_uri(path) else path


def abspath(path: str) -> str:
    """An absolute path (``~`` expanded) for a local path; a URI unchanged (os.path.abspath would mangle it)."""
    return path if is_uri(path) else os.path.abspath(os.path.expanduser(path))


join = os.path.join  # posix joining keeps a scheme: join("gs://b/x", "y") == "gs://b/x/y"
dirname = os.path.dirname
basename = os.path.basename


def relpath(path: str, start: str) -> str:
    """``path`` relative to the directory ``start`` below which it lies."""
    return path[len(start):].lstrip("/") if is_uri(path) else os.path.relpath(path, start)


def probe(path: str, kind: str = "exists") -> Optional[bool]:
    """Whether ``path`` exists (``kind`` "exists"), is a directory ("dir") or a file ("file"), without importing
    TensorFlow: None for a URI while TensorFlow is not loaded (check it again later)."""
    if is_uri(path) and "tensorflow" not in sys.modules:
        return None
    return {"exists": exists, "dir": isdir, "file": isfile}[kind](path)


def beside(path: str, name: str) -> Optional[str]:
    """The file ``name`` in the directory ``path``, or beside the file or checkpoint prefix ``path`` (a release's
    ``xlnet_config.json``), if it is there; None if not, or if it is a URI while TensorFlow is not loaded."""
    path = os.fspath(path)
    found = join(path if probe(path, "dir") else os.path.dirname(path), name)
    return found if probe(found) else None


@_names_uri_errors
def exists(path: str) -> bool:
    return _gfile().exists(path) if is_uri(path) else os.path.exists(path)


@_names_uri_errors
def isdir(path: str) -> bool:
    if not is_uri(path):
        return os.path.isdir(path)
    # tf.io.gfile.isdir answers False for a path it cannot reach: exists() raises for that (naming the cause)
    return _gfile().exists(path) and _gfile().isdir(path)


def isfile(path: str) -> bool:
    return exists(path) and not isdir(path)


@_names_uri_errors
def makedirs(path: str) -> None:
    """Creates ``path`` and its parents (no error if it exists)."""
    if is_uri(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path or ".", exist_ok=True)


@_names_uri_errors
def listdir(path: str) -> list:
    """Entry names (no trailing "/") of the directory ``path``, sorted."""
    if not is_uri(path):
        return sorted(os.listdir(path))
    gfile = _gfile()
    names = [n.rstrip("/") for n in gfile.listdir(path)]
    if path.startswith("ram://"):  # ram:// lists by name prefix: "a" gets ".b/x" of a sibling "a.b" too
        names = [n for n in names if gfile.exists(join(path, n))]
    return sorted(names)


@_names_uri_errors
def glob(pattern: str) -> list:
    """Paths matching ``pattern``, sorted (the scheme kept)."""
    if is_uri(pattern):
        return sorted(_gfile().glob(pattern))
    import glob as _glob

    return sorted(_glob.glob(os.path.expanduser(pattern)))


def glob_files(patterns: str) -> list:
    """The files (not directories) matching the comma-separated globs ``patterns``, sorted, each once."""
    return sorted({f for p in patterns.split(",") if p.strip() for f in glob(p.strip()) if isfile(f)})


def unmatched_globs(patterns: str, flag: str) -> list:
    """An error naming ``flag`` for each of the comma-separated globs ``patterns`` that matches no file (else a
    misspelt one is dropped in silence while the others match), or for no pattern at all. A URI's pattern is
    looked at once TensorFlow is loaded (as ``probe``)."""
    given = [p.strip() for p in (patterns or "").split(",") if p.strip()]
    if not given:
        return [f"{flag}={patterns!r}: no file pattern"]
    return [no_file_message(pattern, flag) for pattern in given
            if not ((is_uri(pattern) and "tensorflow" not in sys.modules) or any(isfile(f) for f in glob(pattern)))]


def no_file_message(pattern: str, flag: str, example: str = "*.txt") -> str:
    """What to say of a glob ``pattern`` of ``flag`` that matches no file: a directory given for its files (the
    glob of them to give, ending in ``example``), or a pattern matching nothing."""
    if isdir(pattern):
        return f"{flag}: {pattern!r} is a directory: give a glob of its files, e.g. {join(pattern, example)!r}"
    return f"{flag}: {pattern!r} matches no file"


def canonical(path: str) -> str:
    """What two names of one file or directory have in common: a local path's real path (through ``..`` and links),
    a URI as written (without a trailing ``/``)."""
    return path.rstrip("/") if is_uri(path) else os.path.realpath(path)


def walk(path: str) -> Iterator[tuple]:
    """(directory, subdirectory names, file names) for ``path`` and every directory below it, top-down."""
    if not is_uri(path):
        yield from os.walk(path)
        return
    names = listdir(path)
    subdirs = [n for n in names if isdir(join(path, n))]
    yield path, subdirs, [n for n in names if n not in subdirs]
    for name in subdirs:
        yield from walk(join(path, name))


@_names_uri_errors
def stat(path: str) -> tuple:
    """(size in bytes, modification time in ns; 0 where the filesystem keeps none, as ram://) of a file."""
    if is_uri(path):
        st = _gfile().stat(path)
        return int(st.length), int(st.mtime_nsec)
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def getsize(path: str) -> int:
    return stat(path)[0]


class _RawGFile(io.RawIOBase):
    """A GFile opened for reading, as the raw stream under io.TextIOWrapper (encodings, errors=, newline=)."""

    def __init__(self, f, path: str):
        self._f, self.path = f, path

    def readable(self):
        return True

    def readinto(self, b):
        data = _names_uri_errors(lambda path: self._f.read(len(b)))(self.path)
        b[:len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


@_names_uri_errors
def open(path: str, mode: str = "r", encoding: Optional[str] = None, errors: Optional[str] = None,  # noqa: A001
         newline: Optional[str] = None):
    """``builtins.open`` for a local path; a ``tf.io.gfile.GFile`` for a URI, read through io.BufferedReader (and
    a TextIOWrapper for text) so that ``readline(size)``, ``errors=`` and ``newline=`` work as with ``open``.
    Writing a URI creates the parent directory first (ram:// lists only directories that were made)."""
    if not is_uri(path):
        kwargs = {} if "b" in mode else dict(encoding=encoding or "utf-8", errors=errors, newline=newline)
        return builtins.open(path, mode, **kwargs)
    gfile = _gfile()
    if "r" not in mode:
        parent = dirname(path)
        if parent and not gfile.exists(parent):
            gfile.makedirs(parent)
    if "r" not in mode:
        return gfile.GFile(path, mode.replace("t", ""))
    raw = io.BufferedReader(_RawGFile(gfile.GFile(path, "rb"), path), buffer_size=1 << 20)
    if "b" in mode:
        return raw
    return io.TextIOWrapper(raw, encoding=encoding or "utf-8", errors=errors, newline=newline)


@_names_uri_errors
def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@_names_uri_errors
def read_text(path: str) -> str:
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


@_names_uri_errors
def read_json(path: str):
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def _yaml_unique_keys(stream):
    """``yaml.safe_load`` refusing a key given twice in one mapping: PyYAML keeps the last silently, so a flag set
    twice, or a second ``runs:`` in a job file, would quietly drop what the user wrote first. The check walks the
    composed node graph (no object is constructed there), then the text is loaded by ``safe_load``."""
    import yaml

    text = stream.read()
    seen_nodes = set()

    def check(node):
        if id(node) in seen_nodes:  # an alias of a node already checked
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys = set()
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor": merged keys may be overridden
                    check(value_node)
                    continue
                key = (key_node.tag, key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in keys:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key_node.value!r} given twice (line {key_node.start_mark.line + 1})")
                keys.add(key)
                check(value_node)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                check(item)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        check(root)
    return yaml.safe_load(text)


def read_mapping(path: str, fmt: str = "yaml", *, label: Optional[str] = None, missing: Optional[str] = "file",
                 expected: str = "a mapping", empty: bool = False, error: Optional[type] = None,
                 finite: bool = False) -> dict:
    """The mapping in the YAML (``fmt="yaml"``) or JSON file ``path``: the one loader of the files of settings
    (``--config_file``, job files, ``xlnet_config.json``), with one set of messages, each naming ``label`` (default:
    the path) and raised as ``error`` (default ``InputError``): ``<missing> not found`` (``missing=None``: not
    checked, a missing file raises FileNotFoundError), ``not valid YAML (...)`` / ``not valid JSON (...)`` (on
    one line), ``cannot read it (...)``, ``expected <expected>, got <type>``. ``empty``: an empty YAML file is
    ``{}``. ``finite``: a NaN or infinite number anywhere is ``<key> is not a finite number (NaN or infinity)``
    (the files of models; a ``--config_file``'s values are checked per flag, naming the flag)."""
    from xlnet_tf.errors import InputError

    error, label = error or InputError, label or path
    if missing and not exists(path):
        raise error(f"{label}: {missing} not found")
    if fmt == "json":
        parse, invalid = json.load, json.JSONDecodeError
    else:
        import yaml

        parse, invalid = _yaml_unique_keys, yaml.YAMLError
    try:
        with open(path, encoding="utf-8") as f:
            value = parse(f)
    except invalid as e:
        raise error(f"{label}: not valid {fmt.upper()} ({' '.join(str(e).split())})") from None
    except FileNotFoundError:
        if missing:
            raise error(f"{label}: {missing} not found") from None
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{label}: cannot read it ({e})") from None
    if value is None and empty:
        return {}
    if not isinstance(value, dict):
        raise error(f"{label}: expected {expected}, got {type(value).__name__}")
    bad = non_finite_keys(value) if finite else []
    if bad:
        raise error(f"{label}: {', '.join(bad[:5])} is not a finite number (NaN or infinity)")
    return value


def read_jsonl(path: str) -> Iterator[tuple]:
    """``(line number, JSON value)`` of each non-blank line of a JSON-lines file (a UTF-8 BOM dropped); an InputError
    names ``path:line`` of a line that is not UTF-8 or not JSON."""
    from xlnet_tf.errors import InputError

    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff") if number == 1 else raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{number}: not UTF-8 text (byte {e.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{number}: not JSON ({e})") from None
            yield number, value


CR_LINE_ENDINGS = "CR-only (classic Mac) or mixed line endings? convert them to \\n"


def tsv_cells(line: str) -> tuple[Optional[list], str]:
    """``(cells, "")`` of a TSV line (its line break dropped, tab-separated, no quoting), or ``(None, why not)``:
    a carriage return inside a line is no TSV line break (Python's csv stopped the whole file there) but a sign of
    mixed line endings, where the text would be half of one row and half of the next."""
    body = line[:-1] if line.endswith("\n") else line
    body = body[:-1] if body.endswith("\r") else body
    if "\r" in body:
        return None, "a carriage return (\\r) inside the row (mixed line endings?)"
    return body.split("\t"), ""


def lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: JSON's "\\ud800" reads as one, but it is no Unicode text, and
    SentencePiece, TensorFlow and UTF-8 writers fail on it with errors naming no file or line."""
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def surrogate_keys(value, prefix: str = "") -> list:
    """The keys (``a.b[2]``, as ``non_finite_keys``) of the strings in a parsed JSON value holding a lone
    surrogate: every reader of users' JSON asks this one question, then skips or refuses as it does bad text."""
    if isinstance(value, str):
        return [prefix or "value"] if lone_surrogate(value) else []
    if isinstance(value, dict):
        return [k for key, v in value.items()
                for k in surrogate_keys(v, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(value, (list, tuple)):
        return [k for i, v in enumerate(value) for k in surrogate_keys(v, f"{prefix}[{i}]")]
    return []


def non_finite_keys(value, prefix: str = "") -> list:
    """The keys (``a.b[2]``) of NaN and infinite numbers in a parsed JSON/YAML value: Python's json reads ``NaN``
    and ``Infinity``, YAML ``.nan`` and ``.inf``, and no setting of this stack means one."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [prefix or "value"]
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in non_finite_keys(v, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(value, (list, tuple)):
        return [k for i, v in enumerate(value) for k in non_finite_keys(v, f"{prefix}[{i}]")]
    return []


@_names_uri_errors
def remove(path: str) -> None:
    """Removes the file ``path`` (no error if it is already gone)."""
    if is_uri(path):
        gfile = _gfile()
        if gfile.exists(path):
            gfile.remove(path)
    elif os.path.lexists(path):
        os.remove(path)


def rmtree(path: str) -> None:
    """Removes the directory ``path`` and everything below it (no error if it is gone)."""
    if not is_uri(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    import tensorflow as tf

    try:
        tf.io.gfile.rmtree(path)
    except tf.errors.NotFoundError:  # gone already (or, on ram://, an entry its prefix listing invented)
        pass


@_names_uri_errors
def copy(src: str, dst: str) -> None:
    """Copies the file ``src`` to ``dst`` (replacing it; the parent of ``dst`` is created)."""
    makedirs(dirname(dst) or ".")
    if is_uri(src) or is_uri(dst):
        _gfile().copy(src, dst, overwrite=True)
    else:
        shutil.copyfile(src, dst)


@_names_uri_errors
def rename(src: str, dst: str) -> None:
    """Moves the file ``src`` over ``dst``: atomic on a local disk; a copy and a delete on an object store."""
    if is_uri(src) or is_uri(dst):
        _gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(src, dst)


def _tmp_name(path: str, tag: str = "tmp") -> str:
    return join(dirname(path), f".{basename(path)}.{tag}-{uuid.uuid4().hex[:12]}")


def _host() -> str:
    import socket

    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _local_tmp_prefix(path: str, tag: str = "tmp") -> str:
    """The start of a local temporary name beside ``path``: ``.<name>.<tag>-<host>-<pid>-``, then mkstemp's or
    mkdtemp's random part. The host and pid say whose it is: a later writer of ``path`` removes those of processes
    gone from this host (``_remove_dead_temps``)."""
    return f".{os.path.basename(path)}.{tag}-{_host()}-{os.getpid()}-"


def _remove_dead_temps(path: str) -> None:
    """Removes the temporaries a killed writer of the local ``path`` left beside it (``.<name>.tmp-*`` and
    ``.<name>.old-*``: a feature cache's was 102 MB, an export's a whole version), only those of processes this
    host says are gone: a live process's temporary may be another run writing the same cache; one of another
    host, whose processes cannot be asked, is left (as an unnamed one from before names carried a pid). A pid
    reused since by another process keeps its temporary: left, never removed wrongly."""
    parent, name = os.path.split(os.path.abspath(path))
    # An .old-* is the previous output moved aside: while the target is missing (a crash between the two
    # renames), it is the only copy, kept.
    tags = "tmp|old" if os.path.lexists(path) else "tmp"
    pattern = re.compile(rf"\.{re.escape(name)}\.(?:{tags})-{re.escape(_host())}-(\d+)-[^-]*$")
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(f".{name}.")]
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry.name)
        if not match or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.remove(entry.path)
            except OSError:  # removed by another writer meanwhile
                pass


def _move_tree(src: str, dst: str, last=()) -> None:
    """Moves the files below ``src`` to the same places below ``dst``, those named in ``last`` after all others
    (file by file: an object store has no directory rename; ram:// loses the files of a renamed directory)."""
    files = []
    for d, _, names in walk(src):
        rel = relpath(d, src)
        for name in names:
            files.append(name if rel in ("", ".") else join(rel, name))
    files.sort(key=lambda f: (basename(f) in last, f))
    makedirs(dst)
    for rel in files:
        target = join(dst, rel)
        makedirs(dirname(target))
        rename(join(src, rel), target)


@contextlib.contextmanager
def atomic_path(path: str, last=()):
    """Yields a temporary path next to ``path`` (for a file or a directory); on success it is renamed to ``path``,
    replacing any previous one. On failure nothing at ``path`` changes and the temporary output is removed.
    ``last``: file names that a reader takes as "complete", moved last where a directory cannot be renamed at once
    (object stores: see the module docstring)."""
    local = local_path(path)
    if local is not None and is_uri(path):  # file://: the local disk's atomic rename
        with atomic_path(local, last) as tmp:
            yield tmp
        return
    parent = dirname(abspath(path))
    makedirs(parent)
    if is_uri(path):
        tmp = _tmp_name(path)
        makedirs(tmp)
    else:
        _remove_dead_temps(path)
        tmp = tempfile.mkdtemp(dir=parent, prefix=_local_tmp_prefix(path))
    target = join(tmp, "out")
    try:
        yield target
        if not is_uri(path):
            if os.path.lexists(path) and (os.path.isdir(target) or os.path.isdir(path)):
                # rename() replaces a file with a file only: the old one goes aside first (a crash between the
                # two renames leaves it in .<name>.old-*)
                old = tempfile.mkdtemp(dir=parent, prefix=_local_tmp_prefix(path, "old"))
                os.replace(path, os.path.join(old, "out"))
                os.replace(target, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(target, path)
        elif isdir(target):
            if exists(path):
                rmtree(path) if isdir(path) else remove(path)
            _move_tree(target, path, last)
        else:
            if isdir(path):
                rmtree(path)
            rename(target, path)
    finally:
        rmtree(tmp)


# What writing a file raises for the disk, not the data: out of space or quota, over a file-size limit (ulimit -f),
# a read-only file system, an I/O error.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


@_names_uri_errors
def atomic_write(path: str, write_fn, mode: str = "w") -> str:
    """Writes ``path`` through ``write_fn(file)`` atomically (``mode`` "w" for text, "wb" for bytes): into a
    temporary file ``.<name>.tmp-*`` next to it (a killed writer's leftovers are recognisable by that name), synced
    to disk where the disk is local, then renamed over ``path``. A local file gets the usual permissions (0666 less
    the umask)."""
    local = local_path(path)
    if local is None:  # an object store or ram://: a temporary object renamed (copied) over the target
        makedirs(dirname(path))
        tmp = _tmp_name(path)
        try:
            with _gfile().GFile(tmp, mode) as f:
                write_fn(f)
            rename(tmp, path)
        except BaseException:
            remove(tmp)
            raise
        return path
    parent = os.path.dirname(os.path.abspath(local))
    os.makedirs(parent, exist_ok=True)
    _remove_dead_temps(local)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=_local_tmp_prefix(local))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, local)
    except BaseException as error:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(error, OSError) and error.errno is not None and (
                error.filename == tmp or error.filename is None and error.errno in _WRITE_ERRNOS):
            # A full disk or a file-size limit raised by a write names no file, a failed fsync or rename the
            # temporary one, which is gone now: the target is what the user can look for. (Another errno without
            # a name may be write_fn's reading of its input: left as it is.)
            raise OSError(error.errno, error.strerror or os.strerror(error.errno), path) from error
        raise
    return path


def write_text_atomic(path: str, text: str) -> str:
    return atomic_write(path, lambda f: f.write(text))


def write_bytes_atomic(path: str, data: bytes) -> str:
    return atomic_write(path, lambda f: f.write(data), mode="wb")


def write_json_atomic(path: str, obj, indent: int = 2, sort_keys: bool = False) -> str:
    """The one JSON writer of the package: atomic (see ``atomic_write``), in insertion order unless ``sort_keys``
    (prediction files list examples in input order, as the original)."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False) + "\n")


def example_bytes(tf, features: dict) -> bytes:
    """``features`` (name -> ``tf.train.Feature``) as a serialized ``tf.train.Example`` (``tf``: the tensorflow
    module), the same bytes in every process: a map's entries are otherwise written in an order that follows the
    process's hash seed, and a rerun's or another worker's records would differ in their bytes from the first's."""
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString(deterministic=True)


# -- one writer per directory ---------------------------------------------------------------------------------------

LOCK_RENEW_S = 60.0  # a holder rewrites its lock this often, from a thread of its own
LOCK_EXPIRES_S = 300.0  # a lock not rewritten for this long is a lost holder's (a host elsewhere cannot be asked)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _lock_holder(path: str) -> Optional[dict]:
    """The lock file's holder (host, pid, started, renewed), {} while unreadable (being written), None if none."""
    if is_uri(path) and not exists(path):
        return None
    try:
        holder = json.loads(read_text(path) or "{}")
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _lock_lost(holder: dict, host: str, now: float) -> Optional[str]:
    """Why the lock of ``holder`` may be taken over, or None: its process is gone (on this host), or it was not
    renewed for ``LOCK_EXPIRES_S`` (a holder killed on another host; locks written without renewal never expire)."""
    pid = holder.get("pid")
    if holder.get("host") == host and isinstance(pid, int) and not process_alive(pid):
        return f"process {pid}, which is gone"
    renewed = holder.get("renewed")
    if isinstance(renewed, (int, float)) and now - renewed > LOCK_EXPIRES_S:
        return f"process {pid} on {holder.get('host')}, not renewed for {now - renewed:.0f} s"
    return None


@contextlib.contextmanager
def directory_lock(directory: str, name: str, refusal, *, clock=None, sleep=None):
    """Holds ``<directory>/<name>`` (JSON: host, pid, started, renewed) while the caller writes into ``directory``:
    a second holder is refused with ``InputError(refusal(holder, path))``. The holder renews its lock every
    ``LOCK_RENEW_S``. The lock of a process gone from this host, or one not renewed for ``LOCK_EXPIRES_S``, is taken
    over with a warning; one held on another host and renewed lately is watched until it is renewed again (a live
    holder: refused) or expires (a crashed one: taken over, so that a scheduler's rerun elsewhere needs no hand).
    Local disks: created exclusively (``O_EXCL``), taken over by a rename. Object stores: there is no
    create-if-absent, so two holders starting (or taking over) in the same instant could both pass."""
    import socket
    import threading
    import time

    from absl import logging

    from xlnet_tf.errors import InputError

    clock, sleep = clock or time.time, sleep or time.sleep
    path = join(directory, name)
    host = socket.gethostname()
    me = dict(host=host, pid=os.getpid(), started=time.strftime("%Y-%m-%d %H:%M:%S"), renewed=clock())

    def write(holder: dict) -> None:
        if is_uri(path):
            with _gfile().GFile(path, "w") as f:
                f.write(json.dumps(holder))
        else:
            write_text_atomic(path, json.dumps(holder))

    def create() -> bool:
        if is_uri(path):
            write(me)
            return True
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            return False  # taken meanwhile: read who holds it
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(me))
        return True

    def take_over(stale: dict) -> None:
        # Two runs may judge one lost lock at once. Removing it outright, the second would delete the lock the first
        # has just made, and both would hold it; moved aside first (one rename: only one run gets it), a lock that
        # is not the one judged lost is put back.
        if is_uri(path):
            remove(path)  # object stores have no such rename (see above)
            return
        aside = f"{path}.{host}-{os.getpid()}.lost"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return  # another run moved it first
        if _lock_holder(aside) != stale:
            try:
                os.link(aside, path)  # back, unless a third run has made its own meanwhile
            except FileExistsError:
                logging.warning("%s: another run took this lock over meanwhile", path)
        os.remove(aside)

    watched, races = None, 0
    while True:
        holder = _lock_holder(path)
        if holder is None or not holder:  # none, or being written (by a holder that just took it)
            if holder is None and create():
                break
            races += 1
            if races > 50:
                raise InputError(f"{path}: could not take this lock (remove it if no run holds it)")
            sleep(0.1)
            continue
        lost = _lock_lost(holder, host, clock())
        if lost is not None:
            logging.warning("%s: taking over the lock of %s", path, lost)
            take_over(holder)
            continue
        renewed = holder.get("renewed")
        if (holder.get("host") == host or not isinstance(renewed, (int, float))
                or (watched is not None and renewed != watched)):
            raise InputError(refusal(holder, path))  # a live holder
        if watched is None:
            watched = renewed
            logging.warning("%s: held by pid %s on %s, renewed %.0f s ago; waiting to see it renewed (then this run "
                            "is refused) or expire after %.0f s (a crashed run's: taken over)", path,
                            holder.get("pid"), holder.get("host"), clock() - renewed, LOCK_EXPIRES_S)
        sleep(LOCK_RENEW_S / 4)

    def mine() -> bool:
        held = _lock_holder(path) or {}
        return (held.get("host"), held.get("pid"), held.get("started")) == (host, me["pid"], me["started"])

    stop = threading.Event()

    def renew():
        while not stop.wait(LOCK_RENEW_S):
            try:
                if not mine():
                    logging.warning("%s: this process's lock was taken over; no longer renewed", path)
                    return
                write(dict(me, renewed=clock()))
            except Exception as error:  # noqa: BLE001 (storage hiccup: the next renewal tries again)
                logging.warning("%s: could not renew the lock (%s)", path, error)

    renewer = threading.Thread(target=renew, name=f"lock {name}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        if mine():
            remove(path)
