"""SQuAD: features in XLNet's layout, bad input, the loss, post-processing and metrics, and
run_squad.py end to end on the official-layout v1.1 / v2.0 fixtures with a tiny model."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from background import background
from export_helpers import serve
from squad_helpers import SMALL, inference_batch
from xlnet_tf.tasks.squad import squad_data, squad_postprocess
from xlnet_tf.tasks.squad.squad_answers import squad_loss
from xlnet_tf.tasks.squad.squad_head import XLNetSquad
from xlnet_tf.tokenization import CLS_ID, SEP_ID, XLNetTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "squad")
SPIECE = os.path.join(REPO, "data", "spiece.model")


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SPIECE)


def _features(tokenizer, name, is_training, seq=64, query=16, stride=16):
    squad = squad_data.read_squad_file(os.path.join(FIXTURES, name), is_training)
    features, skipped = squad_data.convert_examples_to_features(squad.examples, tokenizer, seq, stride, query,
                                                                is_training)
    return squad, features, skipped


def test_feature_conversion_logs_its_progress(tokenizer, monkeypatch):
    """18,000 questions took 3.5 min without a line; now a line every Progress.EVERY_S (none for small files)."""
    from pretraining_helpers import absl_messages
    from xlnet_tf.progress_lines import Progress

    from absl import logging

    monkeypatch.setattr(Progress, "EVERY_S", 0.0)
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.INFO)  # as a run's (squad_lib_sp's quiet spells restore it)
    try:
        with absl_messages() as logged:
            squad, _, _ = _features(tokenizer, "dev-v2.0.json", is_training=False)
    finally:
        logging.set_verbosity(verbosity)
    total = len(squad.examples)
    assert f"SQuAD: features | {total}/{total} questions (100%)" in "\n".join(logged), logged


def test_fixture_layout_is_official():
    for version in ("1.1", "2.0"):
        for split in ("train", "dev"):
            with open(os.path.join(FIXTURES, f"{split}-v{version}.json"), encoding="utf-8") as f:
                raw = json.load(f)
            assert set(raw) == {"data", "version"}
            for article in raw["data"]:
                assert set(article) == {"title", "paragraphs"}
                for p in article["paragraphs"]:
                    assert set(p) == {"context", "qas"}
                    for qa in p["qas"]:
                        keys = {"id", "question", "answers"} | ({"is_impossible"} if version == "2.0" else set())
                        assert keys <= set(qa) <= keys | {"plausible_answers"}
                        for a in qa["answers"] + qa.get("plausible_answers", []):
                            assert p["context"][a["answer_start"]:].startswith(a["text"])


def test_training_features_follow_xlnet_layout(tokenizer):
    squad, features, skipped = _features(tokenizer, "train-v2.0.json", is_training=True)
    assert not skipped and len({f.example_index for f in features}) == len(squad.examples)
    assert any(len([f for f in features if f.example_index == i]) > 2 for i in range(len(squad.examples)))
    answered = set()
    for f in features:
        n = int(sum(f.padding_mask))
        ids, seg, p_mask = np.array(f.input_ids), np.array(f.segment_ids), np.array(f.p_mask)
        plen = f.paragraph_len
        # P <sep> Q <sep> <cls>, right padding; segments P=0 (with its sep), Q=1 (with its sep), CLS=2, PAD=3.
        assert f.cls_index == n - 1 and ids[n - 1] == CLS_ID and ids[plen] == SEP_ID and ids[n - 2] == SEP_ID
        assert list(seg[:plen + 1]) == [0] * (plen + 1) and set(seg[plen + 1:n - 1]) == {1}
        assert seg[n - 1] == 2 and set(seg[n:]) <= {3} and set(ids[n:]) <= {0}
        assert list(np.flatnonzero(p_mask == 0)) == list(range(plen)) + [f.cls_index]
        example = squad.examples[f.example_index]
        if f.is_impossible:
            assert f.start_position == f.end_position == f.cls_index
        else:
            pieces = tokenizer.decode_ids(ids[f.start_position:f.end_position + 1])
            assert pieces.strip() == example.orig_answer_text
            answered.add(example.qas_id)
    assert answered == {e.qas_id for e in squad.examples if not e.is_impossible}


def test_xlnet_preprocessing_quotes_and_digit_commas(tokenizer):
    text = "He said ``hello'' in 1,000 ways."
    squad_example = squad_data.SquadExample("q", "What did he say?", text, "hello", text.index("hello"),
                                            text.index("hello") + 4)
    (feature,), _ = squad_data.convert_examples_to_features([squad_example], tokenizer, 48, 16, 16, True)
    expected = tokenizer.encode_ids(text)  # XLNet's own preprocessing: `` and '' become "
    assert feature.input_ids[:feature.paragraph_len] == expected
    assert tokenizer.decode_ids(feature.input_ids[feature.start_position:feature.end_position + 1]) == "hello"


def _write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return str(path)


def test_bad_input_is_reported_and_counted(tmp_path, tokenizer):
    bad = _write(tmp_path, "bad.json", '{"data": [ {"paragraphs": ]}')
    with pytest.raises(squad_data.SquadFileError, match=r"bad\.json: not valid JSON \(line 1"):
        squad_data.read_squad_file(bad, True)
    with pytest.raises(squad_data.SquadFileError, match=r"nodata\.json: not a SQuAD file"):
        squad_data.read_squad_file(_write(tmp_path, "nodata.json", {"version": "1.1"}), True)
    with pytest.raises(squad_data.SquadFileError, match=r"noctx\.json: data\[0\]\.paragraphs\[0\] has no 'context'"):
        squad_data.read_squad_file(_write(tmp_path, "noctx.json", {"data": [{"paragraphs": [{"qas": []}]}]}), True)
    context = "The river flows north into the cold sea past the old mill. " * 6
    qas = [
        {"id": "ok", "question": "Where does the river flow?", "answers": [{"text": "north", "answer_start": 16}]},
        {"id": "offset", "question": "What flows?", "answers": [{"text": "river", "answer_start": 0}]},
        {"id": "empty", "question": "   ", "answers": [{"text": "river", "answer_start": 4}]},
        {"id": "ok", "question": "Again?", "answers": [{"text": "north", "answer_start": 16}]},
        {"id": "long", "question": "What is the whole text?", "answers": [{"text": context[:200],
                                                                         "answer_start": 0}]},
    ]
    path = _write(tmp_path, "mixed.json", {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
                                           "version": "1.1"})
    squad = squad_data.read_squad_file(path, is_training=True)
    assert squad.skipped == {"answer not at its offset": ["offset"], "empty question": ["empty"],
                             "duplicate id": ["ok"]}
    features, skipped = squad_data.convert_examples_to_features(squad.examples, tokenizer, 32, 8, 8, True,
                                                                source=path)
    assert skipped == {"answer in no window": ["long"]}
    assert {squad.examples[f.example_index].qas_id for f in features} == {"ok"}
    # Evaluation keeps examples whatever their answers say (only the reader's skips apply).
    assert [e.qas_id for e in squad_data.read_squad_file(path, is_training=False).examples] == ["ok", "offset", "long"]


def test_a_bom_is_dropped_and_a_lone_surrogate_skips_its_question(tmp_path):
    """A BOM was refused while every other reader drops it; "\\ud800" reached SentencePiece (a pybind error naming no
    question), in training and in batch prediction."""
    from xlnet_tf.tasks.squad import read_squad_rows

    qas = [{"id": "s", "question": "Who built it\ud800?", "answers": [{"text": "Bob", "answer_start": 0}]},
           {"id": "ok", "question": "Who built it?", "answers": [{"text": "Bob", "answer_start": 0}]}]
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"data": [{"paragraphs": [{"context": "Bob built it.",
                                                                               "qas": qas}]}]}).encode())
    squad = squad_data.read_squad_file(str(path), is_training=True)
    assert [e.qas_id for e in squad.examples] == ["ok"]
    assert squad.skipped == {"a lone surrogate in the question (not valid Unicode)": ["s"]}
    assert [r.problem for r in read_squad_rows(str(path))] == [
        "data[0].paragraphs[0].qas[0]: a lone surrogate in the question (not valid Unicode)", ""]


@pytest.mark.parametrize("value", ["false", 0, None])
def test_is_impossible_must_be_a_json_boolean(tmp_path, value):
    """bool("false") is True: a file written with strings made every question unanswerable, silently."""
    qas = [{"id": "q1", "question": "What flows?", "answers": [{"text": "river", "answer_start": 4}],
            "is_impossible": value}]
    path = _write(tmp_path, "strings.json", {"data": [{"paragraphs": [{"context": "The river.", "qas": qas}]}]})
    for training in (True, False):
        with pytest.raises(squad_data.SquadFileError, match=rf"strings\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\] "
                                                            rf"\(id q1\): 'is_impossible' is {value!r}, not true or "
                                                            "false"):
            squad_data.read_squad_file(path, training)


def test_an_impossible_question_with_answers_is_skipped_in_training(tmp_path, caplog):
    answer = [{"text": "river", "answer_start": 4}]
    qas = [{"id": "ok", "question": "What flows?", "answers": answer, "is_impossible": False},
           {"id": "both", "question": "What?", "answers": answer, "is_impossible": True},
           {"id": "none", "question": "Who?", "answers": [], "is_impossible": True}]
    path = _write(tmp_path, "both.json", {"data": [{"paragraphs": [{"context": "The river.", "qas": qas}]}]})
    squad = squad_data.read_squad_file(path, is_training=True)
    assert [e.qas_id for e in squad.examples] == ["ok", "none"]
    assert squad.skipped == {"impossible with answers": ["both"]}
    assert "both.json: skipping example both (data[0].paragraphs[0].qas[1]): impossible with answers" in caplog.text


def test_invalid_utf8_and_huge_paragraphs(tmp_path, tokenizer):
    """Invalid UTF-8 names the file and line; a paragraph too long to align (memory quadratic in its length) is
    skipped and reported instead of exhausting memory."""
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"data": [\n{"title": "caf\xe9", "paragraphs": []}]}')
    with pytest.raises(squad_data.SquadFileError, match=r"latin1\.json:2: not UTF-8 text"):
        squad_data.read_squad_file(str(path), True)
    context = "word " * (squad_data.MAX_PARAGRAPH_CHARS // 5 + 10)
    path = _write(tmp_path, "huge.json", {"data": [{"paragraphs": [{"context": context, "qas": [
        {"id": "huge", "question": "Which word?", "answers": [{"text": "word", "answer_start": 0}]}]}]}]})
    squad = squad_data.read_squad_file(path, is_training=True)
    features, skipped = squad_data.convert_examples_to_features(squad.examples, tokenizer, 32, 8, 8, True,
                                                                source=path)
    assert features == [] and skipped == {"paragraph too long": ["huge"]}


def test_loss_matches_the_original_formula():
    rng = np.random.default_rng(0)
    start_lp = tf.nn.log_softmax(rng.normal(size=(3, 7)).astype(np.float32))
    end_lp = tf.nn.log_softmax(rng.normal(size=(3, 7)).astype(np.float32))
    cls = tf.constant([0.3, -1.2, 2.0])
    features = dict(start_positions=tf.constant([1, 6, 0]), end_positions=tf.constant([2, 6, 4]),
                    is_impossible=tf.constant([0.0, 1.0, 0.0]))
    total, count = squad_loss(features, dict(start_log_probs=start_lp, end_log_probs=end_lp, cls_logits=cls))
    s, e = start_lp.numpy(), end_lp.numpy()
    ce = -(s[[0, 1, 2], [1, 6, 0]] + e[[0, 1, 2], [2, 6, 4]]) / 2
    y, z = np.array([0.0, 1.0, 0.0]), cls.numpy()
    bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    np.testing.assert_allclose(total.numpy() / count.numpy(), np.mean(ce + 0.5 * bce), rtol=1e-5)


class _F:
    """Minimal feature for post-processing tests."""

    def __init__(self, uid, ex, plen, max_ctx, starts, ends):
        self.unique_id, self.example_index, self.paragraph_len = uid, ex, plen
        self.token_is_max_context = {i: i in max_ctx for i in range(plen)}
        self.tok_start_to_orig_index, self.tok_end_to_orig_index = starts, ends


def test_postprocess_beam_filters_and_null_odds():
    text = "alpha beta gamma delta"
    example = squad_data.SquadExample("q1", "?", text)
    starts, ends = [0, 6, 11, 17], [4, 9, 15, 21]
    f0 = _F(10, 0, 4, {0, 1}, starts, ends)       # window 0: max context for pieces 0-1
    f1 = _F(11, 0, 4, {2, 3}, starts, ends)       # window 1: max context for pieces 2-3
    # start_n_top=2, end_n_top=3 (both differ from n_best_size): end row k = i * 3 + j.
    results = dict(
        unique_ids=np.array([10, 11]), cls_logits=np.array([1.5, -0.7]),
        start_top_index=np.array([[1, 0], [2, 0]]), start_top_log_probs=np.array([[-0.1, -1.0], [-0.5, -0.2]]),
        end_top_index=np.array([[2, 0, 9, 0, 1, 3], [3, 2, 2, 0, 0, 0]]),
        end_top_log_probs=np.array([[-0.2, -0.1, -0.01, -0.3, -0.4, -2.0], [-0.1, -0.3, -0.3, 0.0, 0.0, 0.0]]))
    predictions, nbest, null_odds = squad_postprocess.compute_predictions(
        [example], [f0, f1], results, n_best_size=3, max_answer_length=2, start_n_top=2, end_n_top=3)
    # Window 0: start 1 with end 2 (ok), end 0 (< start), end 9 (outside paragraph); start 0 with end 0 (ok),
    # end 1 (ok), end 3 (too long). Window 1: start 2 with ends 3/2/2 (ok, one duplicate); start 0 is not in its
    # max-context window there (it would otherwise be the best span, at -0.2).
    texts = [(e["text"], round(e["start_log_prob"] + e["end_log_prob"], 4)) for e in nbest["q1"]]
    assert texts == [("beta gamma", -0.3), ("gamma delta", -0.6), ("gamma", -0.8)]
    assert predictions["q1"] == "beta gamma" and null_odds["q1"] == -0.7
    assert abs(sum(e["probability"] for e in nbest["q1"]) - 1) < 1e-9


def test_evaluate_uses_the_official_metric_and_best_threshold():
    from official.nlp.tools import squad_evaluate_v2_0

    data = [{"paragraphs": [{"context": "x", "qas": [
        {"id": "a", "answers": [{"text": "the red fox", "answer_start": 0}], "is_impossible": False},
        {"id": "b", "answers": [{"text": "blue", "answer_start": 0}], "is_impossible": False},
        {"id": "c", "answers": [], "is_impossible": True},
        {"id": "d", "answers": [], "is_impossible": True}]}]}]
    predictions = {"a": "red fox", "b": "green", "c": "something", "d": "other"}
    null_odds = {"a": -2.0, "b": 0.5, "c": 1.0, "d": 3.0}
    out = squad_postprocess.evaluate(data, predictions, null_odds)
    official = squad_evaluate_v2_0.evaluate(data, predictions, {k: 0.0 for k in predictions})
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact"):
        assert out[key] == pytest.approx(official[key])
    # Answer only where null odds <= -2.0 (just "a"): a right (1), b null (0), c and d null (1 each) = 3/4; the
    # threshold midway to the next odds up (b's 0.5), where float32 noise in a's or b's odds changes nothing.
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == -0.75
    assert out["has_ans_exact"] == pytest.approx(0.5) and out["missing"] == 0


# Hand-computed with the official evaluate-v1.1.py's definitions (normalise: lower case, no punctuation, no
# articles; F1 0 without a common token; the maximum over every gold answer): question, golds, prediction, EM, F1.
_V11_CASES = [
    ("article", ["A"], "A", 1, 0.0),  # both normalise to "": equal (EM 1), no common token (F1 0; v2.0 says 1)
    ("partial", ["the cat sat", "a dog"], "cat sat down", 0, 0.8),  # P 2/3, R 1 against the first
    ("punct", ["paris"], "Paris.", 1, 1.0),
    ("kept", ["The", "Eiffel Tower"], "a", 1, 0.0),  # v2.0 drops the gold "The" (EM 0); v1.1 keeps it
    ("empty", ["Paris"], "", 0, 0.0),
]


def _squad_data(cases, impossible=None):
    qas = [{"id": qid, "question": "?", "answers": [{"text": g, "answer_start": 0} for g in golds]}
           for qid, golds, *_ in cases]
    if impossible is not None:
        for qa in qas:
            qa["is_impossible"] = not qa["answers"]
    return [{"title": "t", "paragraphs": [{"context": "x", "qas": qas}]}]


def test_v11_files_are_scored_by_the_v11_definitions(tmp_path):
    """v1.1 data was scored by v2.0's rules: gold "A" predicted "A" (both normalise to nothing) had F1 100 where
    evaluate-v1.1.py gives 0, and a gold answer normalising to nothing was dropped."""
    for _, golds, prediction, em, f1 in _V11_CASES:
        assert max(int(squad_postprocess.exact_match_v1(prediction, g)) for g in golds) == em
        assert max(squad_postprocess.f1_v1(prediction, g) for g in golds) == pytest.approx(f1)
    data = _squad_data(_V11_CASES)
    predictions = {qid: prediction for qid, _, prediction, *_ in _V11_CASES}
    out = squad_postprocess.evaluate(data, predictions, {q: 0.0 for q in predictions})
    assert out["exact"] == pytest.approx(100 * 3 / 5) and out["f1"] == pytest.approx(100 * 1.8 / 5)
    assert out["HasAns_f1"] == out["f1"] and out["total"] == 5 and "NoAns_total" not in out
    v2 = squad_postprocess.evaluate(data, predictions, version_2=True)  # what was reported: "article" F1 1
    assert v2["f1"] == pytest.approx(100 * 2.8 / 5) and v2["exact"] == pytest.approx(100 * 2 / 5)
    # Which rules a file gets: its version, else whether a question carries is_impossible or has no answer.
    for version, impossible, want in (("1.1", None, False), (None, None, False), ("v2.0", None, True),
                                      (None, True, True), ("1.1", True, True)):
        content = {"data": _squad_data(_V11_CASES, impossible)} | ({"version": version} if version else {})
        assert squad_data.read_squad_file(_write(tmp_path, "f.json", content), False).version_2 is want
    unanswered = _squad_data(_V11_CASES + [("none", [], "x", 0, 0.0)])
    assert squad_postprocess.is_version_2(unanswered, "1.1")  # v1.1's maximum over no gold answer is undefined


@pytest.mark.parametrize("version_2", [False, True])
def test_a_question_with_a_number_id_is_scored(version_2):
    """The reader takes a number id (as "7"); evaluation looked its prediction up by the number and failed."""
    qa = {"id": 7, "question": "?", "answers": [{"text": "red fox", "answer_start": 0}]}
    out = squad_postprocess.evaluate([{"paragraphs": [{"context": "x", "qas": [qa]}]}], {"7": "the red fox"},
                                     {"7": -1.0}, version_2=version_2)
    assert out["exact"] == out["f1"] == out["best_f1"] == 100.0 and out["missing"] == 0


def _v2_data(cases):
    """SQuAD 2.0 questions: (id, gold answers, best non-null prediction, null odds); no golds: unanswerable."""
    qas = [{"id": qid, "question": "?", "is_impossible": not golds,
            "answers": [{"text": g, "answer_start": 0} for g in golds]} for qid, golds, _, _ in cases]
    return ([{"title": "t", "paragraphs": [{"context": "x", "qas": qas}]}],
            {qid: p for qid, _, p, _ in cases}, {qid: odds for qid, _, _, odds in cases})


_THRESHOLD_CASES = {
    "ordinary": [("a", ["red fox"], "red fox", -2.0), ("b", ["blue"], "green", 0.5), ("c", [], "x", 1.0),
                 ("d", [], "y", 3.0), ("e", ["sea"], "the sea", -1.25)],
    # Equal null odds: the official search stops between them (100 at 1.0), which no threshold writes (50).
    "tie": [("a", ["red fox"], "red fox", 1.0), ("b", [], "x", 1.0)],
    # Answering nothing is best, with null odds below 0.0 (the official threshold then, which answers both).
    "none": [("a", ["red fox"], "blue", -3.0), ("b", [], "x", -1.0)],
    # An unanswerable question answered by text that normalises to nothing scores 1 (the official search: 0).
    "empty text": [("a", [], "the", 0.5), ("b", ["red fox"], "red fox", 2.0)],
}


@pytest.mark.parametrize("case", list(_THRESHOLD_CASES))
def test_the_best_threshold_applied_writes_a_file_the_official_script_scores_best(case):
    """SQuAD 2.0: best_f1 at best_f1_thresh was never written (predictions.json answered every question: NoAns 0 in
    the official evaluate-v2.0.py); --null_score_diff_threshold writes "" where the null odds exceed it, and the
    reported best threshold applied scores exactly the reported best in the official script (no na-prob file)."""
    from official.nlp.tools import squad_evaluate_v2_0 as official

    data, predictions, null_odds = _v2_data(_THRESHOLD_CASES[case])
    out = squad_postprocess.evaluate(data, predictions, null_odds)
    for name in ("exact", "f1"):
        written = squad_postprocess.apply_null_threshold(predictions, null_odds, out[f"best_{name}_thresh"])
        assert official.evaluate(data, written)[name] == out[f"best_{name}"]  # the same float
        assert squad_postprocess.evaluate(data, predictions, null_odds, out[f"best_{name}_thresh"])[name] == \
            out[f"best_{name}"]
    # Answered while null odds <= the threshold: the official search's direction (_apply_no_ans_threshold's).
    assert squad_postprocess.apply_null_threshold(predictions, null_odds, 1.0) == {
        k: "" if null_odds[k] > 1.0 else v for k, v in predictions.items()}
    assert squad_postprocess.apply_null_threshold(predictions, null_odds, None) is predictions
    # Thresholds midway between the last answered odds and the next (1 past the ends): -1.25 | 0.5, 1.0 - 1,
    # -3.0 - 1, 2.0 + 1.
    want = {"ordinary": (80.0, -0.375), "tie": (50.0, 0.0), "none": (50.0, -4.0), "empty text": (100.0, 3.0)}[case]
    assert (out["best_f1"], out["best_f1_thresh"]) == want
    if case == "ordinary":  # where no tie or empty text arises, the official search's choice of questions
        official_thresh = official.evaluate(data, predictions, null_odds)["final_f1_thresh"]
        assert official_thresh == -1.25
        assert squad_postprocess.apply_null_threshold(predictions, null_odds, official_thresh) == written
        assert official.evaluate(data, written)["NoAns_exact"] == 100.0


def test_predictions_json_answers_no_answer_past_the_threshold_and_records_it(tmp_path):
    """SquadTask with --null_score_diff_threshold: predictions.json has "" where the null odds exceed it (nbest and
    null_odds unchanged), squad.summary.json and eval_results.json record the threshold and the scoring script,
    exact/f1 score the file as written, and the log and the run's last line say how to apply the best threshold."""
    from xlnet_tf.cli import flags as cli
    from xlnet_tf.tasks.squad import SquadEvalData, SquadFamily, SquadSettings

    data, predictions, null_odds = _v2_data(_THRESHOLD_CASES["ordinary"])
    path = _write(tmp_path, "dev.json", {"version": "v2.0", "data": data})
    eval_data = SquadEvalData(squad_data.read_squad_file(path, False), [], {})
    nbest = {k: [{"text": v, "probability": 1.0}] for k, v in predictions.items()}
    reports = {}
    for threshold in (None, -1.25):
        settings = SquadSettings(model_dir=str(tmp_path / "m"), predict_dir=str(tmp_path / str(threshold)),
                                 predict_file=path, null_score_diff_threshold=threshold)
        task = SquadFamily().task(settings)
        outputs = (predictions, nbest, null_odds)
        task.write_predictions(eval_data, outputs, 7, "ckpt-7")
        written = _read(tmp_path / str(threshold) / "predictions.json")
        summary = _read(tmp_path / str(threshold) / squad_postprocess.SUMMARY)
        assert summary["settings"]["null_score_diff_threshold"] == threshold and summary["step"] == 7
        assert summary["no_answer"] == sum(not v for v in written.values())
        assert _read(tmp_path / str(threshold) / "null_odds.json") == null_odds
        reports[threshold] = task.write_eval(task.metrics(eval_data, outputs), 7, "ckpt-7", eval_data)
        results = _read(tmp_path / str(threshold) / "eval_results.json")
        assert results["null_score_diff_threshold"] == threshold
        assert results["official_script"] == "evaluate-v2.0.py"
    assert _read(tmp_path / "None" / "predictions.json") == predictions  # unset: as the original
    assert _read(tmp_path / "-1.25" / "predictions.json") == {"a": "red fox", "b": "", "c": "", "d": "",
                                                               "e": "the sea"}
    unset, applied = reports[None]["metrics"], reports[-1.25]["metrics"]
    assert unset["NoAns_exact"] == 0 and applied["NoAns_exact"] == 100.0
    assert applied["f1"] == applied["best_f1"] == unset["best_f1"] and applied["best_f1_thresh"] == -0.375
    assert "--null_score_diff_threshold=-0.375 (e.g. --nodo_train --do_predict) writes" in cli.summary(
        {"eval": reports[None]})
    assert "where the null odds exceed --null_score_diff_threshold=-1.25" in reports[-1.25]["hint"]
    v11 = _write(tmp_path, "v11.json", {"version": "1.1", "data": _squad_data(_V11_CASES)})
    v11_data = SquadEvalData(squad_data.read_squad_file(v11, False), [], {})
    assert "hint" not in task.eval_report(unset, 7, "ckpt-7", v11_data)  # no unanswerable questions: no threshold


