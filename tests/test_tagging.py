"""Token classification (``xlnet_tf.tasks.tagging``): the CoNLL/JSONL readers, word-to-piece alignment and windows
(Python and in-graph the same; every word scored once), entity metrics against hand-computed conlleval counts,
and one run_tagger run (micro model, windows forced by a short --max_seq_length) whose raw-text export, batch
prediction and Keras text model tag as its prediction files do, with character offsets into the text."""

import json
import os
import random

import keras
import numpy as np
import pytest
import tensorflow as tf
from seqeval.metrics.sequence_labeling import get_entities

import xlnet_tf
from classifier_helpers import REPO, SPIECE, micro_config
from xlnet_tf.batch import prediction as bp
from xlnet_tf.errors import InputError
from xlnet_tf import runner
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.tagging import tagging_data as td
from xlnet_tf.tasks.tagging import tagging_graph as tg
from xlnet_tf.tasks.tagging import TaggingSettings
from xlnet_tf.tokenization import XLNetTokenizer

BROWN = os.path.join(REPO, "data", "tagging")
SEQ = 16  # short windows: Brown sentences (~20 words, ~30 pieces) span several


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SPIECE)


# -- readers ------------------------------------------------------------------------------------------------------
def test_conll_and_jsonl_readers(tmp_path):
    conll = tmp_path / "a.conll"
    conll.write_text("-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\n-DOCSTART- -X- O O\n"
                     "Peter NNP B-NP B-PER\n")
    got = td.read_sentences(str(conll), tag_column=3)
    assert [(s.guid, s.words, s.tags) for s in got] == [("a.conll:3", ["EU", "rejects"], ["B-ORG", "O"]),
                                                         ("a.conll:8", ["Peter"], ["B-PER"])]
    assert td.read_sentences(str(conll), tag_column=1)[0].tags == ["NNP", "VBZ"]
    assert td.detect_scheme(["B-ORG", "O", "I-PER", "E-X", "S-Y"]) == "bio"
    assert td.detect_scheme(["nn", "O"]) == td.detect_scheme(["O"]) == "plain"
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text('{"tokens": ["a", "b"], "tags": ["x", "y"], "id": 7}\n\n{"tokens": ["c"], "tags": ["z"]}\n')
    assert [(s.guid, s.words, s.tags) for s in td.read_sentences(str(jsonl))] == [("7", ["a", "b"], ["x", "y"]),
                                                                                  ("b.jsonl:3", ["c"], ["z"])]
    bad = tmp_path / "bad.conll"
    bad.write_text("a x\n\nb\n")
    with pytest.raises(InputError, match=r"bad.conll:3: 1 column\(s\)"):
        td.read_sentences(str(bad))
    bad.write_text("a\n\nb\n")
    assert td.read_sentences(str(bad), labelled=False)[1].words == ["b"]  # an unlabelled file needs no tags
    jsonl.write_text('{"tokens": ["a", "b"], "tags": ["x"]}\n')
    with pytest.raises(InputError, match=r"b.jsonl:1: 'tags' must be a list of 2"):
        td.read_sentences(str(jsonl))


# -- alignment and windows ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, columns", [("New York\tnp", 3), ("emerge\tvb\textra", 3), ("alone", 1)])
def test_a_conll_line_with_other_columns_than_the_file_names_its_line(tmp_path, line, columns):
    """Columns are split on whitespace: a word with a space or a stray column would shift the word or the tag."""
    conll = tmp_path / "train.conll"
    conll.write_text(f"The\tat\ncity\tnn\n\n{line}\n")
    with pytest.raises(InputError, match=rf"^{conll}:4: {columns} column\(s\), but line 1 has 2 "):
        td.read_sentences(str(conll), labelled=columns != 1)


def test_conll_bad_utf8_names_the_line_a_bom_is_dropped_and_any_line_break_is_one(tmp_path):
    conll = tmp_path / "train.conll"
    conll.write_bytes(b"\xef\xbb\xbfThe at\r\ncity nn\r\n\r\ncaf\xe9 nn\r\n")
    with pytest.raises(InputError, match=rf"^{conll}:4: not UTF-8 text \(byte 0xe9 at character 4 of the line\)$"):
        td.read_sentences(str(conll))
    conll.write_bytes(b"\xef\xbb\xbfThe at\ncity nn\rsat vb\n")
    assert td.read_sentences(str(conll))[0].words == ["The", "city", "sat"]


