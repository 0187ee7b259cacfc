"""The one command-line mechanism of every tool (run_*.py and ``python -m xlnet_tf.cli.<tool>``).

A tool is a settings dataclass and a function that takes it::

    @dataclasses.dataclass
    class ToolSettings(cli.Settings):                      # no TensorFlow in a settings module
        output_dir: Optional[str] = cli.setting(None, "Where to write the result.")
        format: str = cli.setting("native", "Output layout.", choices=("native", "release"))
        def required(self): return ("output_dir",)        # errors()/validate(): every problem at once

    def main(s: ToolSettings): ...                         # imports TensorFlow, does the work

    if __name__ == "__main__":
        cli.run(ToolSettings, main)                        # or "module:function", imported after validation

* **Flags from the settings, each once.** ``define_flags`` defines one absl flag per field: its name, its default
  (the field's), its type (the annotation: bool, int, float, str, Optional of one), its help and, with
  ``choices``, an enum flag — all from the field (``setting(default, help, choices=...)``). A subclass that only
  changes a default inherits the help. Fields declared ``positional`` are command-line arguments after the flags
  (``python -m xlnet_tf.cli.jobs finetune JOB.yaml``), read from absl's remaining argv. Original flag names a
  tool keeps accepting are declared by the settings class in ``ORIGINAL_FLAGS``: ``Alias`` (sets another
  setting) or ``Ignored`` (accepted, no effect). Fields a tool inherits but refuses are its ``NOT_FLAGS`` (no flag,
  the field keeps its default; given anyway, the error says what to use instead). ``setting``, ``setting_of`` (a
  field shared by classes that do not inherit it), ``Settings``, ``Alias`` and ``Ignored`` live in
  ``xlnet_tf.training.settings`` (the library's settings declare their flags without depending on this module)
  and are re-exported here.
* **``--config_file``** (every tool): a YAML mapping of flag names to values, applied after parsing to the flags
  not given on the command line (the command line wins). Every unknown key and bad value is reported at once,
  naming the file, the key and what it expects: a value of another YAML type (a list, a number for a path), and a
  null for a setting that cannot be unset (its type is not ``Optional``), are refused; a whole number written
  as a float (``10.0``, ``1e3``) sets an integer. No tool applies a config file the user did not name.
* **``run``** is a tool's whole ``main``: parses the flags, applies the config file, builds and validates the
  settings (before TensorFlow is imported: settings modules never import it), imports TensorFlow for the tools that
  use it (``import_tensorflow``: without what Keras imports only to offer), calls the target (it returns None,
  an exit status, or a run's report, logged as the last line), and ends the process at once when it is done
  (``_exit_now``: skips the interpreter teardown, where live tf.data iterators can block for a minute).
* **Errors.** A usage error prints ``<prog>: error: <message>`` and one line pointing at ``--helpfull``, and
  exits 1: a bad flag (unknown, bad value, wrong type), a bad ``--config_file``, and every error the user caused
  (``USER_ERRORS``), also when the library raises it mid-run. The hierarchy:

  - ``xlnet_tf.errors.InputError`` (a ``ValueError``): an input the user gave cannot be used; the message names
    it (flag, file, file:line). The library raises it (or a subclass) for bad files, bad values and unreadable
    checkpoints. Subclasses: ``SettingsError`` (``xlnet_tf.training.settings``: settings that contradict each
    other or name missing inputs, raised by ``validate()`` before any work), ``JobError`` (a job file),
    ``SquadFileError`` (a SQuAD file).
  - ``OSError``s that name a path the user gave (``FileNotFoundError``, ``FileExistsError``,
    ``NotADirectoryError``, ``IsADirectoryError``, ``PermissionError``) and absl's ``flags.Error``.
  - ``xlnet_tf.errors.WorkerLostError``: another worker of a multi-worker run was lost; the line says how to
    resume (no ``--helpfull`` pointer: no flag is wrong).
  - One of these raised inside TensorFlow (a tf.data generator, a py_function), which re-raises it as its own
    error with the Python traceback in its message: the message alone is printed. And TensorFlow's
    ``DataLossError`` (a damaged TFRecord or checkpoint file), a full disk or quota, a file-size limit
    (``ulimit -f``), a read-only file system (the file being written named, also from TensorFlow's writers), a
    URI TensorFlow cannot use: no network, no credentials, permission denied (``io_utils.uri_error_message``;
    ``user_error_message``).

  Anything else is a bug and keeps its traceback (and a non-zero exit).
* **Stopping.** A training run stopped by SIGTERM or Ctrl-C checkpoints after its current host loop and exits
  143 or 130 (``exit_status``), as a process that signal ended; Ctrl-C anywhere else prints one line and exits 130.
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import importlib
import math
import os
import re
import signal
import sys
import types
import typing
from typing import Callable, Optional, Union

from absl import app, flags, logging

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError, WorkerLostError
from xlnet_tf.training.settings import (Alias, Ignored, Settings, SettingsError, field_metadata, setting,
                                       setting_of)

__all__ = ["Alias", "Ignored", "InputError", "Settings", "SettingsError", "USER_ERRORS", "apply_config_file",
           "define_flags", "run", "setting", "setting_of", "settings_from_flags", "summary", "usage_error",
           "user_error_message"]

FLAGS = flags.FLAGS
CONFIG_FILE_HELP = ("YAML file of flag values (names without --); flags on the command line override it. "
                    "Default: none.")
# What a user caused: reported as one line, without a traceback (see the module docstring).
USER_ERRORS = (InputError, WorkerLostError, FileNotFoundError, FileExistsError, NotADirectoryError,
               IsADirectoryError, PermissionError, flags.Error)
_DEFINE = {bool: flags.DEFINE_boolean, int: flags.DEFINE_integer, float: flags.DEFINE_float,
           str: flags.DEFINE_string}
_ALLOWS_NONE = "xlnet_tf_allows_none"  # the attribute of a defined flag that says whether a file's null may set it


# -- defining flags -------------------------------------------------------------------------------------------------

def _kind(annotation) -> type:
    """bool, int, float or str from a field annotation (``Optional`` of one of them)."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    if annotation not in _DEFINE:
        raise TypeError(f"no flag type for {annotation!r} (settings fields are bool, int, float or str)")
    return annotation


