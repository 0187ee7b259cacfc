"""The error the library raises for what a user caused (no TensorFlow, no dependencies: every layer imports it).

``InputError`` (a ``ValueError``) means: an input the user gave cannot be used — a flag value, settings that
contradict each other, a missing or malformed file, an unreadable checkpoint, a job file. Its message names the
input (the flag, the file, file:line) and says what is wrong, so the command-line tools print it as one line
instead of a traceback (``xlnet_tf.cli.flags``). Subclasses say where it came from: ``SettingsError``
(``xlnet_tf.training.settings``: settings checked before any work), ``JobError`` (a job file), ``RegistrationError``
(``xlnet_tf.registry``: a plug-in a user's module registers is refused),
``MissingInputError`` (a file, directory or checkpoint named is not there; a ``FileNotFoundError`` too),
``TPUStartupError`` (``--tpu``: the TPU cannot be found or reached), ``DivergedError`` (the loss became NaN or
infinite: the learning rate or the data). ``WorkerLostError`` is not the user's
doing but is reported the same way: a lost worker ends a multi-worker run. Anything else that escapes a tool is a
bug and keeps its traceback.
"""


class InputError(ValueError):
    """An input a user gave (flag, file, checkpoint) cannot be used; the message names it."""


class MissingInputError(InputError, FileNotFoundError):
    """A file, directory or checkpoint the user named is not there (a ``FileNotFoundError`` too, as Python's own
    would be, so that either catches it)."""


class TPUStartupError(InputError):
    """The TPU named by ``--tpu`` could not be found, reached or initialised in ``--tpu_timeout`` seconds; the
    message says which step failed and what to check."""


class DivergedError(InputError, FloatingPointError):
    """Training stopped, saving nothing, at a NaN or infinite loss; the message names the last good checkpoint and
    what to change. (A ``FloatingPointError`` too, as it was before it was a one-line error of the tools.)"""


class WorkerLostError(RuntimeError):
    """A multi-worker run stopped because another worker stopped answering (killed, preempted, out of memory):
    not a bug here, and a rerun of every worker resumes from the last checkpoint; the message says from which."""