def test_a_test_file_is_read_with_its_tags_when_it_has_them(tmp_path):
    """labelled=None (a test file): CoNLL-2003's eng.testb has tags, and --do_eval --eval_split=test and the
    ``word gold predicted`` predictions need them; an untagged file is read as before."""
    conll = tmp_path / "test.conll"
    conll.write_text("-DOCSTART- -X- O O\n\nEU NNP B-ORG\nrejects VBZ O\n")
    assert td.has_tags(str(conll)) and td.read_sentences(str(conll), labelled=None)[0].tags == ["B-ORG", "O"]
    assert not td.has_tags(str(conll), tag_column=3)  # the tag column is not there: no tags
    conll.write_text("EU\nrejects\n")
    assert not td.has_tags(str(conll)) and td.read_sentences(str(conll), labelled=None)[0].tags == []
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text('{"tokens": ["a"], "tags": ["x"]}\n{"tokens": ["b"], "tags": ["y"]}\n')
    assert td.has_tags(str(jsonl)) and [s.tags for s in td.read_sentences(str(jsonl), labelled=None)] == [["x"],
                                                                                                         ["y"]]
    jsonl.write_text('{"tokens": ["a"]}\n{"tokens": ["b"], "tags": ["y"]}\n')  # tags of some sentences only
    assert not td.has_tags(str(jsonl))
    with pytest.raises(InputError, match=rf"^{jsonl}:2: has 'tags', but line 1 has none"):
        td.read_sentences(str(jsonl), labelled=None)


def test_jsonl_empty_tokens_and_duplicate_ids_name_their_lines(tmp_path):
    """An empty sentence was dropped silently (a prediction file gave fewer rows); predictions are keyed by id."""
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text('{"id": "a", "tokens": ["x"]}\n{"id": "b", "tokens": []}\n')
    with pytest.raises(InputError, match=rf"^{jsonl}:2: 'tokens' is empty"):
        td.read_sentences(str(jsonl), labelled=False)
    jsonl.write_text('{"id": "a", "tokens": ["x"]}\n\n{"id": "b", "tokens": ["y"]}\n{"id": "a", "tokens": ["z"]}\n')
    with pytest.raises(InputError, match=rf"^{jsonl}:4: id 'a' is also the id of line 1"):
        td.read_sentences(str(jsonl), labelled=False)


def test_jsonl_tokens_with_whitespace_and_lone_surrogates_name_their_lines(tmp_path):
    """"New York" was one word here and two in the .conll output (its columns shifted) and the raw-text export;
    "\\ud800" reached SentencePiece, whose error named no file."""
    jsonl = tmp_path / "test.jsonl"
    for tokens, tags in ((["New York", "is"], ["np", "bez"]), (["a\tb", "c"], ["x", "y"]), (["a", "b"], ["x y", "z"])):
        jsonl.write_text('{"tokens": ["x"], "tags": ["o"]}\n' + json.dumps({"tokens": tokens, "tags": tags}) + "\n")
        with pytest.raises(InputError, match=rf"^{jsonl}:2: .*whitespace"):
            td.read_sentences(str(jsonl))
    jsonl.write_text('{"tokens": ["x"], "tags": ["o"]}\n{"tokens": ["x\\ud800y", "dog"], "tags": ["at", "nn"]}\n')
    with pytest.raises(InputError, match=rf"^{jsonl}:2: 'tokens\[0\]' holds a lone surrogate"):
        td.read_sentences(str(jsonl))


