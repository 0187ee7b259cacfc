"""GLUE/IMDB/Yelp reading in the official layouts, XLNet's input layout, bad input, feature caching, metrics."""

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats
from sklearn import metrics as skm

from classifier_helpers import FIXTURE_TASKS, FIXTURES, SPIECE
from xlnet_tf.tasks.classification import classifier_data as cd
from xlnet_tf.finetuning import metrics, records
from xlnet_tf.tokenization import CLS_ID, SEP_ID, XLNetTokenizer, file_sha256

GLUE = os.path.join(FIXTURES, "glue")


@pytest.fixture(scope="module")
def tokenizer():
    return XLNetTokenizer(SPIECE)


@pytest.mark.parametrize("name", sorted(FIXTURE_TASKS))
def test_reads_every_task_in_its_official_layout(name):
    task = cd.get_task(name)
    folder, *counts = FIXTURE_TASKS[name]
    labels = task.label_list()
    for split, count in zip(("train", "dev", "test"), counts):
        if count is None:
            continue
        data = cd.read_examples(task, os.path.join(GLUE, folder), split)
        assert len(data.examples) == count and not data.skipped, (split, data.skipped)
        for ex in data.examples:
            assert ex.text_a and "\t" not in ex.text_a
            assert (ex.text_b is not None) == (task.labeled.text_b is not None if task.labeled else False)
            if split == "test":
                assert ex.label is None
            elif task.regression:
                assert 0.0 <= ex.label <= 5.0
            else:
                assert ex.label in labels
    if task.test is not None:  # GLUE test ids come from the index column
        data = cd.read_examples(task, os.path.join(GLUE, folder), "test")
        assert [ex.guid for ex in data.examples] == [str(i) for i in range(5)]


def test_labels_come_from_tf_models_processors():
    assert cd.get_task("mnli").label_list() == ["contradiction", "entailment", "neutral"]
    assert cd.get_task("qnli").label_list() == ["entailment", "not_entailment"]
    assert cd.get_task("sts-b").label_list() is None and cd.get_task("sts-b").regression
    assert cd.get_task("CoLA").name == "cola" and cd.get_task("SST2").name == "sst-2"


def test_xlnet_input_layout(tokenizer):
    ex = cd.read_examples(cd.get_task("mrpc"), os.path.join(GLUE, "MRPC"), "dev").examples[0]
    a, b = tokenizer.encode_ids(ex.text_a), tokenizer.encode_ids(ex.text_b)
    ids, segs, mask, truncated = cd.encode_example(tokenizer, ex, 64)
    n = len(a) + len(b) + 3
    assert not truncated and len(ids) == len(segs) == len(mask) == 64
    pad = 64 - n
    assert ids[:pad] == [0] * pad and segs[:pad] == [4] * pad and mask[:pad] == [0.0] * pad  # left padding
    assert ids[pad:] == a + [SEP_ID] + b + [SEP_ID] + [CLS_ID]  # A <sep> B <sep> <cls>, CLS last
    assert segs[pad:] == [0] * (len(a) + 1) + [1] * (len(b) + 1) + [2]
    assert mask[pad:] == [1.0] * n


def test_truncation_pops_the_longer_segment(tokenizer):
    a, b = list(range(10)), list(range(100, 104))
    assert cd.truncate_pair(a, b, 8)
    assert a == [0, 1, 2, 3] and b == [100, 101, 102, 103]
    single = list(range(10))
    assert cd.truncate_pair(single, None, 6) and single == list(range(6))
    ids, segs, mask = records.pack_sequence(a, b, 13)
    assert ids[-1] == CLS_ID and ids[:2] == [0, 0] and mask[:3] == [0.0, 0.0, 1.0] and len(ids) == 13
    with pytest.raises(ValueError, match="exceeds max_seq_length=10"):
        records.pack_sequence(a, b, 10)


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_malformed_rows_are_skipped_and_counted(tmp_path, tokenizer):
    _write(str(tmp_path / "train.tsv"), "sentence\tlabel\ngood film\t1\nno label column\n\t0\nbad film\t0\n"
                                        "too\tmany\tcolumns\n")
    task = cd.get_task("sst-2")
    data = cd.read_examples(task, str(tmp_path), "train")
    assert [ex.text_a for ex in data.examples] == ["good film", "bad film"]
    assert len(data.skipped) == 3
    assert data.skipped[0].startswith(f"{tmp_path}/train.tsv:3:") and "empty text" in data.skipped[1]
    path, meta = cd.prepare_features(task, str(tmp_path), "train", tokenizer, 16, str(tmp_path / "out"))
    assert meta["num_examples"] == 2 and meta["num_skipped"] == 3 and meta["num_records"] == 2
    assert "train.tsv:3" in meta["skipped"][0]