def test_the_best_threshold_keeps_its_questions_when_the_odds_move_by_round_off():
    """The printed best threshold lies between the odds of the last question it answers and the next ones up: on
    that question's own odds, a rerun's (float32 round-off of another batch size) or batch prediction's (6
    decimals) odds flipped it to ""."""
    data, predictions, null_odds = _v2_data([("a", ["red fox"], "red fox", 0.7698339819908142),
                                             ("b", [], "x", 0.9)])
    thresh = squad_postprocess.evaluate(data, predictions, null_odds)["best_f1_thresh"]
    for odds in ({"a": 0.7698341012001038, "b": 0.8999999}, {k: round(v, 6) for k, v in null_odds.items()}):
        assert squad_postprocess.apply_null_threshold(predictions, odds, thresh) == {"a": "red fox", "b": ""}


def test_the_threshold_is_refused_for_a_squad_1_1_file(tmp_path):
    """--null_score_diff_threshold on a SQuAD 1.1 file (every question answerable) silently blanked answers."""
    from xlnet_tf.tasks.squad import SquadFamily, SquadSettings
    from xlnet_tf.training.settings import SettingsError

    settings = SquadSettings(model_config_path=os.path.join(REPO, "configs", "tiny.json"),
                             spiece_model_file=os.path.join(REPO, "data", "spiece.model"),
                             model_dir=str(tmp_path / "m"), output_dir=str(tmp_path / "f"),
                             predict_file=os.path.join(FIXTURES, "dev-v1.1.json"), do_train=False, do_predict=True,
                             max_seq_length=64, max_query_length=16, doc_stride=24, null_score_diff_threshold=0.5)
    for stage in ("check_eval_data", "eval_data"):  # before training (it trained, then refused), and predict-only
        with pytest.raises(SettingsError, match="--null_score_diff_threshold: .*dev-v1.1.json is a SQuAD 1.1 file"):
            getattr(SquadFamily().task(settings), stage)()