def test_windows_label_each_word_once_on_its_first_piece():
    # Words of 1, 3, 1, 2, 1, 2 pieces (10 pieces); windows of 4 pieces every 2: [0,4) [2,6) [4,8) [6,10).
    pieces = [[11], [12, 13, 14], [15], [16, 17], [18], [19, 20]]
    rows = td.encode_sentence(pieces, [0, 1, 2, 3, 4, 5], max_seq_length=6, stride=2)
    assert td.windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert [r["input_ids"] for r in rows] == [[11, 12, 13, 14, 4, 3], [13, 14, 15, 16, 4, 3],
                                              [15, 16, 17, 18, 4, 3], [17, 18, 19, 20, 4, 3]]
    # Training: the tag on every first piece a window holds, -1 on the others.
    assert [r["label"] for r in rows] == [[0, 1, -1, -1, -1, -1], [-1, -1, 2, 3, -1, -1],
                                          [2, 3, -1, 4, -1, -1], [-1, 4, 5, -1, -1, -1]]
    # Scoring: each word once, where its first piece is most central: piece 5 (word 3) is last in window 1
    # (min(3, 0) = 0) and second in window 2 (min(1, 2) = 1) -> window 2.
    scored = sorted((r["word_index"][p], k) for k, r in enumerate(rows) for p in range(6) if r["score_mask"][p])
    assert scored == [(0, 0), (1, 0), (2, 1), (3, 2), (4, 3), (5, 3)]


def test_in_graph_windows_equal_the_training_features(tokenizer):
    sentences = td.read_sentences(os.path.join(BROWN, "dev.conll"))[:12]
    sentences.append(td.Sentence("odd", ["\u0301", "2,000,", "``", "Atlanta's"], ["x"] * 4))  # no pieces: <unk>
    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=SEQ)
    encoded = tg.encode_words(pre, tf.ragged.constant([s.words for s in sentences]), stride=5)
    rows, scored = [], {}
    for i, s in enumerate(sentences):
        for f in td.encode_sentence(td.word_pieces(tokenizer, s.words, SEQ - 2), list(range(len(s.words))), SEQ,
                                    5):
            scored.update({(i, f["word_index"][p]): (len(rows), p) for p in range(SEQ) if f["score_mask"][p]})
            rows.append(f)
    assert len(rows) > 2 * len(sentences)
    for key in ("input_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(encoded[key].numpy(), np.array([r[key] for r in rows]))
    words = [(i, w) for i, s in enumerate(sentences) for w in range(len(s.words))]
    assert [scored[k] for k in words] == list(zip(encoded["window"].numpy().tolist(),
                                                  encoded["position"].numpy().tolist()))
    first_word = {sum(len(s.words) for s in sentences[:i]) + w: w for i, w in words}
    window_words = encoded["window_words"].numpy()
    for r, row in enumerate(rows):  # training's labels: the same word at the same positions
        np.testing.assert_array_equal([first_word[w] if w >= 0 else -1 for w in window_words[r]], row["label"])


# -- metrics --------------------------------------------------------------------------------------------------------
def test_entity_metrics_follow_conlleval():
    """Counts written from conlleval's definition (a chunk starts at B-, at I- after O or another type, ends
    before O, B- or another type; correct = same type and span)."""
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O"],   # chunks PER 0-1, LOC 3
            ["O", "B-PER", "I-PER", "O"],           # PER 1-2
            ["B-ORG", "I-ORG", "I-ORG"],            # ORG 0-2
            ["I-PER", "I-PER", "B-PER", "O"]]       # IOB1: PER 0-1, PER 2
    pred = [["B-PER", "I-PER", "O", "B-ORG", "O"],   # PER 0-1 (correct), ORG 3
            ["O", "I-PER", "I-PER", "O"],           # I- after O starts a chunk: PER 1-2 (correct)
            ["B-ORG", "I-LOC", "I-ORG"],            # a type change splits: ORG 0, LOC 1, ORG 2
            ["I-PER", "I-PER", "I-PER", "O"]]       # PER 0-2
    m = td.tagging_metrics(gold, pred, "bio")  # 6 gold chunks, 7 found, 2 correct; 12 of 16 tokens
    assert (m["precision"], m["recall"], m["f1"], m["accuracy"]) == pytest.approx((2 / 7, 2 / 6, 4 / 13, 12 / 16))
    # IOBES: as conlleval on the same tags in IOB2 (S- = B-, E- = I-): 3 gold, 4 found, 2 correct.
    m = td.tagging_metrics([["S-PER", "O", "B-LOC", "I-LOC", "E-LOC", "S-ORG"]],
                           [["S-PER", "O", "B-LOC", "E-LOC", "S-LOC", "S-ORG"]], "bio")
    assert (m["precision"], m["recall"], m["f1"]) == pytest.approx((2 / 4, 2 / 3, 4 / 7))
    assert set(td.tagging_metrics([["nn", "vb"]], [["nn", "nn"]], "plain")) == {"accuracy", "num_words"}
    # The export's in-graph entity spans are seqeval's.
    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    seqs = [[rng.choice(tags) for _ in range(rng.randint(0, 9))] for _ in range(200)]
    spans = tg.entities(tf.ragged.constant(seqs, dtype=tf.string, ragged_rank=1))
    got = [list(zip([t.decode() for t in a], b, c)) for a, b, c in
           zip(spans["type"].to_list(), spans["first_word"].to_list(), spans["last_word"].to_list())]
    assert got == [get_entities(s) for s in seqs]


