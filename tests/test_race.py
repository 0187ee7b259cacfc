"""RACE: release layout, the four sequences per question (no option aliasing, zihangdai/xlnet#204), bad input,
and end to end with a micro model (train, accuracy overall and per middle/high, predictions, export)."""

import json
import os
import shutil

import numpy as np
import pytest

from classifier_helpers import FIXTURES, SPIECE, make_flags
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import InputError
from xlnet_tf.flops import finetune_flops_per_sequence
from xlnet_tf.tasks.multiple_choice import race_data
from xlnet_tf.training import progress, setup
from xlnet_tf.finetuning.serving import existing_versions
from xlnet_tf.runner import run
from xlnet_tf.tokenization import CLS_ID, SEP_ID, XLNetTokenizer

RACE = os.path.join(FIXTURES, "race")


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SPIECE)


def test_reads_the_release_layout():
    examples, skipped = race_data.read_examples(RACE, "train")
    assert len(examples) == 12 and not skipped
    assert [e.level for e in examples].count(0) == 6  # middle first, then high
    ex = examples[1]  # "Tom and Mary go to school _ ."
    assert ex.qa_list == ["Tom and Mary go to school by bus .", "Tom and Mary go to school by bike .",
                          "Tom and Mary go to school on foot .", "Tom and Mary go to school by car ."]
    assert examples[0].qa_list[0] == "Where does Tom live? In a big city." and examples[0].label == 1
    assert examples[0].guid == "middle0.txt-0"
    high, _ = race_data.read_examples(RACE, "dev", levels=("high",))
    assert len(high) == 4 and {e.level for e in high} == {1}


def test_each_option_gets_its_own_sequence(tokenizer):
    ex = race_data.read_examples(RACE, "dev")[0][0]
    context = tokenizer.encode_ids(ex.context)
    ids, segs, masks, truncated = race_data.encode_example(tokenizer, ex, 128, 64)
    assert not truncated and len(ids) == race_data.NUM_CHOICES
    for k, qa in enumerate(ex.qa_list):
        qa_ids = tokenizer.encode_ids(qa)
        n = len(context) + len(qa_ids) + 3
        assert ids[k][-n:] == context + [SEP_ID] + qa_ids + [SEP_ID, CLS_ID]  # only option k, nothing appended
        assert ids[k][:-n] == [0] * (128 - n) and segs[k][:-n] == [4] * (128 - n)
        assert segs[k][-n:] == [0] * (len(context) + 1) + [1] * (len(qa_ids) + 1) + [2]
        assert masks[k] == [0.0] * (128 - n) + [1.0] * n


def test_truncation_keeps_the_end_of_the_qa_and_cuts_the_context(tokenizer):
    ex = race_data.read_examples(RACE, "dev")[0][0]
    qa_ids = tokenizer.encode_ids(ex.qa_list[0])
    ids, _, masks, truncated = race_data.encode_example(tokenizer, ex, 24, 4)
    assert truncated and all(len(row) == 24 for row in ids) and masks[0] == [1.0] * 24
    assert ids[0][-7:] == [SEP_ID] + qa_ids[-4:] + [SEP_ID, CLS_ID]
    assert ids[0][:17] == tokenizer.encode_ids(ex.context)[:17]


def _race_copy(tmp_path):
    root = str(tmp_path / "RACE")
    shutil.copytree(RACE, root)
    return root


