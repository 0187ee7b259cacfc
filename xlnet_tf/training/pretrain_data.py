"""The data step of run_pretrain.py: use the TFRecords in ``data_dir``, or write them first from raw text."""

from __future__ import annotations

from typing import Optional

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


def data_tokenizer(s: PretrainSettings, manifest: dict) -> Optional[str]:
    """The SentencePiece model of the run, which its ``model_dir`` records as a release does (``record_network``):
    ``--spiece_model_file`` (given, or beside ``--init_checkpoint``), which must be the one the data was written
    with (the manifest's ``sp_sha256``): another of the same size trains without an error, and every later use of
    the run's directory would tokenize text into ids the model never saw. Not given: the data writer's file where it
    is still there unchanged; else None, with a warning (the directory then loads only with a tokenizer given)."""
    from xlnet_tf.tokenization import file_sha256

    recorded = manifest["params"].get("sp_sha256")
    written_with = manifest.get("writer", {}).get("sp_path")
    if s.spiece_model_file:
        if recorded and file_sha256(s.spiece_model_file) != recorded:
            raise SettingsError(f"--spiece_model_file={s.spiece_model_file} is not the SentencePiece model the data "
                                f"in --data_dir={s.data_dir} was written with ({written_with or 'unknown path'}: "
                                "the manifest's sp_sha256 differs): give that one, or write the data again")
        return s.spiece_model_file
    if written_with and recorded and io_utils.exists(written_with) and file_sha256(written_with) == recorded:
        logging.info("no --spiece_model_file: using the data's, %s", written_with)
        return written_with
    logging.warning("no --spiece_model_file, and the SentencePiece model the data was written with (%s) is not there "
                    "unchanged: --model_dir=%s will hold no spiece.model, and loading the run's checkpoints by their "
                    "directory (fine-tuning, from_checkpoint) will need one given", written_with, s.model_dir)
    return None
