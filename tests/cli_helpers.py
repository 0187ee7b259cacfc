"""Shared by the command-line tests: a tool's flags parsed from argv as its entry point would, without running it."""

from absl import flags

from xlnet_tf.cli import flags as cli


def parsed(settings_cls, *argv, define=cli.define_flags):
    values = flags.FlagValues()
    define(settings_cls, values)
    rest = values(["prog", *argv])
    return values, rest[1:]


def assert_usage_error(done, program, message):
    """One error line naming the input, one line pointing at --helpfull, exit 1, no traceback."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-2].startswith(f"{program}: error: ") and message in lines[-2], done.stderr
    assert lines[-1].startswith("See `python ") and lines[-1].endswith(" --helpfull` for every flag."), lines[-1]