def _allows_none(annotation) -> bool:
    """Whether a field of this annotation may be None (``Optional``)."""
    return typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _define(flag_values: flags.FlagValues, kind: type, name: str, default, help: str,  # noqa: A002
            choices=None, allows_none: Optional[bool] = None) -> None:
    if choices is not None:
        flags.DEFINE_enum(name, default, [str(c) for c in choices], help, flag_values=flag_values)
    else:
        _DEFINE[kind](name, default, help, flag_values=flag_values)
    # A key flag of the running program: --help lists it with the program's own.
    flag_values.register_key_flag_for_module(sys.argv[0], flag_values[name])
    # absl's flags know no "unset": whether a file's null may set this one is the field's type (Optional), kept on
    # the flag for apply_values (a null for an int or float setting passed every check and failed mid-run).
    setattr(flag_values[name], _ALLOWS_NONE, default is None if allows_none is None else allows_none)


def define_flags(settings_cls, flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines ``--config_file``, one flag per field of ``settings_cls`` (positional fields and its ``NOT_FLAGS``
    excepted) and its ``ORIGINAL_FLAGS``."""
    hints = typing.get_type_hints(settings_cls)
    _define(flag_values, str, "config_file", None, CONFIG_FILE_HELP)
    for field in dataclasses.fields(settings_cls):
        meta = field_metadata(settings_cls, field.name)
        if meta.get("positional"):
            continue
        if field.default is dataclasses.MISSING:
            raise TypeError(f"{settings_cls.__name__}.{field.name} has no default: a flag needs one")
        if field.name in settings_cls.NOT_FLAGS:  # the tool takes no flag for it: it keeps its default
            continue
        bounds = f" Must be {meta['bounds']}." if meta.get("bounds") else ""
        _define(flag_values, _kind(hints[field.name]), field.name, field.default, meta["help"] + bounds,
                meta.get("choices"), _allows_none(hints[field.name]))
    for name, original in settings_cls.ORIGINAL_FLAGS.items():
        if isinstance(original, Alias):
            if original.value is not None:  # a switch: --use_tpu
                _define(flag_values, bool, name, False, original.help)
            else:  # another name of a setting: --record_info_dir=D
                _define(flag_values, _kind(hints[original.target]), name, None, original.help)
        elif isinstance(original, Ignored):
            kind = original.kind or (str if original.default is None else type(original.default))
            _define(flag_values, kind, name, original.default, original.help)
        else:
            raise TypeError(f"{settings_cls.__name__}.ORIGINAL_FLAGS[{name!r}]: an Alias or Ignored, not {original!r}")


def positional_fields(settings_cls) -> list:
    """The fields read from the command-line arguments after the flags, in order."""
    return [f.name for f in dataclasses.fields(settings_cls) if f.metadata.get("positional")]


# -- from flags to settings -----------------------------------------------------------------------------------------

def apply_config_file(flag_values: flags.FlagValues, path: Optional[str], settings_cls=None) -> dict:
    """Sets every flag named in the YAML file ``path`` unless it was given on the command line.

    Relative paths in the file are relative to the working directory. Unknown keys and values of the wrong
    type are errors that name the file and the key (``apply_values``). Returns the values applied.
    """
    if not path:
        return {}
    # A URI (gs://...) is read through tf.io.gfile: the one case where TensorFlow loads before the settings
    # are checked (the file holds them).
    values = io_utils.read_mapping(path, label=f"--config_file={path}", expected="a mapping of flag names to values",
                                   empty=True, error=flags.ValidationError)
    return apply_values(flag_values, values, path, settings_cls)


def apply_values(flag_values: flags.FlagValues, values: dict, label: str, settings_cls=None) -> dict:
    """Sets the flags of ``values`` (a config file's, a job file's run) not given on the command line, each parsed
    as its flag parses a command-line value (``_file_value``: YAML's types too). Every unknown name and every value
    of the wrong type, a null included where the setting cannot be unset, is reported at once as one
    ``flags.ValidationError`` naming ``label``, the key and what it expects. ``settings_cls`` (the flags' settings
    class): its ``NOT_FLAGS`` say what to use instead of a key the tool takes no flag for. Returns the values
    applied."""
    applied, problems = {}, []
    for key, value in values.items():
        if key not in flag_values:
            instead = getattr(settings_cls, "NOT_FLAGS", {}).get(key)
            problems.append(f"unknown flag {key!r}" + (f" ({instead})" if instead else ""))
            continue
        if flag_values[key].present:  # the command line wins
            continue
        try:
            flag_values[key].value = _file_value(flag_values[key], value)
        except ValueError as e:
            problems.append(f"bad value for {key!r}: {e}")
            continue
        flag_values[key].using_default_value = False  # given, below the command line (aliases: _given_at)
        applied[key] = value
    if problems:
        raise flags.ValidationError(f"{label}: {'; '.join(problems)}")
    return applied


def _expected(flag) -> str:
    """What a flag takes, as an error says it."""
    parser = flag.parser
    if isinstance(parser, flags.BooleanParser):
        return "true or false"
    if isinstance(parser, flags.IntegerParser):
        return "an integer"
    if isinstance(parser, flags.FloatParser):
        return "a number"
    if isinstance(parser, flags.EnumParser):
        return f"one of {', '.join(parser.enum_values)}"
    return "a string"


def _file_value(flag, value):
    """``value`` as a YAML file gives it (None, bool, int, float, str, list, dict) as the value of ``flag``; a
    ValueError saying what the flag expects. A whole number written as a float (``10.0``, ``1e3``: YAML reads the
    latter as a string) sets an integer setting: it is that integer; ``10.5`` is refused. A number for a string
    setting is refused, not converted: YAML has already changed it (``1.10`` is 1.1, ``010`` is 8), so the user
    quotes what they mean."""
    expected, parser = _expected(flag), flag.parser
    if value is None:
        if not getattr(flag, _ALLOWS_NONE, flag.default is None):
            raise ValueError(f"null (expected {expected}: this setting cannot be unset)")
        return None
    if isinstance(parser, flags.BooleanParser):
        value = str(value).lower() if isinstance(value, bool) else value
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} (expected {expected})")
    elif isinstance(parser, flags.IntegerParser):
        whole = _whole_number(parser, value)
        if whole is None:
            raise ValueError(f"{value!r} (expected {expected})")
        value = whole
    elif not isinstance(value, str) and not isinstance(parser, flags.FloatParser):  # a string or enum setting
        raise ValueError(f"{value!r} is a number (expected {expected}; quote it if you mean the text '{value}')")
    try:
        return parser.parse(value)
    except (ValueError, TypeError, flags.IllegalFlagValueError):
        raise ValueError(f"{value!r} (expected {expected})") from None


def _whole_number(parser, value):
    """The integer ``value`` (an int, a float, or a string of one: '12', '0x10', '1e3') is, or None."""
    if isinstance(value, str):
        try:
            return parser.parse(value)  # absl's integers: 12, -3, 0x10, 0o17
        except ValueError:
            pass
        try:
            value = float(value)
        except ValueError:
            return None
    return int(value) if isinstance(value, int) or value.is_integer() else None


def _given_at(flag) -> int:
    """Where a flag's value comes from, by precedence: 2 the command line, 1 a config file (``apply_values``), 0
    its default."""
    return 2 if flag.present else 0 if flag.using_default_value else 1


def _resolve_aliases(settings_cls, flag_values: flags.FlagValues, values: dict) -> None:
    """Sets each target of an ``ORIGINAL_FLAGS`` alias in ``values`` by where the two were given (an original name
    on the command line beats the new name in a config file, and the reverse): the higher level wins; on one level,
    the new name does, and a switch contradicting its target (``--use_bfloat16 --dtype=float32``) is an error."""
    conflicts = []
    for name, original in settings_cls.ORIGINAL_FLAGS.items():
        if not isinstance(original, Alias) or name not in values:
            continue
        value = values[name] if original.value is None else original.value if values[name] else None
        alias_level, target_level = _given_at(flag_values[name]), _given_at(flag_values[original.target])
        if value in (None, "") or alias_level < target_level:
            continue
        if alias_level > target_level or values[original.target] in (None, ""):
            values[original.target] = value
        elif original.value is not None and values[original.target] != value:
            where = "on the command line" if alias_level == 2 else "in --config_file"
            conflicts.append(f"--{name} (--{original.target}={value}) contradicts --{original.target}="
                             f"{values[original.target]} {where}: give one of them")
    if conflicts:
        raise SettingsError("; ".join(conflicts))


def settings_from_flags(settings_cls, flag_values: flags.FlagValues = FLAGS, args=()):
    """``settings_cls`` from the parsed flags (one flag per field), after its ``ORIGINAL_FLAGS`` aliases; ``args``
    (the command-line arguments after the flags) fill its positional fields, in order."""
    values = flag_values.flag_values_dict()
    _resolve_aliases(settings_cls, flag_values, values)
    positional, args = positional_fields(settings_cls), list(args)
    if positional and field_metadata(settings_cls, positional[-1]).get("positional") == "rest":
        fixed = len(positional) - 1
        values[positional[-1]] = tuple(args[fixed:])
        positional, args = positional[:fixed], args[:fixed]
    if len(args) < len(positional):
        raise SettingsError(f"missing argument(s): {' '.join(n.upper() for n in positional[len(args):])}")
    if len(args) > len(positional):
        raise SettingsError(f"unexpected argument(s): {' '.join(args[len(positional):])}")
    for name, value in zip(positional, args):
        choices = field_metadata(settings_cls, name).get("choices")
        if choices is not None and value not in choices:
            raise SettingsError(f"{name.upper()}={value!r} must be one of {', '.join(choices)}")
        values[name] = value
    unset = [f.name for f in dataclasses.fields(settings_cls) if f.name not in values and
             f.name not in settings_cls.NOT_FLAGS]
    if unset:
        raise KeyError(f"{settings_cls.__name__} fields without a flag: {unset}")
    return settings_cls.from_values(values)


# -- running a tool -------------------------------------------------------------------------------------------------

def _program() -> tuple:
    """(the name in messages, the command that runs it): run_pretrain.py, python -m xlnet_tf.cli.export, or a
    console script's name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name.startswith("xlnet_tf."):  # python -m: argv[0] is the module's file path
        return spec.name, f"python -m {spec.name}"
    name = os.path.basename(sys.argv[0])
    return name, f"python {name}" if name.endswith(".py") else name


def usage_error(message) -> None:
    """Ends the process with ``message`` and one line pointing at ``--helpfull`` (not the whole help), exit 1."""
    name, command = _program()
    sys.stdout.flush()
    hint = "" if isinstance(message, WorkerLostError) else f"See `{command} --helpfull` for every flag.\n"
    sys.stderr.write(f"{name}: error: {message}\n{hint}")
    _exit_now(1)


# What Keras and TF Lite import while TensorFlow loads, each under ``try: ... except ImportError``, only to offer what
# no tool uses (scikit-learn wrappers, pandas DataFrames as inputs, matplotlib plots, jax conversion): ~3.5 s of the
# ~9 s CPU of importing TensorFlow on 2 cores (AMD EPYC), paid by every tool's process and every worker.
_IMPORTED_ONLY_TO_OFFER = ("sklearn", "pandas", "matplotlib", "jax")


def import_tensorflow() -> None:
    """Imports TensorFlow and Keras with the modules above refused while they load (Keras's scikit-learn wrappers,
    pandas inputs and plots are then off in this process); afterwards those import as usual (the fine-tuning
    metrics use scikit-learn). Only for a tool's own process: a library caller keeps all of Keras."""
    if "tensorflow" in sys.modules:
        return
    refused = [name for name in _IMPORTED_ONLY_TO_OFFER if name not in sys.modules]
    sys.modules.update(dict.fromkeys(refused))  # None: "import name" raises ImportError
    try:
        importlib.import_module("tensorflow")
        importlib.import_module("keras")
    finally:
        for name in refused:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def run(settings_cls, target: Union[str, Callable], *, defaults_for: Optional[Callable] = None,
        with_given: bool = False, tensorflow: Union[bool, Callable] = True) -> None:
    """Runs a tool: parses the flags (defining them from ``settings_cls`` unless the tool did), applies
    ``--config_file``, then ``defaults_for(flags)`` to the flags neither given nor in the file (e.g.
    run_classifier.py's RACE defaults), builds and validates the settings before TensorFlow is imported, and calls
    ``target(settings)`` (``target(settings, given)`` with ``with_given``: the names of the settings given on the
    command line or in the file). ``target``: a function, or "module:function" (imported after the settings are
    checked). Its result: a run's report (a dict, logged as the last line) or the exit status (an int).
    ``tensorflow=False``: a tool that does not use TensorFlow (it is imported only where a setting is a URI); a
    function of the settings: whether this run uses it."""

    # TensorFlow's C++ INFO lines (CUDA probing, oneDNN notices, "Local rendezvous is aborting with status:
    # OUT_OF_RANGE" at the end of every evaluation) say nothing a user can act on; warnings and errors stay.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    define_flags(settings_cls)

    def parse(argv):
        try:
            return FLAGS(argv)
        except flags.UnrecognizedFlagError as e:
            instead = settings_cls.NOT_FLAGS.get(e.flagname)  # (not absl's "Did you mean" of a look-alike flag)
            usage_error(f"Unknown command line flag {e.flagname!r} ({instead})" if instead else e)
        except flags.Error as e:
            usage_error(e)

    def main(argv):
        interrupted = False
        try:
            applied = apply_config_file(FLAGS, FLAGS.config_file, settings_cls)
            for name, value in (defaults_for(FLAGS) if defaults_for else {}).items():
                if not FLAGS[name].present and name not in applied:
                    FLAGS[name].value = value
            settings = settings_from_flags(settings_cls, FLAGS, argv[1:]).validate()
            if getattr(settings, "deterministic", False):  # before TensorFlow loads (see training.setup)
                os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
            uris = any(isinstance(v, str) and io_utils.is_uri(v) for v in dataclasses.asdict(settings).values())
            if (tensorflow(settings) if callable(tensorflow) else tensorflow) or uris:
                import_tensorflow()
            if uris:  # checked with tf.io.gfile: the local checks passed without TensorFlow, now the URIs'
                settings.validate()
            function = target
            if isinstance(target, str):
                module, name = target.split(":")
                function = getattr(importlib.import_module(module), name)
            if with_given:
                given = {f.name for f in dataclasses.fields(settings_cls)
                         if f.name in FLAGS and FLAGS[f.name].present} | set(applied)
                result = function(settings, given)
            else:
                result = function(settings)
        except KeyboardInterrupt:  # Ctrl-C outside the training loop (which stops at a checkpoint instead)
            interrupted = True
        except Exception as e:  # noqa: BLE001 (what is not the user's is raised again, with its traceback)
            message = user_error_message(e)
            if message is None:
                raise
            usage_error(e if isinstance(e, USER_ERRORS) else message)
        if interrupted:
            # Out of the except block, its traceback's frames are freed (and with them, say, a process pool's
            # semaphores, which the quick exit would otherwise leave to multiprocessing's tracker to warn about).
            gc.collect()
            sys.stdout.flush()
            sys.stderr.write(f"{_program()[0]}: stopped by Ctrl-C\n")
            _exit_now(128 + signal.SIGINT)
        if isinstance(result, dict):
            logging.info("%s: %s", "ended" if stopped_by(result) else "done", summary(result))
        _exit_now(exit_status(result))

    app.run(main, flags_parser=parse)


# How TensorFlow reports an exception raised in Python code it runs (a tf.data generator, a py_function): the
# exception's class name and message, then its Python traceback ("{{function_node ...}} InputError: <message>\n
# Traceback (most recent call last): ...").
_WRAPPED = re.compile(r"(?:^|\}\} |\n)(\w+): (.*?)(?:\nTraceback \(most recent call last\)|\Z)", re.S)
# A URI in TensorFlow's message of a filesystem error (io_utils.uri_error_message says which are).
_URI_IN_MESSAGE = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"]+")
# Out of disk or quota, a file-size limit (ulimit -f), a read-only file system: the user's to fix, whichever file
# was being written.
_USER_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG}
# TensorFlow's C++ writers (TFRecord files, SaveV2's checkpoints and exports) report these errnos as a
# ResourceExhaustedError (or another class) whose message is "<path>; <strerror>", after a "{{function_node ...}}"
# and before an " [Op:SaveV2]".
_DISK_ERROR = re.compile(r"^(?:\{\{[^}]*\}\}\s*)?(.*?);\s*(" + "|".join(re.escape(os.strerror(e)) for e in
                                                                  sorted(_USER_ERRNOS)) + r")\b")