def test_most_frequent_tag_baseline():
    train = [td.Sentence("", ["the", "run", "run", "run"], ["at", "nn", "vb", "vb"])]
    dev = [td.Sentence("", ["the", "run", "dog"], ["at", "nn", "vb"])]  # dog: unseen -> vb (most frequent)
    assert td.most_frequent_tag_baseline(train, dev) == dict(accuracy=2 / 3, num_words=3, unseen_words=1,
                                                             default_tag="vb")


def test_settings_errors_name_the_flags(tmp_path):
    base = dict(model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE, model_dir=str(tmp_path / "m"),
                do_train=True)
    errors = TaggingSettings.from_values(base).errors()
    assert any("--data_dir" in e for e in errors)
    errors = TaggingSettings.from_values(dict(base, data_dir=str(tmp_path), window_stride=40,
                                              max_seq_length=32)).errors()
    assert any("no train file" in e for e in errors) and any("--window_stride=40" in e for e in errors)
    assert not TaggingSettings.from_values(dict(base, train_file=os.path.join(BROWN, "train.conll"))).errors()
    errors = TaggingSettings.from_values(dict(base, train_file=os.path.join(BROWN, "train.conll"), do_predict=True,
                                              predict_input_glob="x/*.jsonl")).errors()
    assert any("xlnet_tf.cli.predict --saved_model" in e for e in errors)


def test_do_eval_on_a_test_file_is_refused_only_when_it_has_no_tags(tmp_path):
    """CoNLL-2003's eng.testb has tags (the settings refused --do_eval --eval_split=test for every task); an
    untagged test file is refused when it is read, naming it, before training (the settings do not read files)."""
    test_file = tmp_path / "test.conll"
    test_file.write_text("The\ncat\n")
    assert not TaggingSettings.from_values(dict(
        model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE, model_dir=str(tmp_path / "m"),
        do_eval=True, eval_split="test", test_file=str(test_file))).errors()
    task = _task(tmp_path, POS, do_train=True, do_eval=True, eval_split="test", test_file=str(test_file))
    with pytest.raises(InputError, match=rf"^{test_file}: no tags to evaluate \(its first word line has no "
                                         r"--tag_column=-1 apart from --word_column=0\): --do_eval "
                                         r"--eval_split=test needs a tagged file"):
        task.check_eval_data()
    # A tagged test file's cache written when test files were read untagged (label -1 everywhere, no "labelled"
    # in its meta) is encoded again with the tags.
    test_file.write_text("The DET\ncat NOUN\n")
    path, meta = _task(tmp_path, POS, eval_split="test", test_file=str(test_file)).prepare("test")
    assert meta["labelled"]
    del meta["labelled"]
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    assert _task(tmp_path, POS, eval_split="test", test_file=str(test_file)).prepare("test")[1]["labelled"]


@pytest.mark.alone
def test_job_files_run_the_tagger(monkeypatch):
    from xlnet_tf.batch.job_runner import load_job

    monkeypatch.chdir(REPO)  # the job's paths are relative to the repository root

    job = load_job(os.path.join(REPO, "configs", "jobs_tagging_tiny.yaml"))
    assert job.script == "run_tagger.py" and len(job.runs) == 4
    assert not TaggingSettings.from_values(dict(job.runs[0].flags)).errors()


# -- one fine-tuning run, its export, batch prediction and the Keras model ----------------------------------------
def _bio(sentences):
    """Brown's proper nouns (np*) as NAME entities and numbers (cd*) as NUM, IOB2."""
    out = []
    for s in sentences:
        tags, prev = [], None
        for t in s.tags:
            kind = "NAME" if t.startswith("np") else "NUM" if t.startswith("cd") else None
            tags.append("O" if kind is None else ("I-" if kind == prev else "B-") + kind)
            prev = kind
        out.append({"tokens": s.words, "tags": tags})
    return out


