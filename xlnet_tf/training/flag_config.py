"""YAML run configs for the absl entry points: ``--config_file`` sets flag values, explicit flags override them."""

from __future__ import annotations

import os

import yaml
from absl import flags


def apply_config_file(flag_values: flags.FlagValues, path: str | None) -> dict:
    """Sets every flag named in the YAML file ``path`` unless it was given on the command line.

    Relative paths in the file are relative to the working directory. Unknown keys and values of the wrong
    type are errors that name the file and the key. Returns the values applied.
    """
    if not path:
        return {}
    if not os.path.exists(path):
        raise flags.ValidationError(f"--config_file={path}: file not found")
    with open(path, encoding="utf-8") as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise flags.ValidationError(f"--config_file={path}: not valid YAML ({e})") from None
    if not isinstance(values, dict):
        raise flags.ValidationError(f"--config_file={path}: expected a mapping of flag names to values")
    applied = {}
    for key, value in values.items():
        if key not in flag_values:
            raise flags.ValidationError(f"{path}: unknown flag {key!r}")
        if flag_values[key].present:  # the command line wins
            continue
        try:
            flag_values[key].value = value if value is None else flag_values[key].parser.parse(
                value if not isinstance(value, bool) else str(value).lower())
        except (ValueError, flags.IllegalFlagValueError) as e:
            raise flags.ValidationError(f"{path}: bad value for {key!r}: {e}") from None
        applied[key] = value
    return applied