def test_the_threshold_flag_is_checked_before_tensorflow():
    from xlnet_tf.tasks.squad import SquadSettings

    errors = SquadSettings(null_score_diff_threshold=float("nan")).errors()
    assert "--null_score_diff_threshold=nan: not a finite number" in errors
    assert SquadSettings().null_score_diff_threshold is None


def test_mixed_precision_training_forward_is_float32s_to_bfloat16_precision():
    """Under mixed_bfloat16 the head's log-probabilities come out in float32 and, given float32's weights, equal
    float32's to bfloat16's precision (8 mantissa bits: ~0.4% a rounding), as does the loss."""
    batch = inference_batch()
    batch.update(start_positions=np.array([3, 20, 0], np.int32), end_positions=np.array([5, 20, 11], np.int32),
                 is_impossible=np.array([0.0, 1.0, 0.0], np.float32))
    full, mixed = XLNetSquad(SMALL), XLNetSquad(SMALL, dtype="mixed_bfloat16")
    want = full(batch, training=True)
    mixed(batch, training=True)
    mixed.set_weights(full.get_weights())
    got = mixed(batch, training=True)
    assert got["start_log_probs"].dtype == tf.float32
    (total, count), (want_total, _) = squad_loss(batch, got), squad_loss(batch, want)
    assert count.numpy() == 3 and total.numpy() == pytest.approx(want_total.numpy(), rel=2e-2)
    np.testing.assert_allclose(got["start_log_probs"], want["start_log_probs"], rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------------------------------------------------
# run_squad.py end to end (subprocesses: flags are process-global).

TINY = ["--model_config_path=configs/tiny.json", "--spiece_model_file=data/spiece.model", "--max_seq_length=64",
        "--max_query_length=16", "--doc_stride=24", "--max_answer_length=12", "--train_batch_size=8",
        "--iterations=4", "--learning_rate=1e-3", "--predict_batch_size=16", "--dropout=0", "--dropatt=0"]


def start_squad(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, os.path.join(REPO, "run_squad.py"), *TINY, *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_squad(proc, expect_rc=0):
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == expect_rc, stderr[-4000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_squad(*args, expect_rc=0):
    return finish_squad(start_squad(*args), expect_rc)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# The tiny network's random weights in the original TF1 release format (names as in xlnet_model.ckpt).
_TF1_RELEASE = """
import sys
from xlnet_tf.checkpoint import write_tf1_checkpoint
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models.xlnet import XLNetModel
network = XLNetModel(XLNetConfig.from_json(sys.argv[1]))
write_tf1_checkpoint({k: v.numpy() for k, v in network.tf1_variables().items()}, sys.argv[2])
"""


@pytest.mark.slow
@background
def test_run_squad_v11_train_and_eval(tmp_path):
    # Warm start from a checkpoint in the original TF1 release format.
    init = str(tmp_path / "release" / "xlnet_model.ckpt")
    done = subprocess.run([sys.executable, "-c", _TF1_RELEASE, os.path.join(REPO, "configs", "tiny.json"), init],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    model_dir = tmp_path / "v11"
    proc = run_squad(f"--model_dir={model_dir}", "--train_file=tests/fixtures/squad/train-v1.1.json",
                     "--predict_file=tests/fixtures/squad/dev-v1.1.json", "--train_steps=8", "--do_eval",
                     f"--init_checkpoint={init}")
    assert "initialised the network from" in proc.stderr
    predict = model_dir / "predict"
    predictions, nbest, null_odds = (_read(predict / n) for n in squad_postprocess.PREDICTION_FILES)
    dev = squad_data.read_squad_file(os.path.join(FIXTURES, "dev-v1.1.json"), False)
    ids = [e.qas_id for e in dev.examples]
    assert list(predictions) == ids and list(nbest) == ids and list(null_odds) == ids
    assert all(1 <= len(nbest[i]) <= 5 and nbest[i][0]["text"] == predictions[i] for i in ids)
    results = _read(predict / "eval_results.json")
    assert results["step"] == 8 and results["total"] == len(ids) and "NoAns_total" not in results
    assert results["official_script"] == "evaluate-v1.1.py"
    assert 0 <= results["exact"] <= results["f1"] <= 100
    assert os.listdir(model_dir / "eval") and (model_dir / "model-8.index").exists()
    assert list((model_dir / "data").glob("spiece.model.0.slen-64.qlen-16.train.tf_record"))


@pytest.mark.slow
@background
def test_run_squad_v20_prepro_train_predict_export(tmp_path):
    model_dir, data_dir = tmp_path / "v20", tmp_path / "features"
    common = [f"--model_dir={model_dir}", f"--output_dir={data_dir}",
              "--train_file=tests/fixtures/squad/train-v2.0.json", "--predict_file=tests/fixtures/squad/dev-v2.0.json"]
    # Sharded preprocessing, as the original's --do_prepro --num_proc --proc_id, the shards at once.
    for shard in [start_squad(*common, "--do_prepro", "--num_proc=2", f"--proc_id={i}") for i in range(2)]:
        finish_squad(shard)
    shards = sorted(p.name for p in data_dir.glob("*.tf_record"))
    assert shards == [f"spiece.model.{i}.slen-64.qlen-16.train.tf_record" for i in range(2)]
    done = run_squad(*common, "--train_steps=4", "--do_eval")
    first = _read(model_dir / "predict" / "eval_results.json")
    assert first["NoAns_total"] == 5 and first["HasAns_total"] == 13
    assert {"best_f1", "best_f1_thresh", "best_exact", "has_ans_f1"} <= set(first)
    assert first["official_script"] == "evaluate-v2.0.py" and first["null_score_diff_threshold"] is None
    thresh = first["best_f1_thresh"]
    (done_line,) = [line for line in done.stderr.splitlines() if "] done: " in line]
    assert f"--null_score_diff_threshold={thresh!r} (e.g. --nodo_train --do_predict)" in done_line
    # Predict-only from the fine-tuned checkpoint with the best threshold (the SQuAD 2.0 submission: "" where the
    # null odds exceed it, which the official script scores best_f1), plus the SavedModel export.
    run_squad(*common, "--nodo_train", "--do_predict", f"--predict_dir={tmp_path / 'pred'}",
              f"--export_dir={tmp_path / 'export'}", f"--null_score_diff_threshold={thresh!r}")
    null_odds = _read(tmp_path / "pred" / "null_odds.json")
    submitted = _read(tmp_path / "pred" / "predictions.json")
    assert submitted == {k: "" if null_odds[k] > thresh else v
                         for k, v in _read(model_dir / "predict" / "predictions.json").items()}
    from official.nlp.tools import squad_evaluate_v2_0 as official

    with open(os.path.join(FIXTURES, "dev-v2.0.json"), encoding="utf-8") as f:
        assert official.evaluate(json.load(f)["data"], submitted)["f1"] == first["best_f1"]
    assert _read(tmp_path / "pred" / "eval_results.json")["f1"] == first["best_f1"]
    assert _read(tmp_path / "pred" / squad_postprocess.SUMMARY)["settings"]["null_score_diff_threshold"] == thresh
    # The export's serve_ids (version = the step) in a fresh serving process, on the features --do_predict used
    # (cached in --output_dir): a question's null odds are the smallest CLS logit of its windows.
    features = squad_data.prepare_eval_features(os.path.join(FIXTURES, "dev-v2.0.json"), str(data_dir),
                                                squad_data.FeatureSettings(SPIECE, 64, 16, 24, False))[1]
    dtypes = dict(input_ids="int32", segment_ids="int32", padding_mask="float32", p_mask="float32", cls_index="int32")
    assert set(dtypes) == set(squad_data.INFERENCE_KEYS)
    reply = serve({"export": str(tmp_path / "export" / "4"), "calls": [{"signature": "serve_ids", "inputs": {
        key: {"dtype": dtype, "value": [getattr(f, key) for f in features]} for key, dtype in dtypes.items()}}]})
    cls_logits = reply["calls"][0]["outputs"]["cls_logits"]["value"]
    first_example = [i for i, f in enumerate(features) if f.example_index == 0]
    qid = squad_data.read_squad_file(os.path.join(FIXTURES, "dev-v2.0.json"), False).examples[0].qas_id
    assert min(cls_logits[i] for i in first_example) == pytest.approx(null_odds[qid], abs=1e-4)


@pytest.mark.slow
@background
def test_run_squad_reports_bad_flags_and_files(tmp_path):
    bad = _write(tmp_path, "train.json", '{"data": [')
    # The three runs at once (independent; each waits seconds for TensorFlow's import).
    runs = [start_squad(f"--model_dir={tmp_path}", "--train_file=nope.json", "--max_query_length=70"),
            start_squad(f"--model_dir={tmp_path}", "--do_prepro", "--doc_stride=200"),
            start_squad(f"--model_dir={tmp_path / 'm'}", f"--train_file={bad}", "--train_steps=2")]
    proc = finish_squad(runs[0], expect_rc=1)
    assert "--train_file=nope.json: file not found" in proc.stderr
    assert "--max_seq_length=64 leaves no room" in proc.stderr
    proc = finish_squad(runs[1], expect_rc=1)
    assert "--doc_stride=200 exceeds the paragraph window" in proc.stderr
    proc = finish_squad(runs[2], expect_rc=1)
    assert f"{bad}: not valid JSON" in proc.stderr


def test_batch_prediction_reads_a_squad_file_as_run_squad_does(tmp_path):
    """One reading of the format: a file run_squad.py refuses is refused by batch prediction too (naming the file
    and the place), and a question it cannot use (no id to join the answer on, empty text) is a bad row naming the
    question, where batch prediction once numbered it in the id or skipped its paragraph unseen."""
    from xlnet_tf.errors import InputError
    from xlnet_tf.tasks.squad import read_squad_rows
    from xlnet_tf.training.settings import SettingsError

    qas = [{"id": 7, "question": "What flows?"}, {"question": "No id?"}, {"id": "e", "question": " "},
           {"id": "s", "question": "Which?", "is_impossible": "false"}]
    path = _write(tmp_path, "rows.json", {"data": [{"paragraphs": [{"context": "The river.", "qas": qas}]}]})
    rows = list(read_squad_rows(path))
    assert [(r.line, r.text_a, r.text_b, r.id) for r in rows[:1]] == [(1, "What flows?", "The river.", "7")]
    assert [r.problem for r in rows[1:]] == [
        "data[0].paragraphs[0].qas[1] needs an 'id' and a 'question' string",
        "data[0].paragraphs[0].qas[2]: empty question",
        "data[0].paragraphs[0].qas[3] (id s): 'is_impossible' is 'false', not true or false"]
    assert rows[-1].end == os.path.getsize(path)
    noqas = _write(tmp_path, "noqas.json", {"data": [{"paragraphs": [{"context": "The river."}]}]})
    for read in (lambda p: list(read_squad_rows(p)), lambda p: squad_data.read_squad_file(p, False)):
        with pytest.raises(squad_data.SquadFileError, match=r"noqas\.json: data\[0\]\.paragraphs\[0\] has no 'qas'"):
            read(noqas)
    error = pytest.raises(InputError, squad_data.read_squad_file, str(tmp_path / "gone.json"), False).value
    assert not isinstance(error, SettingsError)  # a data file, not a setting


def test_feature_caches_follow_the_records_policy(tmp_path, caplog):
    """SQuAD's caches are records.cache_features' (one metadata reader): other settings are refused as every
    task's caches are, where they were rebuilt silently; a cache of the older format is rebuilt by the step that
    can rebuild it and refused clearly by the check of a --num_proc split; damaged metadata is one InputError,
    never a traceback."""
    from xlnet_tf.errors import InputError
    from xlnet_tf.finetuning import records

    train, dev, out = (os.path.join(FIXTURES, n) for n in ("train-v1.1.json", "dev-v1.1.json", str(tmp_path)))
    s = squad_data.FeatureSettings(SPIECE, 64, 16, 24, False)
    meta = squad_data.prepare_train_shard(train, out, s)
    path = squad_data.train_record_path(out, s, 0)
    assert squad_data.num_train_features(path) == meta["num_records"] > 0
    first = [r.numpy() for r in tf.data.TFRecordDataset(path).map(records.parse_fn(squad_data.feature_spec(64)))
             .take(1).map(lambda f: f["input_ids"])]
    assert first[0].dtype == np.int32
    squad_data.prepare_eval_features(dev, out, s)
    other = squad_data.FeatureSettings(SPIECE, 64, 16, 32, False)  # another --doc_stride, the same file names
    for prepare in (lambda: squad_data.prepare_train_shard(train, out, other),
                    lambda: squad_data.prepare_eval_features(dev, out, other)):
        with pytest.raises(InputError, match=r"doc_stride: cached 24 != now 32\); rerun with --overwrite_data"):
            prepare()
    with pytest.raises(InputError, match=r"differ from the current run in doc_stride; rerun --do_prepro"):
        squad_data.check_train_shards([path], train, other)
    # Version 2's manifest (its fields at the top level, num_features): rebuilt here, refused by a split's check.
    old = {"cache_version": 2, "data_file": train, "max_seq_length": 64, "num_features": 3}
    with open(path + ".json", "w") as f:
        json.dump(old, f)
    with pytest.raises(InputError, match=r"features cached in another format \(version 2, now 4\); rerun --do_prepro"):
        squad_data.check_train_shards([path], train, s)
    assert squad_data.prepare_train_shard(train, out, s)["cache_version"] == 4 and "another format" in caplog.text
    for damaged in ("{", "[]"):
        with open(path + ".json", "w") as f:
            f.write(damaged)
        for read in (squad_data.num_train_features, lambda p: squad_data.train_shards(out, s),
                     lambda p: squad_data.check_train_shards([p], train, s)):
            with pytest.raises(InputError, match=r"\.train\.tf_record\.json: unreadable cache metadata \(.*\); "
                                                 "rerun with --overwrite_data"):
                read(path)


def test_training_encodes_its_own_cache_of_an_older_format_or_another_input_path_again(tmp_path):
    """A training run's own feature cache (one process), written by an older xlnet_tf (format 1) or from the same
    file at another path (a moved data directory), is encoded again with a log line, as every family's caches,
    where it stopped the run; other settings are still refused, and so is a --do_prepro --num_proc split of an
    older format, which one run cannot write again."""
    import shutil

    from classifier_helpers import micro_config
    from pretraining_helpers import absl_messages
    from xlnet_tf.errors import InputError
    from xlnet_tf.finetuning import records
    from xlnet_tf.tasks.squad import SquadFamily, SquadSettings

    def task(train_file, model_dir="model", **flags):
        settings = dict(model_dir=str(tmp_path / model_dir), model_config_path=micro_config(tmp_path),
                        spiece_model_file=SPIECE, train_file=str(train_file), max_seq_length=48,
                        max_query_length=16, doc_stride=16, train_batch_size=2, do_train=True)
        return SquadFamily().task(SquadSettings(**dict(settings, **flags)).validate())

    train, moved = tmp_path / "a" / "train.json", tmp_path / "b" / "train.json"
    for copy in (train, moved):
        copy.parent.mkdir()
        shutil.copy(os.path.join(FIXTURES, "train-v1.1.json"), copy)
    (path,) = task(train)._training_shards()
    meta = records.read_meta(path)
    with open(path + ".json", "w") as f:  # the metadata of format 1 (as 7a08423 wrote it)
        json.dump({"cache_version": 1, "data_file": str(train), "data_sha256": meta["inputs"][0][2],
                   "spiece_sha256": meta["spiece_sha256"], "max_seq_length": 48, "max_query_length": 16,
                   "doc_stride": 16, "uncased": False, "num_proc": 1, "proc_id": 0,
                   "num_examples": meta["num_examples"], "num_features": meta["num_records"], "skipped": {}}, f)
    with absl_messages() as logged:
        assert task(train)._training_shards() == [path]
    assert any("cached in another format (version 1, now 4); encoding the features again" in m for m in logged)
    assert records.read_meta(path) == meta
    with absl_messages() as logged:
        assert task(moved)._training_shards() == [path]
    assert any("cached from other input files (another path, or content changed since)" in m for m in logged)
    assert records.read_meta(path)["inputs"] == records.file_identity(str(moved))
    with absl_messages() as logged:
        task(moved)._training_shards()
    assert not any("encoding the features again" in m for m in logged)
    assert any("using cached features" in m for m in logged)
    with pytest.raises(InputError, match=r"doc_stride: cached 16 != now 24\); rerun with --overwrite_data"):
        task(moved, doc_stride=24)._training_shards()

    split = task(train, model_dir="split", num_proc=2)
    for proc_id in (0, 1):
        part = squad_data.prepare_train_shard(str(train), split.settings.features_dir, split.feature_settings,
                                              num_proc=2, proc_id=proc_id)
    path = squad_data.train_record_path(split.settings.features_dir, split.feature_settings, 1)
    with open(path + ".json", "w") as f:
        json.dump(dict(part, cache_version=3), f)
    with pytest.raises(InputError, match=r"\.1\.slen-48\.qlen-16\.train\.tf_record: features cached in another "
                                         r"format \(version 3, now 4\); rerun --do_prepro"):
        task(train, model_dir="split")._training_shards()
