"""Shared by the command-line tests: a tool's flags parsed from argv as its entry point would, without running it."""

from absl import flags

from xlnet_tf.cli import flags as cli


def parsed(settings_cls, *argv, define=cli.define_flags):
    values = flags.FlagValues()
    define(settings_cls, values)
    rest = values(["prog", *argv])
    return values, rest[1:]