def test_bad_input(tmp_path):
    root = _race_copy(tmp_path)
    path = os.path.join(root, "dev", "high", "1.txt")
    with open(path) as f:
        data = json.load(f)
    data["questions"][0] = " "
    data["options"][1] = data["options"][1][:3]
    with open(path, "w") as f:
        json.dump(data, f)
    examples, skipped = race_data.read_examples(root, "dev")
    assert len(examples) == 6 and len(skipped) == 2
    assert skipped[0] == f"{path} question 0: empty question" and "3 options, expected 4" in skipped[1]
    data["questions"][0], data["answers"][0] = "Why?", "E"
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match=r"1\.txt question 0: answer 'E' is not one of"):
        race_data.read_examples(root, "dev")
    data["answers"][0], data["article"], data["options"] = "A", None, {}
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match=r"high/1\.txt: 'article' is null, expected a string; 'options' is an "
                                         r"object, expected a list$"):
        race_data.read_examples(root, "dev")
    with open(path, "w") as f:
        f.write('{"article": "x", "questions": [')
    with pytest.raises(ValueError, match=r"high/1\.txt: not a RACE JSON file"):
        race_data.read_examples(root, "dev")
    # RACE's test files have answers (--do_eval --eval_split=test): a file without says so, named
    data.update(article="x", options=[["a", "b", "c", "d"]], questions=["Why?"])
    del data["answers"]
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(InputError, match=r"high/1\.txt: missing key\(s\) \['answers'\] \(RACE files carry their "
                                         r"answers, the test split's too\)$"):
        race_data.read_examples(root, "dev")
    # InputError, as the neighbouring checks of the same input (library callers catch that one)
    with pytest.raises(InputError, match="RACE train split not found"):
        race_data.read_examples(str(tmp_path), "train")
    os.makedirs(tmp_path / "train" / "other")
    with pytest.raises(InputError, match=r"train: no middle/high subdirectory"):
        race_data.read_examples(str(tmp_path), "train")


def test_a_bom_is_dropped_and_a_lone_surrogate_names_the_file(tmp_path):
    """A BOM was 'not a RACE JSON file' while every other reader drops it; "\\ud800" reached SentencePiece."""
    root = _race_copy(tmp_path)
    path = os.path.join(root, "dev", "high", "1.txt")
    with open(path, "rb") as f:
        text = f.read()
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + text)
    assert len(race_data.read_examples(root, "dev")[0]) == 8
    with open(path, "w") as f:
        f.write(text.decode().replace('"questions": ["', '"questions": ["\\ud800', 1))
    with pytest.raises(InputError, match=r"high/1\.txt: 'questions\[0\]' holds a lone surrogate"):
        race_data.read_examples(root, "dev")


def test_files_without_an_id_are_named_by_their_path_and_no_id_is_shared(tmp_path):
    """Without an "id" a file was named by its bare name: dev/middle/1.txt and dev/high/1.txt were both "1.txt",
    and the {id: letter} predictions lost one question of each pair, silently."""
    root = _race_copy(tmp_path)
    for level in ("middle", "high"):
        path = os.path.join(root, "dev", level, "1.txt")
        with open(path) as f:
            data = json.load(f)
        del data["id"]
        with open(path, "w") as f:
            json.dump(data, f)
    guids = [e.guid for e in race_data.read_examples(root, "dev")[0]]
    assert len(guids) == len(set(guids)) == 8 and {"middle/1.txt-0", "high/1.txt-1", "middle0.txt-0"} <= set(guids)
    path = os.path.join(root, "dev", "high", "2.txt")
    with open(path) as f:
        data = json.load(f)
    data["id"] = "middle0.txt"  # another file's id
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(InputError, match=r"high/2\.txt question 0: id 'middle0\.txt-0' is also that of "
                                         r".*middle/0\.txt question 0"):
        race_data.read_examples(root, "dev")


def test_a_cache_of_the_bare_name_reader_is_encoded_again(tmp_path, tokenizer):
    """A cache written by the reader that named files by their bare name ("1.txt-0", twice where middle/ and high/
    both hold 1.txt; once where they do not, and then its ids were not the ones a fresh cache gives): encoded
    again, whether its ids repeat or not."""
    path, meta = race_data.prepare_features(RACE, "dev", tokenizer, 32, 8, str(tmp_path))
    del meta["cache_version"]  # as that reader wrote it
    meta["guids"] = ["1.txt-0"] + [f"x{i}" for i in range(len(meta["guids"]) - 1)]
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    assert race_data.prepare_features(RACE, "dev", tokenizer, 32, 8, str(tmp_path))[1]["guids"][:2] == [
        "middle0.txt-0", "middle0.txt-1"]