def test_rows_of_files_without_a_header_have_exactly_the_tasks_columns(tmp_path):
    """CoLA train/dev and Yelp have no header row: an extra column was read as a shorter text before."""
    _write(str(tmp_path / "train.tsv"), "src\t1\t\tThe cat sat.\nsrc\t1\t\tThe cat sat\ton the mat today.\n")
    data = cd.read_examples(cd.get_task("cola"), str(tmp_path), "train")
    assert [ex.text_a for ex in data.examples] == ["The cat sat."]
    assert data.skipped == [f"{tmp_path}/train.tsv:2: 5 columns, the cola train layout needs 4"]
    # blank lines (trailing ones are common) are no rows, in a file with a header too
    _write(str(tmp_path / "dev.tsv"), "sentence\tlabel\nGood.\t1\n\nBad.\t0\n\n\n")
    data = cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "dev")
    assert [ex.text_a for ex in data.examples] == ["Good.", "Bad."] and data.skipped == []
    _write(str(tmp_path / "train.csv"), '"1","good"\n"2","good, and "fine"",x\n')
    data = cd.read_examples(cd.get_task("yelp2"), str(tmp_path), "train")
    assert [ex.text_a for ex in data.examples] == ["good"]
    assert data.skipped == [f"{tmp_path}/train.csv:2: 3 columns, the yelp2 train layout needs 2"]


def test_a_csv_quote_left_open_skips_the_rows_it_swallowed_naming_their_lines(tmp_path, tokenizer):
    rows = [f'"1","review {i}"\n' for i in range(20)]
    rows[4] = '"2","He said it was great and then\n'
    _write(str(tmp_path / "train.csv"), "".join(rows))
    data = cd.read_examples(cd.get_task("yelp2"), str(tmp_path), "train")
    assert len(data.examples) == 18 and "review 5" not in {ex.text_a for ex in data.examples}
    assert data.skipped == [f"{tmp_path}/train.csv:5: a quoted field runs on to line 6 (an unclosed quote?); "
                            "the rows of lines 5-6 are skipped"]
    _write(str(tmp_path / "train.csv"), "".join(rows[:5]) + "no closing quote at all\n")  # to the end of the file
    data = cd.read_examples(cd.get_task("yelp2"), str(tmp_path), "train")
    assert len(data.examples) == 4 and data.skipped[0].startswith(f"{tmp_path}/train.csv:5: a quoted field runs on "
                                                                   "to line 6")
    meta = cd.prepare_features(cd.get_task("yelp2"), str(tmp_path), "train", tokenizer, 16, str(tmp_path / "o"))[1]
    assert meta["num_examples"] == 4 and meta["num_skipped"] == 1 and "train.csv:5" in meta["skipped"][0]


def test_imdb_names_a_review_that_is_not_utf8_and_skips_empty_ones(tmp_path):
    for label, name, text in [("neg", "0_1.txt", b"Dull.<br />Long."), ("neg", "1_2.txt", b"  \n"),
                              ("pos", "2_9.txt", b"Great fun.")]:
        os.makedirs(tmp_path / "train" / label, exist_ok=True)
        (tmp_path / "train" / label / name).write_bytes(text)
    data = cd.read_examples(cd.get_task("imdb"), str(tmp_path), "train")
    assert [(ex.text_a, ex.label) for ex in data.examples] == [("Dull. Long.", "neg"), ("Great fun.", "pos")]
    assert data.skipped == [f"{tmp_path}/train/neg/1_2.txt: empty review"]
    (tmp_path / "train" / "pos" / "3_8.txt").write_bytes(b"Fine.\nGood \xe9t\xe9 film.")
    with pytest.raises(ValueError, match=r"train/pos/3_8\.txt:2: not UTF-8 text \(byte 6 of the line: "):
        cd.read_examples(cd.get_task("imdb"), str(tmp_path), "train")


