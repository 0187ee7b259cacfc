"""The data step of run_pretrain.py: use the TFRecords in ``data_dir``, or write them first from raw text."""

from __future__ import annotations

from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.data.manifest import check_manifest, load_manifest, manifest_name
from xlnet_tf.training.settings import PretrainSettings, SettingsError


def has_pretraining_data(s: PretrainSettings) -> bool:
    """Whether ``s.data_dir`` holds written data (else it is written from ``input_glob``); a ``SettingsError`` if
    it holds none and cannot be written. Cheap: the run checks it before connecting to its devices."""
    if not s.data_dir:
        raise SettingsError("missing required flag(s): --data_dir")
    if io_utils.exists(io_utils.join(s.data_dir, manifest_name())):
        return True
    if not s.input_glob:
        raise SettingsError(f"--data_dir={s.data_dir} holds no pretraining data; write it with "
                            "`python -m xlnet_tf.cli.create_data` or pass --input_glob")
    if not s.spiece_model_file:
        raise SettingsError("--input_glob needs --spiece_model_file to write the data")
    return False


def ensure_pretraining_data(s: PretrainSettings, *, bsz_per_host: int, num_core_per_host: int,
                            min_shards: int = 1) -> dict:
    """Returns the manifest of ``s.data_dir`` after checking it against the training settings (the data layout:
    ``bsz_per_host`` sequences per host batch, for ``num_core_per_host`` replicas; data written here has at least
    ``min_shards`` shards where the text fills that many host batches: one per input pipeline).

    Data is written only if ``data_dir`` has none yet and ``input_glob`` is given (the demo config does this on
    its first run; an interrupted write resumes); that is logged. Mismatched data is a ``SettingsError`` naming
    each field: training on records written for another shape silently breaks memory and masks otherwise.
    """
    shape = dict(seq_len=s.seq_len, reuse_len=s.reuse_len, num_predict=s.num_predict, bi_data=s.bi_data,
                 bsz_per_host=bsz_per_host, num_core_per_host=num_core_per_host)
    # The span masking is the data's: compared where the flags give it, the writer's defaults where they do not.
    masking = {k: getattr(s, k) for k in ("mask_alpha", "mask_beta") if getattr(s, k) is not None}
    if not has_pretraining_data(s):
        from xlnet_tf.data import writer
        from xlnet_tf.data.examples import ExampleSettings

        logging.warning("--data_dir=%s holds no pretraining data: writing pretraining data from --input_glob=%s "
                        "first", s.data_dir, s.input_glob)
        writer.run(writer.WriterConfig(
            input_glob=s.input_glob, sp_path=s.spiece_model_file, save_dir=s.data_dir, uncased=s.uncased,
            settings=ExampleSettings(**masking, **shape), num_workers=1, min_shards=min_shards))
    manifest = load_manifest(s.data_dir)
    try:
        check_manifest(manifest, uncased=s.uncased, **shape, **masking)
    except ValueError as e:
        raise SettingsError(f"--data_dir={s.data_dir}: {e}") from None
    return manifest