def test_predictions_of_a_shared_id_are_refused_not_dropped(tmp_path):
    """{id: letter} keeps one question of an id: 14 questions gave 10 predictions, in silence."""
    from xlnet_tf import tasks

    task = tasks.get("multiple_choice").task(make_flags(tmp_path, task_name="race", max_qa_length=24))
    logits = np.eye(4, dtype=np.float32)[:3]
    with pytest.raises(InputError, match=r"dev: 1 question id\(s\) given to more than one question, e\.g\. "
                                         r"\['1\.txt-0'\]"):
        task.write_prediction_files({"logits": logits}, ["1.txt-0", "1.txt-1", "1.txt-0"], "dev")
    task.write_prediction_files({"logits": logits}, ["middle/1.txt-0", "1.txt-1", "high/1.txt-0"], "dev")
    with open(os.path.join(task.predict_dir, "race.dev.predictions.json")) as f:
        assert json.load(f) == {"middle/1.txt-0": "A", "1.txt-1": "B", "high/1.txt-0": "C"}


def test_do_eval_on_the_test_split_is_refused_for_glue_only(tmp_path):
    """RACE's test/ has answers (run_race.py evaluated "dev or test"); the settings refused --do_eval
    --eval_split=test for every task. GLUE's test files have no labels: refused still."""
    race = make_flags(tmp_path, task_name="race", data_dir=RACE, do_eval=True, eval_split="test", max_qa_length=24)
    assert not race.errors()
    glue = make_flags(tmp_path, task_name="rte", data_dir=os.path.join(FIXTURES, "glue", "RTE"), do_eval=True,
                      eval_split="test")
    assert any("--eval_split=test has none" in e for e in glue.errors())


