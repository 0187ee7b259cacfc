"""The command-line tools (``python -m xlnet_tf.cli.<tool>``: export, predict, jobs, create_data, convert, train_spm)
and their one mechanism (``flags``: flags from settings dataclasses, --config_file, usage errors)."""