def test_label_outside_the_label_set_names_file_and_line(tmp_path):
    _write(str(tmp_path / "dev.tsv"), "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tmaybe\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:3: label 'maybe' is not in task rte's label set"):
        cd.read_examples(cd.get_task("rte"), str(tmp_path), "dev")
    _write(str(tmp_path / "train.tsv"), "\t".join(["c"] * 9 + ["score"]) + "\n" + "\t".join(["x"] * 9 + ["high"]))
    with pytest.raises(ValueError, match=r"train\.tsv:2: label 'high' is not a number"):
        cd.read_examples(cd.get_task("sts-b"), str(tmp_path), "train")


def test_bad_utf8_names_its_line_a_bom_is_dropped_and_gzip_is_named(tmp_path):
    task = cd.get_task("sst-2")
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\ngood film\t1\nbad \xff film\t0\n")
    with pytest.raises(ValueError, match=r"train\.tsv:3: not UTF-8 text \(byte 5 of the line: invalid start byte\)$"):
        cd.read_examples(task, str(tmp_path), "train")
    (tmp_path / "train.tsv").write_bytes(gzip.compress(b"sentence\tlabel\ngood film\t1\n"))
    with pytest.raises(ValueError, match=r"train\.tsv:1: not UTF-8 text .*\(a gzip file\? decompress it first\)"):
        cd.read_examples(task, str(tmp_path), "train")
    # Yelp's CSVs have no header: a byte-order mark would otherwise be part of the first row's label.
    (tmp_path / "train.csv").write_bytes('\ufeff"1","good film"\n'.encode("utf-8"))
    example = cd.read_examples(cd.get_task("yelp2"), str(tmp_path), "train").examples[0]
    assert (example.text_a, example.label) == ("good film", "1")