@pytest.fixture(scope="module")
def bio_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tagging")
    for split, source, count in (("train", "train.conll", 80), ("dev", "dev.conll", 24)):
        rows = _bio(td.read_sentences(os.path.join(BROWN, source))[:count])
        (tmp / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = TaggingSettings.from_values(dict(
        model_config_path=micro_config(tmp), spiece_model_file=SPIECE, data_dir=str(tmp),
        model_dir=str(tmp / "model"), export_dir=str(tmp / "export"), do_train=True, do_eval=True, do_predict=True,
        max_seq_length=SEQ, train_batch_size=8, eval_batch_size=32, predict_batch_size=32, train_steps=4,
        iterations=2, learning_rate=3e-3, dropout=0.0, dropatt=0.0))
    result = runner.run(settings)
    dev = [json.loads(line) for line in open(tmp / "dev.jsonl")]
    predicted = [json.loads(line) for line in open(tmp / "model" / "predict" / "tagging.dev.predictions.jsonl")]
    return dict(settings=settings, result=result, dev=dev, predicted=predicted, tmp=tmp,
                export=os.path.join(settings.export_dir, "4"))


@pytest.mark.slow
def test_run_tagger_evaluates_and_predicts_every_word(bio_run):
    dev, predicted = bio_run["dev"], bio_run["predicted"]
    assert [p["tokens"] for p in predicted] == [d["tokens"] for d in dev]
    assert all(len(p["tags"]) == len(p["tokens"]) for p in predicted)
    with open(os.path.join(bio_run["settings"].model_dir, "eval_results.dev.json")) as f:
        report = json.load(f)
    assert report["main_metric"] == "f1"
    expected = td.tagging_metrics([d["tags"] for d in dev], [p["tags"] for p in predicted], "bio")
    for key in ("accuracy", "precision", "recall", "f1"):
        assert report["metrics"][key] == pytest.approx(expected[key])
    conll = open(os.path.join(bio_run["settings"].model_dir, "predict", "tagging.dev.conll")).read()
    assert conll.split("\n\n")[0].split("\n")[0].split(" ")[:2] == [dev[0]["tokens"][0], dev[0]["tags"][0]]


@pytest.mark.slow
def test_a_tagged_test_file_is_evaluated_and_its_predictions_keep_the_gold_tags(bio_run):
    """--do_eval --eval_split=test (refused once for every task) scores a tagged test file into
    eval_results.test.json and eval_test/, beside the dev ones; tagging.test.conll is ``word gold predicted`` as
    conlleval reads it (the gold column was dropped for every test file)."""
    import dataclasses

    tmp, settings = bio_run["tmp"], bio_run["settings"]
    rows = _bio(td.read_sentences(os.path.join(BROWN, "dev.conll"))[24:30])
    (tmp / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dev_report = (tmp / "model" / "eval_results.dev.json").read_text()
    result = runner.run(dataclasses.replace(settings, do_train=False, eval_split="test", export_dir=None))
    predicted = [json.loads(line) for line in open(tmp / "model" / "predict" / "tagging.test.predictions.jsonl")]
    expected = td.tagging_metrics([r["tags"] for r in rows], [p["tags"] for p in predicted], "bio")
    assert result["eval"]["split"] == "test" and result["eval"]["metrics"]["num_words"] == expected["num_words"]
    for key in ("accuracy", "precision", "recall", "f1"):
        assert result["eval"]["metrics"][key] == pytest.approx(expected[key])
    assert json.loads((tmp / "model" / "eval_results.test.json").read_text()) == result["eval"]
    assert (tmp / "model" / "eval_results.dev.json").read_text() == dev_report  # the dev results stay
    assert os.listdir(tmp / "model" / "eval_test") and os.listdir(tmp / "model" / "eval_dev")
    conll = (tmp / "model" / "predict" / "tagging.test.conll").read_text().split("\n\n")
    assert [[line.split(" ") for line in block.strip().split("\n")] for block in conll] == [
        [[w, g, p] for w, g, p in zip(r["tokens"], r["tags"], q["tags"])] for r, q in zip(rows, predicted)]


@pytest.mark.slow
def test_raw_text_export_returns_tags_with_offsets(bio_run):
    serve = tf.saved_model.load(bio_run["export"]).signatures["serving_default"]
    dev, predicted = bio_run["dev"], bio_run["predicted"]
    out = serve(text=tf.constant([" ".join(d["tokens"]) for d in dev]))
    tags = [[t.decode() for t in row[:n]] for row, n in zip(out["tags"].numpy(), out["num_words"].numpy())]
    assert tags == [p["tags"] for p in predicted]  # in-graph windows and scoring = run_tagger's
    text = ["  Mr.\u00a0Dan  Díaz\tof Atlanta said 3,000 ``people'' came.\n", "", "Oslo"]
    out = {k: v.numpy() for k, v in serve(text=tf.constant(text)).items()}
    for i, t in enumerate(text):
        n = out["num_words"][i]
        spans = list(zip(out["start_char"][i][:n], out["end_char"][i][:n]))
        assert [t[a:b] for a, b in spans] == t.split() == [w.decode() for w in out["words"][i][:n]]
        row_tags = [x.decode() for x in out["tags"][i][:n]]
        want = [(kind, spans[a][0], spans[b][1]) for kind, a, b in get_entities(row_tags)]
        e = out["num_entities"][i]
        got = [(k.decode(), s, x) for k, s, x in zip(out["entity_types"][i][:e], out["entity_start_char"][i][:e],
                                                      out["entity_end_char"][i][:e])]
        assert got == want
        assert [x.decode() for x in out["entity_text"][i][:e]] == [t[s:x] for _, s, x in want]


@pytest.mark.slow
def test_batch_prediction_rows_and_keras_text_model(bio_run, tmp_path):
    dev = bio_run["dev"][:4]
    source = tmp_path / "in" / "part-0.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps({"id": i, "text": " ".join(d["tokens"])}) + "\n" for i, d in enumerate(dev)))
    predictor = bp.SavedModelPredictor(os.path.dirname(bio_run["export"]))
    bp.predict_shards(predictor, str(source), str(tmp_path / "out"), bp.Fields.parse("text", "id"), batch_size=4)
    rows = [json.loads(line) for line in open(tmp_path / "out" / "part-0.jsonl.predictions.jsonl")]
    assert [r["tags"] for r in rows] == [p["tags"] for p in bio_run["predicted"][:4]]
    assert rows[0]["words"] == dev[0]["tokens"] and "entities" in rows[0]

    with open(os.path.join(bio_run["settings"].model_dir, "tagging.tags.json")) as f:
        labels = json.load(f)["tags"]
    model = xlnet_tf.XLNetTextTagger.from_checkpoint(bio_run["settings"].model_dir, labels, seq_length=SEQ,
                                                     config=micro_config(tmp_path), spiece_model=SPIECE)
    words = [d["tokens"] for d in dev]
    out = model.predict(words, batch_size=8)
    assert [[t.decode() for t in row[:n]] for row, n in zip(out["tags"], out["num_words"])] == [r["tags"]
                                                                                                for r in rows]
    loaded = xlnet_tf.load_text_model(bio_run["settings"].model_dir)  # the run's directory alone: the same model
    assert type(loaded) is xlnet_tf.XLNetTextTagger and loaded.labels == labels
    np.testing.assert_array_equal(loaded.predict(words, batch_size=8)["tags"], out["tags"])
    streamed = model.predict(words[i:i + 8] for i in range(0, len(words), 8))  # a generator of word lists
    np.testing.assert_array_equal(streamed["tags"], out["tags"])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"), weighted_metrics=["accuracy"])
    model.fit(words, [d["tags"] for d in dev], batch_size=4, epochs=1, verbose=0)
    result = model.evaluate(words, [" ".join(d["tags"]) for d in dev], verbose=0, return_dict=True)
    # Word accuracy over each word once: a multiple of 1 / number of words.
    total = sum(len(w) for w in words)
    assert round(result["accuracy"] * total, 3) == pytest.approx(round(result["accuracy"] * total))
    # One batch in one step: each word scored once there too; predict_on_batch gives predict's tags.
    one_step = model.test_on_batch(words, [" ".join(d["tags"]) for d in dev], return_dict=True)
    assert one_step == pytest.approx(result, rel=1e-5)
    np.testing.assert_array_equal(model.predict_on_batch(words)["tags"], model.predict(words)["tags"])
    with pytest.raises(ValueError, match=r"labels: the export's tags are the model's \(\d+, in the head's order\)"):
        model.export(str(tmp_path / "serving"), labels=list(reversed(labels)))
    # Tags of another count or name: the error shows the sentence, or the tags, at fault.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"one tag per word; words:\] \[3\] \[tags:\] \[2\] "
                                                              r"\[sentence:\] \[The cat sat\]"):
        model.evaluate(["A dog", "The cat sat"], [" ".join(labels[:2]), " ".join(labels[:2])], verbose=0)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"not one of the model\W+s 4 \(B-NAME B-NUM I-NAME O\):\] \[NOPE\]"):
        model.evaluate(["A dog"], [f"{labels[0]} NOPE"], verbose=0)


