"""Fine-tuning task families and their registry.

A *task family* (``xlnet_tf.tasks.base.TaskFamily``) owns everything that is specific to one kind of fine-tuning
task, in one module or package (a built-in one: ``tasks/<family>/``, its settings, data, head, HF names, Keras text
model and hooks): which ``--task_name`` values it runs and their settings checks, data reading, feature encoding and
cached records, the head model, loss, metrics and prediction files (its ``Task``), the TF Serving signatures
(``family.serving``: raw-text inputs, token-id inputs, outputs, preprocessor arguments) and what batch prediction
needs (``family.batch``: input formats, output rows). The generic machinery asks this registry and never branches on
a task kind: the fine-tuning runner of run_classifier.py and run_squad.py (``xlnet_tf.runner``), exports
(``xlnet_tf.finetuning.serving``, ``python -m xlnet_tf.cli.export``), batch prediction (``python -m
xlnet_tf.cli.predict``) and jobs.

Built-in families (``BUILTIN``, loaded on first use): ``classification`` (GLUE, IMDB, Yelp; STS-B as regression),
``multiple_choice`` (RACE), ``squad`` (SQuAD 1.1/2.0) and ``tagging`` (token classification). A new built-in
family is its package, its tests and one line in ``BUILTIN`` (``tests/test_new_family.py`` adds one).
A family of your own lives in your module::

    from xlnet_tf import tasks
    from xlnet_tf.tasks.base import BatchPrediction, RecordsTask, Serving, TaskFamily

    class MyServing(Serving): ...          # what its exports take and return
    class MyBatch(BatchPrediction): ...    # what batch prediction writes (leave out: not supported)

    class MyFamily(TaskFamily):
        name = "my_family"
        serving_class, batch_class = MyServing, MyBatch
        ...

    tasks.register(MyFamily())

and is loaded with ``--task_module=my_package.my_tasks`` (a dotted module name) or ``--task_module=path/to/file.py``
by run_classifier.py (job files pass it on as any flag), ``python -m xlnet_tf.cli.export`` (a run records its
``--task_module``) and ``python -m xlnet_tf.cli.predict``.

Lookups: ``get(name)`` (the family name a run record holds), ``for_kind(kind)`` (the ``kind`` an export's
metadata records; a family may serve several, e.g. classification's ``classification`` and ``regression``),
``for_task(task_name)`` (``--task_name``), ``families()``. No TensorFlow is imported here nor at the top of the
family modules: settings are checked before TensorFlow loads.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Optional
from xlnet_tf.errors import InputError

# "package:class" of each built-in family (tasks/<family>/): the one line a new built-in family adds.
BUILTIN = (
    "xlnet_tf.tasks.classification:ClassificationFamily",
    "xlnet_tf.tasks.multiple_choice:MultipleChoiceFamily",
    "xlnet_tf.tasks.squad:SquadFamily",
    "xlnet_tf.tasks.tagging:TaggingFamily",
)

_families: dict = {}  # name -> family instance, in registration order
_builtins_loaded = False
_loaded_modules: dict = {}  # --task_module value -> module


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True  # first: a built-in module's own register() call must not recurse here
    for entry in BUILTIN:
        module, cls = entry.split(":")
        family = getattr(importlib.import_module(module), cls)
        if getattr(family, "name", None) not in _families:
            register(family())


def _origin(family) -> tuple:
    """What identifies a family class across two imports of its module (e.g. pytest's and ``--task_module``'s)."""
    cls = type(family)
    try:
        where = os.path.realpath(inspect.getfile(cls))
    except (TypeError, OSError):
        where = cls.__module__
    return where, cls.__qualname__


def register(family):
    """Adds ``family`` (a ``TaskFamily`` instance, or a subclass, which is instantiated) to the registry and returns
    what was given, so it works as a class decorator too. Its name, serving kinds and task names must not clash
    with another family's (a ValueError names both); registering the same class again (its module imported a
    second time) replaces the earlier instance."""
    from xlnet_tf.tasks.base import missing_hooks  # no TensorFlow, no family code

    _load_builtins()
    given = family
    # By its hooks, not isinstance(TaskFamily): a family module imported twice (pytest's and --task_module's
    # import of one file) has classes of its own.
    if not all(callable(getattr(family, hook, None)) for hook in ("task", "task_names")):
        raise ValueError(f"tasks.register: expected a TaskFamily (instance or subclass), got {type(given).__name__}")
    missing = missing_hooks(family if isinstance(family, type) else type(family))
    if missing:
        raise ValueError(f"tasks.register: {'; '.join(missing)} (hooks of tasks.base)")
    if isinstance(family, type):
        family = family()
    if not family.name or not isinstance(family.name, str):
        raise ValueError(f"tasks.register: {type(family).__name__} has no name")
    existing = _families.get(family.name)
    if existing is not None and _origin(existing) != _origin(family):
        raise ValueError(f"tasks.register: a task family named {family.name!r} is registered already "
                         f"({type(existing).__module__}.{type(existing).__qualname__})")
    others = [f for n, f in _families.items() if n != family.name]
    for other in others:
        kinds = set(other.serving.kinds()) & set(family.serving.kinds())
        names = set(other.task_names()) & set(family.task_names())
        if kinds or names:
            what = f"serving kind(s) {sorted(kinds)}" if kinds else f"task name(s) {sorted(names)}"
            raise ValueError(f"tasks.register: {family.name!r} claims {what} of the family {other.name!r}")
    _families[family.name] = family
    return given


def families() -> list:
    """Every registered family, built-in ones first."""
    _load_builtins()
    return list(_families.values())


def get(name: str):
    """The family named ``name``; ValueError listing the registered ones."""
    _load_builtins()
    if name not in _families:
        raise InputError(f"no task family {name!r} is registered (registered: {', '.join(_families)}; a family of "
                         "your own is loaded with --task_module)")
    return _families[name]


def kinds() -> tuple:
    """Every serving kind of the registered families (what an export's metadata may record)."""
    return tuple(kind for family in families() for kind in family.serving.kinds())


def for_kind(kind: str):
    """The family that writes exports of ``kind``; ValueError naming the kinds known."""
    for family in families():
        if kind in family.serving.kinds():
            return family
    raise InputError(f"kind must be one of {', '.join(kinds())}, got {kind!r} (an export of a family of your own: "
                     "load its module with --task_module)")


def task_names() -> list:
    """Every ``--task_name`` the registered families run, family by family."""
    return [name for family in families() for name in family.task_names()]


def for_task(task_name: Optional[str], flag: str = "--task_name"):
    """The family whose tasks include ``task_name`` (any case, or one of its aliases); ValueError listing all."""
    for family in families():
        if task_name and family.canonical_task(task_name) is not None:
            return family
    aliases = sorted(a for family in families() for a in family.aliases())
    raise InputError(f"{flag}={task_name!r}: unknown task; known: {', '.join(task_names())}"
                     + (f" (aliases: {', '.join(aliases)})" if aliases else "")
                     + "; a task family of your own: --task_module")


def for_signature(input_names) -> Optional:
    """The family whose serving signatures take exactly ``input_names`` (for an export that records no kind)."""
    for family in families():
        if family.serving.serves_inputs(set(input_names)):
            return family
    return None


def family_of_record(record: dict):
    """The family of a fine-tuning run record (``finetuning.serving.read_run_record``): the family it names, else
    (a record of an older xlnet_tf) the one family of its runner, else its runner's family of its task."""
    if record.get("family"):
        return get(record["family"])
    candidates = [f for f in families() if f.run_record_runner == record.get("runner")]
    if len(candidates) == 1:
        return candidates[0]
    return for_task(record.get("settings", {}).get("task_name"))


def load_module(spec: Optional[str], flag: str = "--task_module"):
    """Imports a user's task module, which registers its families when imported: ``spec`` is a dotted module name
    (importable from ``sys.path``) or the path of a ``.py`` file. Loading the same spec again does nothing.
    Returns the module (None for an empty ``spec``); a ValueError naming ``flag`` if it is not found or does not
    compile, or an import inside it fails (other exceptions it raises keep their traceback)."""
    if not spec:
        return None
    if spec in _loaded_modules:
        return _loaded_modules[spec]
    _load_builtins()
    if "://" in spec:  # Python imports local files only
        raise InputError(f"{flag}={spec}: a task module is imported from a local .py file or a module name; "
                         "copy it to local disk")
    if spec.endswith(".py") or os.sep in spec:
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise InputError(f"{flag}={spec}: file not found")
        name = "xlnet_tf_task_module_" + "".join(c if c.isalnum() else "_" for c in path)
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except (ImportError, SyntaxError) as e:
            del sys.modules[name]
            raise InputError(f"{flag}={spec}: cannot be imported ({type(e).__name__}: {e})") from e
        except BaseException:
            del sys.modules[name]
            raise
    else:
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as e:
            if e.name and spec.startswith(e.name):
                raise InputError(f"{flag}={spec}: no such module (a dotted module name on the Python path, or the "
                                 "path of a .py file)") from None
            raise InputError(f"{flag}={spec}: cannot be imported ({type(e).__name__}: {e})") from e
        except (ImportError, SyntaxError) as e:
            raise InputError(f"{flag}={spec}: cannot be imported ({type(e).__name__}: {e})") from e
    _loaded_modules[spec] = module
    return module