def test_json_lines_name_the_line_of_bad_utf8_or_json_and_drop_a_bom(tmp_path):
    task = cd.get_task("brown_genre")
    good = '{"id": "d1", "text": "A long day.", "label": "press: reportage"}\n'
    (tmp_path / "genre_train.jsonl").write_bytes(("\ufeff" + good + "\n" + good).encode("utf-8"))
    assert [e.guid for e in cd.read_examples(task, str(tmp_path), "train").examples] == ["d1", "d1"]
    (tmp_path / "genre_train.jsonl").write_bytes(good.encode("utf-8") + b'{"text": "bad \xff"}\n')
    with pytest.raises(ValueError, match=r"genre_train\.jsonl:2: not UTF-8 text \(byte 15 of the line\)"):
        cd.read_examples(task, str(tmp_path), "train")
    (tmp_path / "genre_train.jsonl").write_text(good + "\n" + '{"text": "cut off\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"genre_train\.jsonl:3: not JSON"):
        cd.read_examples(task, str(tmp_path), "train")


@pytest.mark.parametrize("score", ["17.5", "-0.1", "nan", "inf"])
def test_sts_b_score_outside_its_range_names_file_and_line(tmp_path, score):
    _write(str(tmp_path / "train.tsv"), "\t".join(["c"] * 9 + ["score"]) + "\n"
           + "\t".join(["x"] * 9 + ["3.2"]) + "\n" + "\t".join(["x"] * 9 + [score]) + "\n")
    with pytest.raises(ValueError, match=rf"train\.tsv:3: score '{score}' is outside sts-b's range \[0, 5\]"):
        cd.read_examples(cd.get_task("sts-b"), str(tmp_path), "train")


def test_feature_cache_follows_its_input_and_a_failed_encoding_leaves_none(tmp_path, tokenizer):
    """A replaced train.tsv is encoded again (not the stale cache); an input without usable examples is an
    error that writes no cache, so fixing the file is enough."""
    data, out = str(tmp_path / "data"), str(tmp_path / "out")
    task = cd.get_task("sst-2")
    _write(os.path.join(data, "train.tsv"), "sentence\tlabel\n" + "good film\t1\nbad film\t0\n" * 3)
    assert cd.prepare_features(task, data, "train", tokenizer, 16, out)[1]["num_examples"] == 6
    _write(os.path.join(data, "train.tsv"), "sentence\tlabel\n" + "good film\t1\n" * 2)
    assert cd.prepare_features(task, data, "train", tokenizer, 16, out)[1]["num_examples"] == 2
    _write(os.path.join(data, "train.tsv"), "sentence\tlabel\n")
    with pytest.raises(ValueError, match=r"train\.tsv: no usable examples"):
        cd.prepare_features(task, data, "train", tokenizer, 16, out)
    assert not [f for f in os.listdir(out) if f.startswith("sst-2")]
    _write(os.path.join(data, "train.tsv"), "sentence\tlabel\n" + "fine film\t1\n" * 3)
    assert cd.prepare_features(task, data, "train", tokenizer, 16, out)[1]["num_examples"] == 3


def test_feature_cache_of_another_data_dir_with_a_same_named_same_sized_file_is_not_reused(tmp_path, tokenizer):
    """The cache knew its input by name, size and mtime: a relabelled copy in another --data_dir (cp -p, rsync -t)
    was served the first directory's labels."""
    task, out = cd.get_task("sst-2"), str(tmp_path / "out")
    for name, rows in (("c1", "good film\t1\nbad film\t0\n"), ("c2", "good film\t0\nbad film\t1\n")):
        _write(str(tmp_path / name / "train.tsv"), "sentence\tlabel\n" + rows)
        os.utime(tmp_path / name / "train.tsv", ns=(10**18, 10**18))
    labels = []
    for name in ("c1", "c2"):
        path, meta = cd.prepare_features(task, str(tmp_path / name), "train", tokenizer, 16, out)
        parse = records.parse_fn(cd.feature_spec(16, False))
        labels.append([int(r["label"]) for r in tf.data.TFRecordDataset(path).map(parse)])
        assert meta["source"] == str(tmp_path / name / "train.tsv")
    assert labels == [[1, 0], [0, 1]]
    identity = records.file_identity(str(tmp_path / "c2" / "train.tsv"))
    assert identity == [[str(tmp_path / "c2" / "train.tsv"), 38, file_sha256(str(tmp_path / "c2" / "train.tsv"))]]
    # a cache written with the old identity (name, size, mtime) is encoded again, not refused or reused
    with open(path + ".json") as f:
        meta = json.load(f)
    meta["inputs"] = [["train.tsv", 38, 10**18]]
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    assert cd.prepare_features(task, str(tmp_path / "c2"), "train", tokenizer, 16, out)[1]["inputs"] == identity


def test_jsonl_text_with_a_lone_surrogate_is_skipped_and_counted(tmp_path):
    """JSON's "\\ud800" reached SentencePiece, whose pybind error named no file or line."""
    _write(str(tmp_path / "genre_train.jsonl"), '{"text": "fine", "label": "humor"}\n'
                                                '{"text": "x\\ud800y", "label": "humor"}\n')
    data = cd.read_examples(cd.get_task("brown_genre"), str(tmp_path), "train")
    assert [ex.text_a for ex in data.examples] == ["fine"]
    assert data.skipped == [f"{tmp_path}/genre_train.jsonl:2: 'text' holds a lone surrogate (not valid Unicode)"]


def test_unknown_task_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="unknown task; known: ax, brown_genre, cola"):
        cd.get_task("glue")
    with pytest.raises(FileNotFoundError, match="dev_mismatched.tsv"):
        cd.read_examples(cd.get_task("mnli_mismatched"), str(tmp_path), "dev")
    with pytest.raises(ValueError, match="no 'test' split"):
        cd.read_examples(cd.get_task("imdb"), str(tmp_path), "test")


