"""The command-line layer of the entry points (flags, ``--config_file``, settings from flags, usage errors)."""
