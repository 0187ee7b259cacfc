"""Progress lines for long loops over a known amount of work: tokenising a corpus and writing its shards
(``create_data``), encoding a feature cache, SQuAD's features, batch prediction. One format for all of them: the
count, its share, this run's rate and an ETA, at most every ``every_s`` seconds.

Free of TensorFlow: the tools check their settings and tokenise before it loads. Training steps report through
``training.progress.ProgressReporter``, which adds MFU and TensorBoard scalars."""

from __future__ import annotations

import time
from typing import Callable, Optional

from absl import logging


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """Counts work toward ``total`` and logs ``<what> | [<note> | ]<done>/<total> <unit> (P%), R <unit>/s, ETA T``
    at most every ``every_s`` seconds, the first after ``every_s`` (work done sooner logs nothing: tests, small
    files), and whenever forced (a shard finished).

    ``scale`` shows the counts in a larger unit, with one decimal (bytes as MB). ``done`` is work finished before
    this run (a resumed job): it counts in the share, not in the rate, so the ETA is this run's. Past ``total``
    (the caller counted in another unit: SQuAD's questions become several features each) the line gives the count
    and the rate only."""

    EVERY_S = 20.0  # by default: within create_data's 10 s and cli.predict's 30 s

    def __init__(self, what: str, total: float, unit: str = "examples", every_s: Optional[float] = None, *,
                 scale: float = 1.0, done: float = 0, log: Callable = logging.info, clock: Callable = time.monotonic):
        self.what, self.total, self.unit, self.scale = what, total, unit, scale
        self.every_s = self.EVERY_S if every_s is None else every_s
        self.log, self.clock = log, clock
        self.done = self._done_before = done
        self.start = self._last = clock()

    def advance(self, n: float = 1, *, force: bool = False, note: str = "") -> None:
        self.done += n
        now = self.clock()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        rate = (self.done - self._done_before) / max(now - self.start, 1e-9)  # this run's, unscaled
        digits = 0 if self.scale == 1 else 1
        count, per_s = f"{self.done * self.scale:.{digits}f}", f"{rate * self.scale:.{digits}f} {self.unit}/s"
        parts = [self.what, note] if note else [self.what]
        if self.total and self.done <= self.total:
            eta = format_duration((self.total - self.done) / rate) if rate > 0 else "?"
            parts.append(f"{count}/{self.total * self.scale:.{digits}f} {self.unit} "
                         f"({100.0 * self.done / self.total:.0f}%), {per_s}, ETA {eta}")
        else:
            parts.append(f"{count} {self.unit}, {per_s}")
        self.log("%s", " | ".join(parts))