def _user_error_names() -> set:
    names, todo = set(), [e for e in USER_ERRORS if e is not flags.Error]  # (absl's "Error": too generic a name)
    while todo:
        klass = todo.pop()
        names.add(klass.__name__)
        todo += klass.__subclasses__()
    return names


def user_error_message(error: BaseException) -> Optional[str]:
    """The one line to print for an error the user caused, or None for a bug (it keeps its traceback):
    ``USER_ERRORS``; one of them raised inside TensorFlow (a tf.data generator, a py_function), which TensorFlow
    re-raises as its own error with the Python traceback in the message; a ``DataLossError`` (a damaged TFRecord
    or checkpoint file); a full disk or quota, a file-size limit or a read-only file system, raised by Python or by
    TensorFlow's writers, named with the file being written."""
    if isinstance(error, USER_ERRORS):
        return str(error)
    if isinstance(error, OSError) and error.errno in _USER_ERRNOS:
        return f"{error.filename}: {error.strerror}" if error.filename else str(error)
    if not type(error).__module__.startswith("tensorflow."):
        return None
    text = getattr(error, "message", None) or str(error)
    wrapped = _WRAPPED.search(text)
    if wrapped and wrapped.group(1) in _user_error_names():
        return wrapped.group(2).strip()
    disk = _DISK_ERROR.search(text.strip().splitlines()[0] if text.strip() else "")
    if disk:
        return f"{disk.group(1).strip()}: {disk.group(2)}"
    uri = _URI_IN_MESSAGE.search(text)  # a checkpoint, summary or TFRecord on gs://... that TensorFlow cannot use
    message = uri and io_utils.uri_error_message(uri.group(0).rstrip(".,;:'\")"), error)
    if message:
        return message
    if type(error).__name__ == "DataLossError":
        detail = re.sub(r"\{\{[^}]*\}\}\s*", "", text).strip().splitlines()
        return (f"damaged input: {detail[0] if detail else 'DataLossError'} (a truncated or corrupt TFRecord or "
                "checkpoint file: write it again)")
    return None