# -- tags the head does not have; a stale record of tags (issue 36) ----------------------------------------------
def _task(tmp_path, train_rows, dev_rows=None, **values):
    from xlnet_tf.tasks.tagging import TaggingFamily

    for split, rows in (("train", train_rows), ("dev", dev_rows)):
        if rows is not None:
            (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"tokens": [w for w, _ in r],
                                                                           "tags": [t for _, t in r]}) + "\n"
                                                              for r in rows))
    settings = TaggingSettings.from_values(dict(dict(
        model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE, data_dir=str(tmp_path),
        model_dir=str(tmp_path / "model"), do_train=True, do_eval=dev_rows is not None, max_seq_length=SEQ),
        **values))
    return TaggingFamily().task(settings)


POS = [[("The", "DET"), ("cat", "NOUN"), ("sat", "VERB")], [("A", "DET"), ("dog", "NOUN")]]


def test_tags_only_in_the_dev_file_are_reported_and_count_as_errors(tmp_path, caplog):
    import logging

    task = _task(tmp_path, POS, [[("The", "DET"), ("cat", "NOUN"), ("purred", "ADV"), ("loudly", "ADV")]])
    assert task.labels == ["DET", "NOUN", "VERB"]
    with caplog.at_level(logging.WARNING):
        data = task.eval_data()
    assert "2 word(s) have tags the training data lacks {'ADV': 2}" in caplog.text
    summary = task.data_summary(data)
    assert summary["unknown_tags"] == {"ADV": 2} and summary["num_unknown_tag_words"] == 2
    report = task.write_eval({"accuracy": 0.5}, 1, "ckpt", data)
    with open(tmp_path / "model" / "eval_results.dev.json") as f:
        assert json.load(f)["data"]["unknown_tags"] == {"ADV": 2} == report["data"]["unknown_tags"]
    # the metrics count them wrong: the head can only predict training tags
    assert td.tagging_metrics([["DET", "NOUN", "ADV", "ADV"]], [["DET", "NOUN", "VERB", "VERB"]], "plain")[
        "accuracy"] == 0.5