def test_feature_cache_is_reused_and_checked(tmp_path, tokenizer):
    task, data_dir, out = cd.get_task("cola"), os.path.join(GLUE, "CoLA"), str(tmp_path)
    path, meta = cd.prepare_features(task, data_dir, "train", tokenizer, 24, out)
    assert os.path.basename(path) == "cola.spiece.model.len-24.train.tf_record"
    assert meta["num_records"] == 8 and meta["labels"] == ["0", "1"] and len(meta["guids"]) == 8
    mtime = os.path.getmtime(path)
    assert cd.prepare_features(task, data_dir, "train", tokenizer, 24, out)[1]["num_examples"] == 8
    assert os.path.getmtime(path) == mtime  # reused
    with pytest.raises(ValueError, match="--overwrite_data"):
        cd.prepare_features(task, data_dir, "train", XLNetTokenizer(SPIECE, lower=True), 24, out)
    cd.prepare_features(task, data_dir, "train", XLNetTokenizer(SPIECE, lower=True), 24, out, overwrite=True)
    assert not [f for f in os.listdir(out) if ".tmp-" in f]  # atomic writes leave nothing behind
    ds = records.eval_dataset(path, cd.feature_spec(24, False), cd.dummy_features(24, False), 8, 3)
    batches = list(ds)
    assert len(batches) == 3 and int(sum(b["is_real_example"].numpy().sum() for b in batches)) == 8
    assert batches[-1]["example_index"].numpy().tolist()[-1] == -1


def test_a_long_cache_build_logs_its_progress_and_a_short_one_nothing(tmp_path, tokenizer, monkeypatch):
    """Every feature cache is written by records.cache_features: 504,000 rows took 23 s without a line, a 20 MB
    CoNLL file 19 s. Now a line every Progress.EVERY_S (20 s) after the first 20 s: count, share, rate, ETA."""
    from pretraining_helpers import absl_messages
    from xlnet_tf.progress_lines import Progress

    task, data_dir = cd.get_task("cola"), os.path.join(GLUE, "CoLA")
    with absl_messages() as quiet:
        cd.prepare_features(task, data_dir, "train", tokenizer, 24, str(tmp_path / "a"))
    assert not [m for m in quiet if " | " in m], quiet  # a small input: no progress line
    monkeypatch.setattr(Progress, "EVERY_S", 0.0)
    with absl_messages() as logged:
        cd.prepare_features(task, data_dir, "train", tokenizer, 24, str(tmp_path / "b"))
    lines = [m for m in logged if m.startswith("encoding cola.spiece.model.len-24.train.tf_record | ")]
    assert len(lines) == 8 and lines[-1].startswith("encoding cola.spiece.model.len-24.train.tf_record | 8/8 "
                                                     "examples (100%), ") and lines[-1].endswith("ETA 0m00s"), lines
    # Its clock: nothing before every_s, then at most one line per every_s; past the total no share or ETA.
    now = [0.0]
    counter = Progress("x", 3, every_s=10, clock=lambda: now[0])
    with absl_messages() as ticks:
        for t in (1, 9, 11, 12, 25, 26):
            now[0] = t
            counter.advance()
    assert ticks == ["x | 3/3 examples (100%), 0 examples/s, ETA 0m00s", "x | 5 examples, 0 examples/s"]
    # A resumed job (a quarter done before) in MB: the share counts that quarter, the rate and ETA this run's bytes.
    now[0] = 0.0
    counter = Progress("predict", 4e6, "MB", every_s=0, scale=1e-6, done=1e6, clock=lambda: now[0])
    with absl_messages() as ticks:
        now[0] = 10.0
        counter.advance(1e6, note="shard 2/4")
    assert ticks == ["predict | shard 2/4 | 2.0/4.0 MB (50%), 0.1 MB/s, ETA 0m20s"]


def test_metrics_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 50)
    logits = rng.normal(size=(50, 2)) + np.eye(2)[labels] * 0.8
    pred = logits.argmax(-1)
    m = metrics.classification_metrics(logits, labels, ("mcc", "f1", "accuracy"))
    assert m["mcc"] == pytest.approx(skm.matthews_corrcoef(labels, pred))
    assert m["f1"] == pytest.approx(skm.f1_score(labels, pred))
    assert m["accuracy"] == pytest.approx((pred == labels).mean())
    y = rng.uniform(0, 5, 40)
    s = y + rng.normal(size=40)
    r = metrics.regression_metrics(s, y)
    assert r["pearson"] == pytest.approx(stats.pearsonr(s, y)[0])
    assert r["spearman"] == pytest.approx(stats.spearmanr(s, y)[0])
    assert metrics.regression_metrics(np.ones(3), np.arange(3.0))["pearson"] == 0.0  # constant: no NaN
    mc = metrics.multiple_choice_metrics(np.eye(4)[[0, 1, 2, 3]], np.array([0, 1, 0, 0]), np.array([0, 0, 1, 1]))
    assert mc == {"accuracy": 0.5, "num_examples": 4, "accuracy_middle": 1.0, "num_middle": 2, "accuracy_high": 0.0,
                  "num_high": 2}