def _remove_autograph_files() -> None:
    """Deletes the source files autograph wrote for the functions it converted in this process (tf.data's map
    functions among them). TensorFlow deletes them in an exit handler, which os._exit skips; each is the file of a
    module it keeps in sys.modules under this prefix."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith("__autograph_generated_file") else None
        if path:
            try:
                os.remove(path)
            except OSError:  # already gone ($TMPDIR cleaned under us): nothing left to remove
                pass


def _exit_now(code: int = 0) -> None:
    """Ends a finished run's process at once. Everything is written by now (checkpoints synchronously, TensorBoard
    flushed after every report); what is skipped is the interpreter's teardown, where each tf.data iterator still
    alive can block for up to a minute (TensorFlow 2.20: its autotuning thread may miss the cancellation and
    sleep out its period; measured 11-197 s for one MirroredStrategy iterator). The one exit handler that matters
    runs here: autograph's removal of the temporary files it wrote (each would otherwise stay in $TMPDIR, a dozen
    files a run)."""
    _remove_autograph_files()
    logging.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def stopped_by(result) -> Optional[str]:
    """The signal that stopped a run's training (``run_host_loops``: a checkpoint, then the run ends), or None."""
    train = result.get("train", result) if isinstance(result, dict) else {}
    return train.get("stopped_by") if isinstance(train, dict) else None


