"""The one registry mechanism of the package's plug-ins: pretraining objectives (``xlnet_tf.objectives``) and
fine-tuning task families (``xlnet_tf.tasks``).

A ``Registry`` maps names to instances, in registration order, built-in entries first. Its rules, the same for
every kind of plug-in:

- ``register(x)`` takes an instance or a class (instantiated; a class with unimplemented abstract hooks is a
  ``RegistrationError`` naming them) and returns what it was given, so it works as a class decorator too;
- an entry must have a ``name`` and pass the kind's own checks (``check``), and must not claim what another
  entry claims (``clash``): each a ``RegistrationError`` saying which;
- a name taken by another class is refused; the same class registered again (its module imported a second time,
  e.g. by pytest and by ``--task_module``) replaces the earlier instance;
- built-in entries (``"module:Class"`` strings) are imported on first use, so that importing the registry imports
  none of them (their modules import the registry for their base classes);
- ``named(name)`` of an unknown name is an ``InputError`` listing the registered names;
- an entry refused by ``register`` is a ``RegistrationError``: the plug-in's author's input (``tasks.load_module``
  names the ``--task_module`` that registered it).

No TensorFlow here: registries are read while settings are checked, before TensorFlow loads.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping
from typing import Callable, Iterator, Optional

from xlnet_tf.errors import InputError


def origin(entry) -> tuple:
    """What identifies an entry's class across two imports of its module: its file and qualified name."""
    cls = type(entry)
    try:
        where = os.path.realpath(inspect.getfile(cls))
    except (TypeError, OSError):
        where = cls.__module__
    return where, cls.__qualname__


def load(spec: str):
    """The object a ``"module:name"`` string names, its module imported now."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


class RegistrationError(InputError):
    """An entry ``register`` refuses (a hook missing, a name taken): a user's plug-in module is wrong, which a tool
    reports in one line, not as a bug in the tool."""


class Registry(Mapping):
    """Named plug-ins of one kind, by their ``key`` attribute (``name``). ``caller``: the function users call
    (``"tasks.register"``), named in errors; ``base``: the class whose hooks an entry implements; ``check(entry)``:
    the kind's own problems with an entry (a list of strings, empty if none); ``clash(entry, other)``: what
    ``entry`` claims of another entry ("" if nothing); ``builtins``: ``"module:Class"`` of the built-in entries;
    ``unknown``: the end of the message for an unknown name (how to add one)."""

    def __init__(self, kind: str, caller: str, base: str, *, check: Callable[[object], list] = lambda entry: [],
                 clash: Callable[[object, object], str] = lambda entry, other: "", builtins: tuple = (),
                 unknown: str = "", key: str = "name"):
        self.kind, self.caller, self.base, self.key = kind, caller, base, key
        self._check, self._clash, self._builtins, self._unknown = check, clash, tuple(builtins), unknown
        self._entries: dict = {}
        self._builtins_loaded = not self._builtins

    def load_builtins(self) -> None:
        """Imports and registers the built-in entries not registered yet (once; lookups do it first)."""
        if self._builtins_loaded:
            return
        self._builtins_loaded = True  # first: a built-in module's own register() call must not recurse here
        for spec in self._builtins:
            entry = load(spec)
            if getattr(entry, self.key, None) not in self._entries:
                self.register(entry)

    def register(self, entry):
        """Adds ``entry`` (an instance, or a class, which is instantiated) under its name; returns what was given."""
        self.load_builtins()
        given = entry
        if isinstance(entry, type):
            missing = sorted(getattr(entry, "__abstractmethods__", ()))
            if missing:
                raise RegistrationError(f"{self.caller}: {entry.__name__} does not implement {', '.join(missing)} "
                                        f"(hooks of {self.base})")
            entry = entry()
        problems = self._check(entry)
        if problems:
            raise RegistrationError(f"{self.caller}: " + "; ".join(problems))
        name = getattr(entry, self.key, None)
        if not name or not isinstance(name, str):
            raise RegistrationError(f"{self.caller}: {type(entry).__name__} has no {self.key}")
        existing = self._entries.get(name)
        if existing is not None and origin(existing) != origin(entry):
            raise RegistrationError(f"{self.caller}: the {self.kind} name {name!r} is taken by "
                                    f"{type(existing).__module__}.{type(existing).__qualname__}")
        for other_name, other in self._entries.items():
            claimed = other_name != name and self._clash(entry, other)
            if claimed:
                raise RegistrationError(f"{self.caller}: {name!r} claims {claimed} of the {self.kind} {other_name!r}")
        self._entries[name] = entry
        return given

    def copy(self, builtins: Optional[tuple] = None) -> "Registry":
        """A registry of the same kind holding these entries, with ``builtins`` (default: these) loaded on first
        use where not registered yet: one with a built-in line more, say, while this one stays as it is."""
        other = Registry(self.kind, self.caller, self.base, check=self._check, clash=self._clash,
                         builtins=self._builtins if builtins is None else builtins, unknown=self._unknown,
                         key=self.key)
        other._entries = dict(self._entries)
        return other

    def unregister(self, name: str):
        """Removes and returns the entry named ``name`` (a test's own entry, say); KeyError if there is none."""
        self.load_builtins()
        return self._entries.pop(name)

    def named(self, name: Optional[str]):
        """The entry named ``name``; an ``InputError`` listing the registered names (``get``, as for any mapping,
        returns a default instead)."""
        self.load_builtins()
        if name not in self._entries:
            raise InputError(f"no {self.kind} {name!r} is registered (registered: {', '.join(self._entries)})"
                             + (f"; {self._unknown}" if self._unknown else ""))
        return self._entries[name]

    def __getitem__(self, name: str):
        self.load_builtins()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self.load_builtins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_builtins()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<{self.kind} registry: {', '.join(self)}>"