def test_a_first_row_that_is_data_is_refused_not_dropped_as_the_header(tmp_path):
    """Every row after the first was read, and the first was dropped unseen: a file without a header lost it."""
    _write(str(tmp_path / "train.tsv"), "the very first row\t1\na fine film\t1\n")
    with pytest.raises(ValueError, match=r"train\.tsv:1: the first row looks like data, not a header \(its label "
                                         r"column holds '1'.*the official one: sentence, label"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "train")
    _write(str(tmp_path / "test.tsv"), "0\tgreat film\n1\tbad film\n")
    with pytest.raises(ValueError, match=r"test\.tsv:1: .*index column holds '0'.*index, sentence"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "test")
    _write(str(tmp_path / "train.tsv"), "a\tb\tc\td\te\tf\tg\thi\tthere\t4.5\n")
    with pytest.raises(ValueError, match=r"train\.tsv:1: .*holds '4\.5', a score"):
        cd.read_examples(cd.get_task("sts-b"), str(tmp_path), "train")
    _write(str(tmp_path / "dev.tsv"), "text\tgold\ngood film\t1\n")  # a header of the user's own names
    assert [ex.text_a for ex in cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "dev").examples] == ["good film"]


def test_a_header_naming_the_columns_in_another_order_is_read_by_name(tmp_path):
    """The index column was read as the text (and the text as the id) by position."""
    _write(str(tmp_path / "test.tsv"), "sentence\tindex\ngreat film\t7\n")
    ex = cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "test").examples
    assert [(e.guid, e.text_a) for e in ex] == [("7", "great film")]
    _write(str(tmp_path / "dev.tsv"), "label\tsentence2\tindex\tsentence1\nentailment\tb\t0\ta\n")
    ex = cd.read_examples(cd.get_task("rte"), str(tmp_path), "dev").examples
    assert [(e.text_a, e.text_b, e.label) for e in ex] == [("a", "b", "entailment")]
    _write(str(tmp_path / "test.tsv"), "sentence\ngreat film\n")  # some of the names, elsewhere
    with pytest.raises(ValueError, match=r"test\.tsv:1: the header names 'sentence' but not every column the sst-2 "
                                         r"test layout needs \(index, sentence\)"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "test")
    _write(str(tmp_path / "test.tsv"), "sentence\tindex\tsentence\nx\t0\ty\n")
    with pytest.raises(ValueError, match="names column.s. 'sentence' more than once"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "test")


def test_a_row_too_short_for_the_layout_says_what_the_layout_needs(tmp_path):
    _write(str(tmp_path / "dev.tsv"), "text\nx\n")
    assert cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "dev").skipped == [
        f"{tmp_path}/dev.tsv:2: 1 column, the sst-2 dev layout needs 2 (sentence, label)"]


QQP_TEST = "id\tquestion1\tquestion2\n" + "".join(f"{i}\tWhy is {i} odd?\tIs {i} odd?\n" for i in range(17))


def _qqp_test(tmp_path, row: int, replacement: str) -> None:
    lines = QQP_TEST.splitlines(keepends=True)
    lines[row + 1] = replacement
    _write(str(tmp_path / "test.tsv"), "".join(lines))


