"""The data step of run_pretrain.py: use the TFRecords in ``data_dir``, or write them first from raw text."""

from __future__ import annotations

import os

from absl import logging

from xlnet_tf.data.manifest import check_manifest, load_manifest, manifest_name


def ensure_pretraining_data(data_dir: str, *, input_glob: str | None, spiece_model_file: str | None, seq_len: int,
                            reuse_len: int, num_predict: int, bi_data: bool, bsz_per_host: int,
                            num_core_per_host: int, mask_alpha: int, mask_beta: int, uncased: bool) -> dict:
    """Returns the manifest of ``data_dir`` after checking it against the training settings.

    If ``data_dir`` has no data yet and ``input_glob`` is given, the data is written first (the embedded
    default does this on its first run; an interrupted write resumes). Mismatched data is an error naming each
    field: training on records written for another shape silently breaks memory and masks otherwise.
    """
    if not data_dir:
        raise ValueError("--data_dir is required")
    if not os.path.exists(os.path.join(data_dir, manifest_name())):
        if not input_glob:
            raise FileNotFoundError(f"--data_dir={data_dir} holds no pretraining data; write it with "
                                    "`python -m xlnet_tf.data.create_pretraining_data` or pass --input_glob")
        if not spiece_model_file:
            raise ValueError("--input_glob needs --spiece_model_file to write the data")
        from xlnet_tf.data import create_pretraining_data as writer
        from xlnet_tf.data.examples import ExampleSettings

        logging.info("writing pretraining data from %s to %s", input_glob, data_dir)
        settings = ExampleSettings(seq_len=seq_len, reuse_len=reuse_len, bsz_per_host=bsz_per_host,
                                   num_core_per_host=num_core_per_host, bi_data=bi_data, mask_alpha=mask_alpha,
                                   mask_beta=mask_beta, num_predict=num_predict)
        writer.run(writer.WriterConfig(input_glob=input_glob, sp_path=spiece_model_file, save_dir=data_dir,
                                       settings=settings, uncased=uncased, num_workers=1))
    manifest = load_manifest(data_dir)
    check_manifest(manifest, seq_len=seq_len, reuse_len=reuse_len, num_predict=num_predict, bi_data=bi_data,
                   bsz_per_host=bsz_per_host, num_core_per_host=num_core_per_host, uncased=uncased)
    return manifest
