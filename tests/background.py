"""Tests that only drive other processes run on a thread beside the in-process tests.

A command-line test spends its time in its processes (TensorFlow's import, tracing, steps) while the pytest
process waits, and the in-process tests keep about one of the two cores busy: run side by side, the two fill the
machine. A test whose body only starts processes and reads what they wrote opts in with ``@background``: its
body starts on this session's background thread as the session starts (one body at a time, in collection order),
and the test itself, moved behind the in-process tests, reports that run's outcome. (On 2 cores the suite took
1120 s with every test in turn, 859 s so.) Where the front would wait for the thread (a report or resource it
needs, not made yet), it runs a job of the queue itself: the one it needs if that has not started, else the last.

A background body shares the pytest process with whatever test runs in front, so:
- it computes nothing with TensorFlow or Keras here (their global random seeds and name counters are the front
  test's): it starts processes, and writes and reads files (tf.io.gfile and checkpoint readers included); it
  draws from its own generators (``random.Random()``), not the ``random`` or ``np.random`` module's, which a
  test in front may have seeded;
- the processes it starts capture their output (``capture_output=True``, ``stdout=PIPE``): a front test may be
  capturing this process's file descriptors; a process that would inherit them is refused;
- it takes ``tmp_path`` or nothing; what it imports is imported at its module's top (collection is one thread);
- a ``@resource`` (a run several tests check, made the same way) is made before the bodies; the tests in front
  get it from a module fixture returning its ``value()``, the bodies call ``value()`` themselves.
A test that changes this process's environment variables or working directory, or needs the machine quiet
(timing against a heartbeat), is marked ``@pytest.mark.alone``: no background body runs during it. conftest.py
fails a test that changes either without the mark, whether or not a body was running at the time, so that the
rule holds by construction rather than by luck.
"""

import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

_BODY = "_background_body"


def _check_parameters(fn, what):
    params = list(inspect.signature(fn).parameters)
    if params not in ([], ["tmp_path"]):
        raise TypeError(f"{fn.__qualname__}: a background {what} takes tmp_path or nothing, not {params}")


def background(body):
    """The test ``body(tmp_path)`` or ``body()`` runs on the background thread; the test reports its outcome."""
    _check_parameters(body, "test")

    def test(request):
        RUNNER.outcome(request.node.nodeid)

    # Not functools.wraps: pytest would read the body's parameters through __wrapped__ and set up its tmp_path.
    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(test, name, getattr(body, name))
    if hasattr(body, "pytestmark"):  # marks applied below the decorator
        test.pytestmark = body.pytestmark
    setattr(test, _BODY, body)
    return test


class Resource:
    """What ``make(tmp_path)`` (or ``make()``) returns, made once on the background thread before the bodies
    (processes only, as a body) when a test of its module is collected; ``value()`` waits for it and raises what
    making it raised. A module fixture returning ``value()`` gives it to the tests in front."""

    def __init__(self, make):
        _check_parameters(make, "resource")
        self.make = make
        self.key = f"{make.__module__}.{make.__qualname__}"

    def value(self):
        return RUNNER.outcome(self.key)


resource = Resource  # the decorator


def run_python(*args, timeout=600, cwd=None) -> subprocess.CompletedProcess:
    """``python *args`` in a process of its own (a resource's run): its output captured, TensorFlow's C++ logging
    quiet, no GPU; a failure raises with the end of its stderr."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    assert done.returncode == 0, done.stderr[-4000:]
    return done


# The process of run_function: imports the function's module from this folder and writes what it returned as JSON
# (numpy scalars as numbers, anything else JSON does not know, such as a path, as its string). TensorFlow is
# imported as the tools import it, without what Keras and TF Lite load only to offer (~2-3 s less CPU a process).
_CALL = """
import importlib, json, pathlib, sys
from xlnet_tf.cli.flags import import_tensorflow
import_tensorflow()
sys.path.insert(0, sys.argv[1])
module, name, out, call = sys.argv[2:6]
call = json.loads(call)
args = [pathlib.Path(value) if is_path else value for is_path, value in call["args"]]
result = getattr(importlib.import_module(module), name)(*args, **call["kwargs"])
with open(out, "w") as f:
    json.dump(result, f, default=lambda value: value.item() if hasattr(value, "item") else str(value))
"""


def run_function(fn, *args, timeout=600, **kwargs):
    """``fn(*args, **kwargs)`` in a process of its own (``run_python``), for a resource whose run is in-process
    work (tracing, steps) the tests in front would otherwise wait for: ``fn`` is a function at the top of a module
    of the tests; its arguments are paths (given as ``pathlib.Path``) or JSON values, and so is what it returns."""
    call = {"args": [(isinstance(value, os.PathLike), os.fspath(value) if isinstance(value, os.PathLike) else value)
                     for value in args], "kwargs": kwargs}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        run_python("-c", _CALL, os.path.dirname(os.path.abspath(__file__)), fn.__module__, fn.__qualname__, out,
                   json.dumps(call), timeout=timeout)
        with open(out) as f:
            return json.load(f)


def body_of(item):
    """The background body behind a collected test, or None."""
    return getattr(getattr(item, "function", None), _BODY, None)


def resources_of(item):
    """The resources defined in a collected test's module."""
    module = getattr(item, "module", None)
    return [value for value in vars(module).values() if isinstance(value, Resource)] if module else []