def test_a_test_row_with_an_empty_text_is_predicted_from_the_empty_text(tmp_path, tokenizer):
    """Test rows are a submission (one prediction per row, in order): a row with an empty question was skipped,
    and QQP.tsv was one row short with exit 0."""
    _qqp_test(tmp_path, 4, "4\tWhy is 4 odd?\t \n")
    data = cd.read_examples(cd.get_task("qqp"), str(tmp_path), "test")
    assert [ex.guid for ex in data.examples] == [str(i) for i in range(17)] and data.skipped == []
    assert (data.examples[4].text_a, data.examples[4].text_b) == ("Why is 4 odd?", "")
    path, meta = cd.prepare_features(cd.get_task("qqp"), str(tmp_path), "test", tokenizer, 16, str(tmp_path))
    assert meta["num_records"] == 17 and meta["guids"] == [str(i) for i in range(17)]
    parse = records.parse_fn(cd.feature_spec(16, False))
    fifth = list(tf.data.TFRecordDataset(path).map(parse).skip(4).take(1))[0]
    a = tokenizer.encode_ids("Why is 4 odd?")
    # A <sep> B <sep> <cls> with B empty
    assert fifth["input_ids"].numpy().tolist()[-len(a) - 3:] == a + [SEP_ID, SEP_ID, CLS_ID]
    # a text of the jsonl reader too
    _write(str(tmp_path / "genre_test.jsonl"), '{"id": "a", "text": "Fine."}\n{"id": "b", "text": ""}\n')
    data = cd.read_examples(cd.get_task("brown_genre"), str(tmp_path), "test")
    assert [(ex.guid, ex.text_a) for ex in data.examples] == [("a", "Fine."), ("b", "")]


@pytest.mark.parametrize("row,why", [("7\tWhy is 7 odd?\n", "2 columns, the header has 3"),
                                     ("7\tWhy\ris 7 odd?\tIs 7 odd?\n", "a carriage return")])
def test_a_test_row_that_cannot_be_read_is_an_error_naming_file_and_line(tmp_path, row, why):
    _qqp_test(tmp_path, 7, row)
    with pytest.raises(ValueError, match=rf"test\.tsv:9: {why}.*; a test row cannot be skipped: the submission needs "
                                         "one prediction per test row"):
        cd.read_examples(cd.get_task("qqp"), str(tmp_path), "test")


@pytest.mark.parametrize("line", ['{"id": "b"}', '{"id": "b", "text": 3}', '{"id": "b", "text": "x\\ud800"}'])
def test_a_jsonl_test_line_without_usable_text_is_an_error(tmp_path, line):
    _write(str(tmp_path / "genre_test.jsonl"), '{"id": "a", "text": "Fine."}\n' + line + "\n")
    with pytest.raises(ValueError, match=r"genre_test\.jsonl:2: .*; a test row cannot be skipped"):
        cd.read_examples(cd.get_task("brown_genre"), str(tmp_path), "test")
    _write(str(tmp_path / "genre_dev.jsonl"), '{"text": "Fine.", "label": "humor"}\n' + line + "\n")
    assert len(cd.read_examples(cd.get_task("brown_genre"), str(tmp_path), "dev").skipped) == 1  # dev: skipped


def test_a_feature_cache_of_an_older_format_is_encoded_again(tmp_path, tokenizer):
    """A test split cached before version 2 skipped its empty-text rows: its input is unchanged, so only the
    format version tells the short cache from a good one."""
    _qqp_test(tmp_path, 4, "4\tWhy is 4 odd?\t\n")
    path, meta = cd.prepare_features(cd.get_task("qqp"), str(tmp_path), "test", tokenizer, 16, str(tmp_path))
    assert meta["cache_version"] == cd.CACHE_VERSION and meta["num_examples"] == 17
    with open(path + ".json") as f:
        old = json.load(f)
    old.pop("cache_version", None)  # as written before version 2
    old.update(num_examples=16, guids=old["guids"][:4] + old["guids"][5:])
    with open(path + ".json", "w") as f:
        json.dump(old, f)
    assert cd.prepare_features(cd.get_task("qqp"), str(tmp_path), "test", tokenizer, 16, str(tmp_path))[1][
        "num_examples"] == 17


def test_a_carriage_return_inside_a_row_skips_it_and_cr_only_files_are_named(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\r\nhalf\rline\t1\r\na fine film\t1\r\n")
    data = cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "train")
    assert [ex.text_a for ex in data.examples] == ["a fine film"]
    assert data.skipped == [f"{tmp_path}/train.tsv:2: a carriage return (\\r) inside the row (mixed line endings?)"]
    (tmp_path / "dev.tsv").write_bytes(b"sentence\tlabel\rgood film\t1\rbad film\t0\r")
    with pytest.raises(ValueError, match=r"dev\.tsv:1: a carriage return .* inside the file's only line \(CR-only"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_bytes(b"sentence\tla\rbel\ngood film\t1\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:1: a carriage return .* inside the header"):
        cd.read_examples(cd.get_task("sst-2"), str(tmp_path), "dev")
