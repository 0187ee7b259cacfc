"""Writing outputs atomically: a reader (or a resumed run) never sees half a file or half a directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile


@contextlib.contextmanager
def atomic_path(path: str):
    """Yields a temporary path next to ``path`` (for a file or a directory); on success it is renamed to ``path``,
    replacing any previous one. On failure nothing at ``path`` changes and the temporary output is removed."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    target = os.path.join(tmp, "out")
    try:
        yield target
        if os.path.isdir(target) and os.path.isdir(path):
            old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.old-")
            os.replace(path, os.path.join(old, "out"))
            os.replace(target, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write(path: str, write_fn, mode: str = "w") -> str:
    """Writes ``path`` through ``write_fn(file)`` atomically (``mode`` "w" for text, "wb" for bytes): into a
    temporary file ``.<name>.tmp-*`` next to it (a killed writer's leftovers are recognisable by that name), synced
    to disk, then renamed over ``path``. The file gets the usual permissions (0666 less the umask)."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def write_text_atomic(path: str, text: str) -> str:
    return atomic_write(path, lambda f: f.write(text))


def write_json_atomic(path: str, obj, indent: int = 2, sort_keys: bool = False) -> str:
    """The one JSON writer of the package: atomic (see ``atomic_write``), in insertion order unless ``sort_keys``
    (prediction files list examples in input order, as the original)."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False) + "\n")
