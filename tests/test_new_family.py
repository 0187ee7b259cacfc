"""A new built-in family is its package and one registry line: ``tests/fixtures/pair_score`` (sentence-pair
scoring, its own head and HF name) is added to ``tasks.BUILTIN`` and runs end to end in this process: a few
training steps on tiny data, a raw-text export, a row served through the export, a file batch-predicted, the run
as its Keras text model, and its head written as an HF model and read back under its own architecture (and, the
family not loaded, its network alone)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from xlnet_tf import hf, tasks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
TINY = os.path.join(REPO, "configs", "tiny.json")
SPIECE = os.path.join(REPO, "data", "spiece.model")
REGISTRY_LINE = "pair_score:PairScoreFamily"  # what the package adds to tasks.BUILTIN
PAIRS = [("a cat sat", "a cat sat", 1.0), ("rain fell", "birds sang", 0.0), ("warm mat", "a warm mat", 0.8),
         ("quiet hills", "the cat", 0.1)]


@pytest.fixture
def registry_line(monkeypatch):
    """``tasks.BUILTIN`` with the package's line, the registries restored afterwards."""
    monkeypatch.syspath_prepend(FIXTURES)
    monkeypatch.setattr(tasks, "FAMILIES", tasks.FAMILIES.copy(builtins=tasks.BUILTIN + (REGISTRY_LINE,)))
    monkeypatch.setattr(hf, "HEADS", hf.HEADS.copy())
    yield
    for name in [m for m in sys.modules if m == "pair_score" or m.startswith("pair_score.")]:
        del sys.modules[name]


@pytest.mark.slow
def test_a_new_family_is_its_package_and_one_registry_line(registry_line, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the export's SentencePiece kernels)

    from xlnet_tf import runner
    from xlnet_tf.cli.predict import PredictSettings, main as predict
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("id\ttext_a\ttext_b\tscore\n" + "".join(
            f"{split}-{i}\t{a}\t{b}\t{y}\n" for i, (a, b, y) in enumerate(PAIRS)), encoding="utf-8")
    settings = ClassifierSettings.from_values(dict(
        task_name="pair_score", data_dir=str(data), model_config_path=TINY, spiece_model_file=SPIECE,
        max_seq_length=16, train_batch_size=4, train_steps=2, iterations=2,
        learning_rate=1e-3, dropout=0.0, dropatt=0.0, model_dir=str(tmp_path / "model"), do_train=True,
        export_dir=str(tmp_path / "serving")))
    assert settings.family() is tasks.get("pair_score")
    result = runner.run(settings)
    assert result["train"]["step"] == 2

    # The export serves a row; batch prediction of a file gives what it serves.
    export = result["export"]
    with open(os.path.join(export, "assets.extra", "metadata.json")) as f:
        assert json.load(f)["kind"] == "pair_score"
    served = tf.saved_model.load(export).signatures["serving_default"](
        text_a=tf.constant([a for a, _, _ in PAIRS]), text_b=tf.constant([b for _, b, _ in PAIRS]))["score"].numpy()
    assert served.shape == (len(PAIRS),) and np.isfinite(served).all()
    (tmp_path / "rows.tsv").write_text("id\ta\tb\n" + "".join(f"r{i}\t{a}\t{b}\n" for i, (a, b, _) in
                                                               enumerate(PAIRS)), encoding="utf-8")
    predict(PredictSettings(saved_model=str(tmp_path / "serving"), input_glob=str(tmp_path / "rows.tsv"),
                            output_dir=str(tmp_path / "batch"), text_fields="a,b", id_field="id").validate())
    with open(tmp_path / "batch" / "rows.tsv.predictions.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(len(PAIRS))]
    np.testing.assert_allclose([r["score"] for r in rows], served, atol=2e-6)

    # Its text model (the family's text_model): the run on raw strings predicts what the export serves.
    import xlnet_tf

    text_model = xlnet_tf.load_text_model(settings.model_dir)
    assert type(text_model).__name__ == "XLNetTextPairScorer"
    predicted = text_model.predict(([a for a, _, _ in PAIRS], [b for _, b, _ in PAIRS]), verbose=0)
    np.testing.assert_allclose(predicted, served, atol=2e-6)

    # Its HF name: written under its own architecture, read back into the same TF1 names and values.
    task = settings.family().task(settings)
    model, _ = task.restored_model()
    folder = hf.save_model(model, str(tmp_path / "hf"))
    checkpoint = hf.HFCheckpoint(folder)
    assert (checkpoint.architecture, checkpoint.head) == ("XLNetForPairScoring", "XLNetPairScorer")
    tensors = checkpoint.tf1_tensors(task_scope="pair_score")
    for name, variable in model.tf1_variables().items():
        np.testing.assert_array_equal(tensors[name], variable.numpy())

    # Where the family is not loaded its head is unknown, and the network still loads (load_pretrained).
    from xlnet_tf.checkpoint import load_pretrained
    from xlnet_tf.errors import InputError
    from xlnet_tf.models.xlnet import XLNetModel

    hf.HEADS.unregister("XLNetPairScorer")
    with pytest.raises(InputError, match="'XLNetForPairScoring' is not one this stack reads"):
        hf.HFCheckpoint(folder).tf1_tensors()
    network = XLNetModel(model.config)
    load_pretrained(network, folder)
    for name, variable in network.tf1_variables().items():
        np.testing.assert_array_equal(variable.numpy(), tensors[name])