class Runner:
    """The background thread: makes the resources and runs the bodies in order, recording each one's value,
    exception and seconds; ``hold()`` keeps it between jobs while an ``alone`` test runs. A job the front asks for
    before the thread has started it, the front runs itself; while one it asks for runs on the thread, the front
    runs the last job in the queue instead of waiting idle (so two jobs, at most, run at once)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._queue = []
        self._results = {}
        self._running = None  # the thread's job
        self._in_front = set()  # the jobs the front is running
        self._by_front = 0
        self._holds = 0
        self._stopping = False
        self._thread = None

    def start(self, jobs, after=None):
        """``jobs``: (key, callable, tmp_path or None) in the order to run them; ``after()``, if given, returns
        before the first starts (work they should not compete with)."""
        if not jobs:
            return
        self._queue = list(jobs)
        self._thread = threading.Thread(target=self._loop, args=(after,), name="background-tests", daemon=True)
        self._thread.start()

    def _loop(self, after):
        _THREAD.background = True
        if after is not None:
            after()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or (self._queue and not self._holds))
                if self._stopping:
                    return
                job = self._queue.pop(0)
                self._running = job[0]
            self._run(*job)

    def _run(self, key, fn, path):
        """Runs a job on this thread, recording its value or exception and its seconds."""
        start = time.perf_counter()
        value = error = None
        outer, _THREAD.in_job = getattr(_THREAD, "in_job", False), True
        try:
            value = fn(*([] if path is None else [path]))
        except BaseException as e:  # noqa: B036 (a failed assertion, pytest.fail, anything: reported in front)
            error = e
        finally:
            _THREAD.in_job = outer
        with self._cond:
            self._results[key] = (value, error, time.perf_counter() - start)
            if self._running == key:
                self._running = None
            self._in_front.discard(key)
            self._cond.notify_all()

    def _take(self, job):
        """Moves a queued job to the front (called holding the lock)."""
        self._queue.remove(job)
        self._in_front.add(job[0])
        self._by_front += 1
        return job

    def outcome(self, key):
        """Waits for the job ``key`` (a test's node id, a resource's name): its value, or raises what it raised."""
        front = not _on_background_thread()
        while True:
            with self._cond:
                if key in self._results:
                    value, error, _ = self._results[key]
                    break
                queued = [job for job in self._queue if job[0] == key]
                if queued and front:
                    job = self._take(queued[0])
                elif front and key == self._running and self._queue:
                    job = self._take(self._queue[-1])  # beside the thread's job, instead of waiting idle
                elif key in self._in_front or (front and key == self._running):
                    # (the queue only shrinks once started: nothing is left to run meanwhile)
                    self._cond.wait_for(lambda: key in self._results)
                    continue
                else:
                    raise RuntimeError(f"{key}: not made on the background thread before this asks for it")
            self._run(*job)
        if error is not None:
            raise error
        return value

    def hold(self):
        """Until ``release()``: no job starts on the thread (a job the holder asks for, it runs itself), and this
        returns once the thread's job (if any) has finished."""
        with self._cond:
            self._holds += 1
            self._cond.wait_for(lambda: self._running is None)

    def release(self):
        with self._cond:
            self._holds -= 1
            self._cond.notify_all()

    def stop(self):
        """No further job starts; waits for the running one (each bounds its processes with timeouts)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def summary(self):
        """(jobs done, their seconds in all, how many the front ran)."""
        with self._cond:
            return len(self._results), sum(seconds for _, _, seconds in self._results.values()), self._by_front


RUNNER = Runner()
_THREAD = threading.local()


def _on_background_thread() -> bool:
    return getattr(_THREAD, "background", False)


_popen_init = subprocess.Popen.__init__


def _checked_popen_init(self, args, *positional, **kwargs):
    if getattr(_THREAD, "in_job", False) and not positional and (
            kwargs.get("stdout") is None or kwargs.get("stderr") is None):
        raise RuntimeError(f"a background test started {args!r} with its output on pytest's file descriptors: "
                           "capture it (capture_output=True or stdout=/stderr=)")
    _popen_init(self, args, *positional, **kwargs)


subprocess.Popen.__init__ = _checked_popen_init


class EnvironmentGuard:
    """Records changes to ``os.environ`` made while a test not marked ``alone`` runs (its class is swapped for a
    subclass that notes each change: the background bodies' processes inherit the environment)."""

    def __init__(self):
        self.watching = False
        self.changes = []
        guard = self

        class _Watched(type(os.environ)):
            def __setitem__(self, key, value):
                guard.note("set", key)
                super().__setitem__(key, value)

            def __delitem__(self, key):
                guard.note("unset", key)
                super().__delitem__(key)

        os.environ.__class__ = _Watched

    # Set by the libraries in every process that uses them, to the value they would use anyway.
    UNREMARKABLE = ("PYTEST_CURRENT_TEST",  # pytest's own, naming the test in front
                    "TORCHINDUCTOR_CACHE_DIR")  # torch, on first use, to its default cache directory

    def note(self, change, key):
        if self.watching and key not in self.UNREMARKABLE:
            self.changes.append(f"{change} {key}")


def is_alone(item) -> bool:
    return item.get_closest_marker("alone") is not None


ALONE_HELP = ("changes this process's {what} ({detail}) without @pytest.mark.alone: background tests' processes "
              "would see it (tests/background.py)")


def fail_changed(what, detail):
    pytest.fail(ALONE_HELP.format(what=what, detail=detail), pytrace=False)
