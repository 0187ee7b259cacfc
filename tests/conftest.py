"""Test-session setup: two logical CPU devices (for MirroredStrategy tests) before TensorFlow starts, fixtures
several test files share (expensive to build), the background thread of the tests that only start processes
(tests/background.py), and a prompt process exit once pytest has finished (see
``_exit_without_interpreter_teardown``)."""

import atexit
import inspect
import json
import logging
import os
import re
import signal
import sys
import threading

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops  # noqa: E402
from tensorflow.python.framework import config as tf_config  # noqa: E402

import background  # noqa: E402
import squad_helpers  # noqa: E402
from xlnet_tf import ops  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


# --- the custom kernels, built while pytest collects ----------------------------------------------------------------
# Why: on a fresh clone the session's first model compiles xlnet_tf/ops (20-40 s of the compiler on 2 cores), and
# the tests in front waited for it. Started here, it compiles while pytest imports the test files (one core busy);
# the first use waits for this build (ops.build: one at a time). A failure is the first use's to report.
def _prebuild():
    try:
        ops.build()
    except Exception:  # noqa: BLE001 (reported by the first use, which builds again)
        pass


_prebuilding = threading.Thread(target=_prebuild, name="xlnet_tf.ops build", daemon=True)
_prebuilding.start()


# --- fixtures shared by several test files ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def squad_run():
    """run_squad's stages, as a user runs them (squad_helpers.squad_release, made on the background thread): the
    tiny model trained 2 steps on the SQuAD 2.0 fixture, --do_predict on its dev file and --export_dir. Shared by
    test_export_squad.py, test_batch_predict.py, test_batch_beam.py and test_hf_interop.py; tests leave export,
    model_dir and predictions as they are."""
    from xlnet_tf.tasks.squad import squad_data

    tmp = squad_helpers.squad_release.value()
    dev = squad_data.read_squad_file(squad_helpers.RELEASE_FLAGS["predict_file"], False)
    read = {}
    for name in ("predictions.json", "null_odds.json"):
        with open(tmp / "predict" / name) as f:
            read[name] = json.load(f)
    return dict(export=str(tmp / squad_helpers.RELEASE_EXPORT), examples=dev.examples, model_dir=str(tmp / "model"),
                predictions=read["predictions.json"], null_odds=read["null_odds.json"], tmp=tmp)


# --- background tests (tests/background.py) -----------------------------------------------------------------------
_ENVIRONMENT = background.EnvironmentGuard()
_CWD = pytest.StashKey[str]()


def _uses_a_module_fixture(item) -> bool:
    """Whether the test uses a fixture its file's tests share (made once while they run one after another)."""
    info = getattr(item, "_fixtureinfo", None)  # (pytest's; without it, the file is kept together)
    return info is None or any(defs and defs[-1].scope in ("module", "class")
                               for defs in info.name2fixturedefs.values())


def pytest_collection_modifyitems(session, config, items):
    # The background tests' reports go behind the in-process tests: by the time the front reaches them, their
    # bodies have run beside it (those left then run two at once: tests/background.py). The ``alone`` tests come
    # after those reports: an alone test holds the thread, and a hold first waits for the body running (up to a
    # minute, idle in front); after the reports none is left. An alone test that uses a module fixture takes its
    # whole file there (the fixture is made once); the other files' tests stay in front, beside the bodies, instead
    # of after them on one core. The files with a ``multiprocess`` test come last among the others: beside the
    # bodies, their processes would share the two cores three ways.
    # Before those, the in-process files of a module with a background resource: reached early on a slow machine,
    # their first test would wait idle for it.
    front = [item for item in items if not background.body_of(item)]
    quiet = {item.path for item in front if background.is_alone(item) and _uses_a_module_fixture(item)}
    last = [item for item in front if item.path in quiet or background.is_alone(item)]
    front = [item for item in front if not (item.path in quiet or background.is_alone(item))]
    starting = {item.path for item in front if item.get_closest_marker("multiprocess")}
    waiting = {item.path for item in front if background.resources_of(item)} - starting
    items[:] = ([item for item in front if item.path not in starting | waiting]
                + [item for item in front if item.path in waiting]
                + [item for item in front if item.path in starting]
                + [item for item in items if background.body_of(item)]
                + last)