def exit_status(result) -> int:
    """A target's result as the process's exit status: an int as it is; a run stopped by a signal (checkpointed,
    to be resumed) 128 + the signal's number, as the shell reports a process that signal ended, so that a scheduler
    does not count it done (a Kubernetes Job counts exit 0 as success); else 0."""
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    by = stopped_by(result)
    if by is None:
        return 0
    return 128 + (signal.SIGINT if by == "SIGINT" else signal.SIGTERM)  # "another worker": its preemption


def _number(value) -> str:
    """A metric for the last line: a count as the integer it is (SQuAD's ``total 18000``, not ``1.8e+04``), other
    values to 4 significant digits, without an exponent below 1e15 (an eval loss of 12345.67 reads ``12346``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        return str(number)
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    if 1e4 <= abs(number) < 1e15:
        return f"{number:.0f}"
    return f"{number:.4g}"


def summary(result: dict) -> str:
    """What a run did, for its last log line: ``result`` is pretraining's last metrics, or fine-tuning's stages
    (``train``, ``eval``, ``predict``, ``export``)."""
    if "step" in result:  # pretraining
        result = {"train": result}
    parts = []
    if "train" in result:
        train = result["train"]
        loss = f" (loss {train['loss']:.4g})" if "loss" in train else " (nothing left to train)"
        by = stopped_by(result)
        parts.append(f"{f'stopped by {by} at' if by else 'trained to'} step {train.get('step')}{loss}"
                     + ("; rerun the same command to resume" if by else ""))
    if "eval" in result:
        report = result["eval"]
        metrics = ", ".join(f"{k} {_number(v)}" for k, v in report["metrics"].items())
        parts.append(f"evaluated {report.get('split', '')} at step {report.get('step')}: {metrics}")
        if report.get("hint"):  # what to do with a metric (SQuAD 2.0: the flag applying the best threshold)
            parts.append(report["hint"])
        if "best_checkpoint" in report:  # --eval_all_ckpt's, which may not be the last (the one exported)
            from xlnet_tf.tasks.base import best_line
            parts.append(best_line(report))
    if result.get("predict"):
        parts.append(f"predictions in {', '.join(result['predict'])}")
    if result.get("export"):
        parts.append(f"exported {result['export']}")
    return "; ".join(parts) or "nothing to do (no --do_train, --do_eval, --do_predict or --export_dir)"