@pytest.mark.slow
def test_race_end_to_end(tmp_path, monkeypatch):
    flags = make_flags(tmp_path, task_name="race", data_dir=RACE, do_train=True, do_eval=True, do_predict=True,
                       max_seq_length=64, max_qa_length=24, export_dir=str(tmp_path / "export"))
    reported = []

    def reporter(*args, **kwargs):
        reported.append(args[2:4])
        return progress.ProgressReporter(*args, **kwargs)

    monkeypatch.setattr(setup, "ProgressReporter", reporter)
    result = run(flags)
    # Progress and TensorBoard count the four sequences of each question (a batch of 4 questions = 16 sequences of
    # 64 tokens, each network pass at its <cls> row in the last layer), not one.
    config = XLNetConfig.from_json(flags.model_config_path)
    assert reported == [(4 * 4 * 64, 4 * 4 * finetune_flops_per_sequence(config, 64, 16, output_rows=1))]
    metrics = result["eval"]["metrics"]
    assert metrics["num_examples"] == 8 and metrics["num_middle"] == 4 and metrics["num_high"] == 4
    assert {"accuracy", "accuracy_middle", "accuracy_high", "loss"} <= set(metrics)
    with open(os.path.join(flags.model_dir, "predict", "race.dev.predictions.json")) as f:
        predictions = json.load(f)
    assert len(predictions) == 8 and set(predictions.values()) <= set("ABCD") and "high1.txt-0" in predictions
    # TF Serving's layout: <export_dir>/<version>/, the version being the checkpoint's step.
    assert existing_versions(flags.export_dir) == [flags.train_steps]
    assert os.path.exists(os.path.join(flags.export_dir, str(flags.train_steps), "saved_model.pb"))
    # The run's directory as a Keras text model: its preprocessing, and the export's logits.
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the export's SentencePiece kernels)

    import xlnet_tf

    model = xlnet_tf.load_text_model(flags.model_dir)
    assert (type(model), model.preprocessor.seq_length, model.preprocessor.max_qa_length) == (
        xlnet_tf.XLNetTextMultipleChoice, 64, 24)
    x = (["Bob went home. He was tired."], ["Who went home?"], [["Bob", "Al", "Cy", "Dee"]])
    served = tf.saved_model.load(os.path.join(flags.export_dir, str(flags.train_steps))).signatures[
        "serving_default"](article=tf.constant(x[0]), question=tf.constant(x[1]), options=tf.constant(x[2]))
    np.testing.assert_allclose(model.predict(x, verbose=0), served["logits"].numpy(), atol=1e-5)
    # --middle_only: cached separately, only middle-school questions
    result = run(make_flags(tmp_path, task_name="race", data_dir=RACE, do_eval=True, max_seq_length=64,
                            max_qa_length=24, middle_only=True))
    assert result["eval"]["metrics"]["num_examples"] == 4 and "accuracy_high" not in result["eval"]["metrics"]
    # --eval_split=test: RACE's test files have answers; its results beside the dev ones, not over them
    dev_report = open(os.path.join(flags.model_dir, "eval_results.dev.json")).read()
    result = run(make_flags(tmp_path, task_name="race", data_dir=RACE, do_eval=True, do_predict=True,
                            eval_split="test", max_seq_length=64, max_qa_length=24))
    assert result["eval"]["split"] == "test" and result["eval"]["metrics"]["num_examples"] == 4
    with open(os.path.join(flags.model_dir, "eval_results.test.json")) as f:
        assert json.load(f)["metrics"] == result["eval"]["metrics"]
    assert open(os.path.join(flags.model_dir, "eval_results.dev.json")).read() == dev_report
    assert os.listdir(os.path.join(flags.model_dir, "eval_test")) and os.listdir(os.path.join(flags.model_dir,
                                                                                               "eval_dev"))
    with open(os.path.join(flags.model_dir, "predict", "race.test.predictions.json")) as f:
        assert len(json.load(f)) == 4


def test_max_qa_length_has_one_bound_from_the_layout(tokenizer):
    """article <sep> question-option <sep> <cls> holds 3 special tokens: --max_qa_length may take all the rest
    (the settings once refused max_seq_length - 3, which the preprocessor and the encoder accept)."""
    import types

    from xlnet_tf import tasks
    from xlnet_tf.preprocessing import XLNetPreprocessor
    from xlnet_tf.tasks.multiple_choice.multiple_choice_graph import encode_choices

    family = tasks.get("multiple_choice")

    def errors(max_qa_length):
        s = types.SimpleNamespace(max_qa_length=max_qa_length, max_seq_length=16, long_document="truncate",
                                  high_only=False, middle_only=False, predict_input_glob=None)
        return family.settings_errors(s)
    assert errors(13) == [] and errors(14) == ["--max_qa_length=14 must be in [1, max_seq_length - 3 = 13]"]
    with pytest.raises(ValueError, match=r"max_qa_length=14: must be in \[1, seq_length - 3 = 13\]"):
        XLNetPreprocessor.from_file(SPIECE, seq_length=16, max_qa_length=14)
    article = race_data.read_examples(RACE, "dev")[0][0].context
    question, options = "Which of the following is true about the passage?", ["A", "B", "C", "D"]
    ex = race_data.RaceExample("q", article, [race_data.qa_text(question, o) for o in options], 0, 0)
    ids, segs, masks, _ = race_data.encode_example(tokenizer, ex, 16, 13)
    assert ids[0][0] == SEP_ID  # the article cut to nothing: still a valid sequence
    ours = encode_choices(XLNetPreprocessor.from_file(SPIECE, seq_length=16, max_qa_length=13), [article],
                          [question], [options])
    for name, expected in (("input_ids", ids), ("segment_ids", segs), ("padding_mask", masks)):
        np.testing.assert_array_equal(ours[name].numpy()[0], expected)
