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
import os
import sys
from typing import Optional

from xlnet_tf.errors import InputError
from xlnet_tf.registry import RegistrationError, Registry

# "package:class" of each built-in family (tasks/<family>/): the one line a new built-in family adds.
BUILTIN = (
    "xlnet_tf.tasks.classification:ClassificationFamily",
    "xlnet_tf.tasks.multiple_choice:MultipleChoiceFamily",
    "xlnet_tf.tasks.squad:SquadFamily",
    "xlnet_tf.tasks.tagging:TaggingFamily",
)

_loaded_modules: dict = {}  # --task_module value -> module


def _problems(family) -> list:
    """What keeps ``family`` (an instance) from being a task family: checked by its hooks, not by
    isinstance(TaskFamily), since a family module imported twice (pytest's and --task_module's import of one file)
    has classes of its own; then the hooks its ``serving_class`` and ``batch_class`` lack."""
    from xlnet_tf.tasks.base import missing_hooks  # no TensorFlow, no family code

    if not all(callable(getattr(family, hook, None)) for hook in ("task", "task_names")):
        return [f"expected a TaskFamily (instance or subclass), got {type(family).__name__}"]
    return missing_hooks(type(family))


def _claims(family, other) -> str:
    """What ``family`` claims of ``other``: its serving kinds or task names."""
    kinds = set(other.serving.kinds()) & set(family.serving.kinds())
    names = set(other.task_names()) & set(family.task_names())
    return (f"serving kind(s) {sorted(kinds)}" if kinds else f"task name(s) {sorted(names)}") if kinds or names else ""


# name -> family, in registration order, the built-in ones (BUILTIN, loaded on first use) first: xlnet_tf.registry,
# the mechanism the objectives use too.
FAMILIES = Registry("task family", "tasks.register", "tasks.base.TaskFamily", check=_problems, clash=_claims,
                    builtins=BUILTIN, unknown="a family of your own is loaded with --task_module")


def register(family):
    """Adds ``family`` (a ``TaskFamily`` instance, or a subclass, which is instantiated) to the registry and returns
    what was given, so it works as a class decorator too. Its name, serving kinds and task names must not clash
    with another family's (a ValueError names both); registering the same class again (its module imported a
    second time) replaces the earlier instance."""
    return FAMILIES.register(family)


def families() -> list:
    """Every registered family, built-in ones first."""
    return list(FAMILIES.values())


def get(name: str):
    """The family named ``name``; an InputError listing the registered ones."""
    return FAMILIES.named(name)


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


def task_named(family, task_name: Optional[str]) -> str:
    """A task as ``family`` names it: aliases resolved, lower case (``SST2`` -> ``sst-2``); the family's name for
    a run whose settings name no task. For comparing a run's task with another's."""
    if not task_name:
        return family.name
    return family.canonical_task(task_name) or task_name.lower()


def task_of_record(record: dict) -> tuple:
    """``(family, task)`` a fine-tuning run record says the run fine-tuned (``task_named``)."""
    family = family_of_record(record)
    return family, task_named(family, family.task_name_of(record["settings"]))


def other_task_of_record(record: dict, family, settings) -> Optional[tuple]:
    """``(recorded task, this task)`` where the run record ``record`` is of another task than the one ``settings``
    (of ``family``) names, else None: tasks as their families name them (``task_named``: aliases, any case)."""
    import dataclasses

    theirs, recorded = task_of_record(record)
    ours = task_named(family, family.task_name_of(dataclasses.asdict(settings)))
    return (recorded, ours) if (theirs.name, recorded) != (family.name, ours) else None


# Settings of a run that rebuilding its model does not read (and whose paths may no longer exist); the stages'
# inputs would otherwise ask for their stage ("--predict_input_glob is read by --do_predict").
_RUN_ONLY = ("data_dir", "output_dir", "predict_dir", "init_checkpoint", "train_file", "predict_file", "config_file",
             "predict_input_glob", "do_prepro")


def run_settings(model_dir: str, values: Optional[dict] = None, *, task_name: Optional[str] = None,
                 task_module: Optional[str] = None):
    """The fine-tuning settings (its family's settings class, validated) that rebuild the model of the run in
    ``model_dir``: its record (``finetuning.serving.read_run_record``; its task module, else ``task_module``,
    loaded) with ``values`` on top and nothing to train, evaluate or predict; without a record, those of
    ``task_name`` and ``values``. None for neither (a pretraining run). A ``task_name`` other than the record's
    is a ``SettingsError``."""
    from xlnet_tf.finetuning.serving import RUN_RECORD, read_run_record
    from xlnet_tf.training.settings import SettingsError

    load_module(task_module)
    record = read_run_record(model_dir)
    recorded = dict(record["settings"]) if record else {}
    if recorded.get("task_module") and not task_module:
        load_module(recorded["task_module"], f"{os.path.join(model_dir, RUN_RECORD)}: task_module")
    family = family_of_record(record) if record else None
    recorded_task = family.task_name_of(recorded) if family else None
    if task_name is not None and record and task_named(family, task_name) != task_named(family, recorded_task):
        raise SettingsError(f"--task_name={task_name}, but --model_dir={model_dir} was fine-tuned on "
                            f"{recorded_task} (its finetune_settings.json)")
    task = recorded_task or task_name
    if not task:
        return None
    for name in _RUN_ONLY:
        recorded.pop(name, None)
    recorded.update(values or {}, model_dir=model_dir, do_train=False, do_eval=False, do_predict=False)
    recorded.setdefault("dtype", "float32")
    settings = (family or for_task(task)).settings_for_export(recorded, task)
    settings.needs_a_stage = False  # it rebuilds the model, nothing to train, evaluate, predict or export
    return settings.validate()


def load_module(spec: Optional[str], flag: str = "--task_module"):
    """Imports a user's task module, which registers its families when imported: ``spec`` is a dotted module name
    (importable from ``sys.path``) or the path of a ``.py`` file. Loading the same spec again does nothing.
    Returns the module (None for an empty ``spec``); a ValueError naming ``flag`` if it is not found or does not
    compile, an import inside it fails, or a family it registers is refused (other exceptions it raises keep their
    traceback)."""
    if not spec:
        return None
    if spec in _loaded_modules:
        return _loaded_modules[spec]
    FAMILIES.load_builtins()  # first: a user family must not take a built-in one's name
    if "://" in spec:  # Python imports local files only
        raise InputError(f"{flag}={spec}: a task module is imported from a local .py file or a module name; "
                         "copy it to local disk")
    if spec.endswith(".py") or os.sep in spec:
        path = os.path.abspath(spec)
        if os.path.isdir(path):  # a package's directory: Python imports a package by its name, not its path
            raise InputError(f"{flag}={spec}: a directory; give a .py file, or a package's dotted name (with its "
                             "parent directory on PYTHONPATH)")
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
        except RegistrationError as e:  # its family is incomplete or takes a taken name: one line naming the module
            del sys.modules[name]
            raise InputError(f"{flag}={spec}: {e}") from e
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
        except RegistrationError as e:
            raise InputError(f"{flag}={spec}: {e}") from e
    _loaded_modules[spec] = module
    return module