def test_a_stale_tag_record_is_replaced_and_one_with_a_checkpoint_refuses_other_tags(tmp_path, caplog):
    import logging

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "tagging.tags.json").write_text(json.dumps({"tags": ["B-PER", "I-PER", "O"], "scheme": "bio"}))
    with caplog.at_level(logging.WARNING):  # a failed run's record (no checkpoint): the training file decides
        assert _task(tmp_path, POS).tag_info == {"tags": ["DET", "NOUN", "VERB"], "scheme": "plain"}
    assert "of a run that left no checkpoint; replaced" in caplog.text
    assert json.loads((model_dir / "tagging.tags.json").read_text())["tags"] == ["DET", "NOUN", "VERB"]
    (model_dir / "tagging.tags.json").write_text(json.dumps({"tags": ["B-PER", "I-PER", "O"], "scheme": "bio"}))
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "model-4"\n')
    with pytest.raises(InputError, match=r"has tags \['DET', 'NOUN', 'VERB'\] that .*tagging.tags.json \(the head "
                                         r"of the checkpoints in --model_dir=.*\['B-PER', 'I-PER', 'O'\]\) lacks"):
        _task(tmp_path, POS).tag_info
    assert _task(tmp_path, POS, do_train=False, do_eval=True).tag_info["tags"] == ["B-PER", "I-PER", "O"]