def pytest_sessionstart(session):
    """Before any test runs (a test may not change the environment: tests/background.py):

    SIGINT as a terminal delivers it, here and in the processes the tests start: a shell that runs the suite as a
    background job (``cmd &``) hands it SIGINT ignored, which the Ctrl-C tests' processes would inherit (their
    runs then never stop).

    $TMPDIR of the processes the tests start: a folder in this session's base temporary directory. Workers the
    tests kill (SIGKILL, or a peer's failure) cannot remove autograph's files (~130 a suite run, which stayed in
    /tmp); pytest keeps the last three sessions' directories and removes older ones with what they hold."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    path = session.config._tmp_path_factory.getbasetemp() / "started_processes_tmp"
    path.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(path)


@pytest.fixture(scope="session", autouse=True)
def _background_tests(request, tmp_path_factory):
    def job(key, fn, name):
        wants_path = bool(inspect.signature(fn).parameters)
        return key, fn, tmp_path_factory.mktemp(re.sub(r"\W", "_", name)[:30]) if wants_path else None

    resources, bodies = {}, []
    for item in request.session.items:
        for made in background.resources_of(item):
            if made.key not in resources:
                resources[made.key] = job(made.key, made.make, made.make.__name__)
        body = background.body_of(item)
        if body is not None:
            bodies.append(job(item.nodeid, body, item.name))
    # The jobs start once the kernels are built: until then the compiler has the second core.
    background.RUNNER.start(list(resources.values()) + bodies, after=_prebuilding.join)
    yield
    background.RUNNER.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    alone = background.is_alone(item)
    if alone:
        background.RUNNER.hold()
    try:
        return (yield)
    finally:
        if alone:
            background.RUNNER.release()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    item.stash[_CWD] = os.getcwd()
    _ENVIRONMENT.changes.clear()
    _ENVIRONMENT.watching = not background.is_alone(item)
    return (yield)


# Why: a test that leaves one of these changed changes the code paths of the tests after it, in an order that depends
# on the machine: op determinism, left on by an in-process --deterministic run on a CPU where TensorFlow has oneDNN
# off (an AVX2 EPYC), made Keras compile nothing with XLA and in-process fine-tuning differ from the same run in a
# process (four failures, none where the test came alone). Each test must leave them as the session found them.
def _set_op_determinism(on):
    (tf_config.enable_op_determinism if on else tf_config.disable_op_determinism)()


# name: (read, set); op determinism through TensorFlow's module, as Keras reads it (the public API has no reader)
_PROCESS_SETTINGS = {
    "TensorFlow's op determinism": (tf_config.is_op_determinism_enabled, _set_op_determinism),
    "Keras's dtype policy": (lambda: keras.config.dtype_policy().name, keras.config.set_dtype_policy),
    "tf.config.run_functions_eagerly": (tf.config.functions_run_eagerly, tf.config.run_functions_eagerly),
}
_SESSION_SETTINGS = {name: read() for name, (read, _) in _PROCESS_SETTINGS.items()}


def _restore_process_settings() -> list:
    """Puts back every process-wide setting a test changed; returns each change, as "setting (was -> now)"."""
    changed = []
    for name, (read, set_to) in _PROCESS_SETTINGS.items():
        now, was = read(), _SESSION_SETTINGS[name]
        if now != was:
            set_to(was)
            changed.append(f"{name} ({was} -> {now})")
    return changed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        result = yield
    finally:
        _ENVIRONMENT.watching = False
        changed = _restore_process_settings()
    if changed:
        pytest.fail(f"left process-wide settings changed (now restored): {', '.join(changed)}", pytrace=False)
    if not background.is_alone(item):
        if _ENVIRONMENT.changes:
            background.fail_changed("environment", ", ".join(_ENVIRONMENT.changes))
        if os.getcwd() != item.stash[_CWD]:
            background.fail_changed("working directory", os.getcwd())
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    _ENVIRONMENT.watching = False


def pytest_terminal_summary(terminalreporter):
    count, seconds, by_front = background.RUNNER.summary()
    if count:
        terminalreporter.write_line(f"{count} background jobs ran beside the tests in front ({seconds:.0f} s of "
                                    f"their own; {by_front} of them in front, which would have waited for them)")


# --- prompt exit -------------------------------------------------------------------------------------------------
# Why: tf.data iterators that are still alive when the interpreter tears down (the training loops' iterators are
# captured by traced tf.functions, which live until exit) are destroyed one by one during finalization, and
# TensorFlow's destructor can block for up to a minute per iterator. ``RootDataset::Iterator::~Iterator`` cancels
# and then joins its autotuning thread (``tf.data`` ``Model::OptimizeLoop``); the cancellation callback wakes that
# thread before ``CancellationManager::IsCancelled()`` turns true (``StartCancel`` sets it only after running the
# callbacks), so the woken thread often goes back to sleep until its next optimization is due, and the
# optimization period doubles up to 60 s. A MirroredStrategy iterator has several such roots (host pipeline and
# one per device). Measured on 2 cores: 0.2-1.7 s or 100-200 s for one iterator, at random; the full suite used
# to print its result and then hang ~2.5 minutes. The bug is in TensorFlow's C++ and cannot be avoided from
# Python short of turning tf.data autotuning off in the code under test; the OS reclaims everything anyway, so the
# test process skips the interpreter's teardown once pytest is completely done.

_session = None


def pytest_sessionfinish(session, exitstatus):
    global _session
    _session = session
    _prebuilding.join()  # a short run must not exit under the compiler, leaving its temporary file in the cache


def _pytest_is_the_program() -> bool:
    """True for ``pytest ...`` and ``python -m pytest ...``; False when pytest.main() runs inside another program,
    whose own exit must not be cut short."""
    program = os.path.normpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return (os.path.basename(program) in ("pytest", "py.test")
            or program.endswith(os.path.join("pytest", "__main__.py")))


def _exit_without_interpreter_teardown():
    """Ends the process with pytest's exit status, after pytest and every exit handler registered after this module
    was imported (pytest's temporary-directory cleanup among them) have run, and before the interpreter frees
    TensorFlow's objects. Output is flushed and logging shut down first; nothing else is skipped that a test run
    needs (outputs are written and closed by the tests themselves)."""
    if _session is None or not _pytest_is_the_program():
        return
    status = int(_session.exitstatus)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status)


# atexit runs its handlers last-registered first: registered at import, this one runs after pytest's own.
atexit.register(_exit_without_interpreter_teardown)


# --- tf.data iterators live until the process exits ----------------------------------------------------------------
# Why: the destructor above also runs mid-session, when a test's iterator is freed (by the garbage collector, for
# those a traced function captured): a gen-2 collection then blocked 27-42 s, once in each full run (in a different
# test each time). The suite keeps every iterator made eagerly until the process ends, where the prompt exit skips
# their destructors: their buffers stay in memory and their threads wait idle until then, the price of no stalls.
_ITERATORS = []


def _kept(init):
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if tf.executing_eagerly():
            _ITERATORS.append(self)
    return __init__


iterator_ops.OwnedIterator.__init__ = _kept(iterator_ops.OwnedIterator.__init__)
multi_device_iterator_ops.OwnedMultiDeviceIterator.__init__ = _kept(
    multi_device_iterator_ops.OwnedMultiDeviceIterator.__init__)
