"""The in-graph preprocessor (``xlnet_tf.preprocessing.XLNetPreprocessor``) against the Python tokenizer and the
fine-tuning encoders: the same ids on every bundled text, the fine-tuning fixtures and a seeded Unicode fuzz (both
lower-case settings, accents kept or not), the same features (pairs, truncation, padding, RACE's layout), defined
behaviour on invalid UTF-8, and a SavedModel that a process importing only tensorflow and tensorflow_text runs."""

import glob
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from background import background
from xlnet_tf.tasks.classification import classifier_data
from xlnet_tf.tasks.multiple_choice import race_data
from xlnet_tf.errors import InputError
from xlnet_tf.preprocessing import XLNetPreprocessor, pair_lengths
from xlnet_tf.tasks.multiple_choice.multiple_choice_graph import encode_choices
from xlnet_tf.tasks.squad.squad_graph import squad_windows
from xlnet_tf.tokenization import XLNetTokenizer, preprocess_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIECE = os.path.join(ROOT, "data", "spiece.model")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


@pytest.fixture(scope="module")
def tokenizers():
    return {lower: XLNetTokenizer(SPIECE, lower=lower) for lower in (False, True)}


@pytest.fixture(scope="module")
def preprocessors():
    return {lower: XLNetPreprocessor.from_file(SPIECE, seq_length=32, lower_case=lower) for lower in (False, True)}


def _bundled_texts() -> dict:
    """Every text field of the bundled data and the fine-tuning fixtures, by file (all lines of each file)."""
    texts = {}
    for path in glob.glob(os.path.join(ROOT, "data", "corpus", "*.txt")):
        with open(path, encoding="utf-8") as f:
            texts[path] = f.read().splitlines()
    tsvs = glob.glob(os.path.join(ROOT, "data", "sentiment", "*.tsv")) + glob.glob(
        os.path.join(FIXTURES, "glue", "*", "*.tsv")) + glob.glob(os.path.join(FIXTURES, "glue", "*", "*.csv"))
    for path in tsvs:  # every column of every row: sentences, and the ids and labels too (more strings)
        with open(path, encoding="utf-8") as f:
            texts[path] = [field for line in f.read().splitlines() for field in line.split("\t")]
    for path in glob.glob(os.path.join(FIXTURES, "glue", "IMDB", "*", "*", "*.txt")):
        with open(path, encoding="utf-8") as f:
            texts[path] = [f.read()]
    for path in glob.glob(os.path.join(FIXTURES, "race", "*", "*", "*.txt")):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        texts[path] = [data["article"], *data["questions"], *[o for opts in data["options"] for o in opts]]
    for path in glob.glob(os.path.join(FIXTURES, "squad", "*.json")):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)["data"]
        texts[path] = [t for article in data for p in article["paragraphs"]
                       for t in [p["context"]] + [qa["question"] for qa in p["qas"]]]
    return texts


def _fuzz_strings(count: int, seed: int = 0) -> list:
    """Random byte strings mixing what the preprocessing treats specially (see the pools) with invalid UTF-8."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?-()'\"`_",
        "0123456789,,,",
        "éèêëàâäçñöüÅØæßİıΣσςǅﬁﬀ½²①ⅫÉÀ",  # accents, case oddities, compatibility characters
        "\u0300\u0301\u0308\u0327\u0345\u20d7\u1dc0\u302a\u0e48\u05b0\u093c",  # combining marks (and Mn that are not)
        "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000",  # spaces
        "\u200b\u200c\u200d\u2060\ufeff\u00ad\x00\x01\x07\x1b\x7f\u0080\u009f",  # zero-width, control characters
        "中文字符日本語のテキスト한국어조선말ㄱㅏ",
        "😀😂🎉👍🏽👨‍👩‍👧🇩🇪❤️",
        "٠١٢٣٤٥٦٧٨٩۱۲۳०१२३",  # other scripts' digits (str.isdigit)
    ]
    specials = ["``", "''", "1,000,", "2000,", " 3,5 ", "12,", "▁", "\u2581,", "_", "  "]
    bad = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"\x80"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.15:
                parts.append(rng.choice(specials).encode())
            elif kind < 0.2:
                parts.append(rng.choice(bad))
            elif kind < 0.25:  # any code point outside the surrogates
                cp = rng.choice([rng.randint(0x80, 0x2FFF), rng.randint(0x3000, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])
                parts.append(chr(cp).encode())
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))).encode())
        out.append(b"".join(parts))
    return out


def _python_ids(tokenizer, text: bytes | str, keep_accents: bool = False) -> list:
    """What the Python tokenizer gives for ``text``; bytes are decoded with errors="replace" (the documented
    behaviour of the preprocessor on invalid UTF-8)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if keep_accents:
        return tokenizer.encode_ids(preprocess_text(text, lower=tokenizer.lower, keep_accents=True), preprocess=False)
    return tokenizer.encode_ids(text)


def _assert_same_ids(pre, tokenizer, texts, keep_accents=False, what="", ties_allowed=0.0):
    """The preprocessor's ids equal the Python tokenizer's on every one of ``texts``, except (at most a fraction
    ``ties_allowed`` of them) where the two SentencePiece implementations break a tie differently: the same pieces
    in another order, e.g. "ff" + "f" for "f" + "ff" in "fff" (docs/serving.md). Returns (compared, ties)."""
    ours = pre.tokenize(tf.constant(texts, tf.string)).to_list()
    differ = [(t, o, p) for t, o in zip(texts, ours) if o != (p := _python_ids(tokenizer, t, keep_accents))]
    ties = [d for d in differ if sorted(d[1]) == sorted(d[2])]
    other = [d for d in differ if d not in ties]
    assert not other, f"{len(other)} of {len(texts)} {what} differ, e.g. {other[:3]}"
    assert len(ties) <= ties_allowed * len(texts), f"{len(ties)} of {len(texts)} {what} tie differently: {ties[:3]}"
    return len(texts), len(ties)


@pytest.mark.parametrize("lower", [False, True])
def test_same_ids_as_the_python_tokenizer_on_the_bundled_text(tokenizers, preprocessors, lower):
    compared = 0
    for path, texts in sorted(_bundled_texts().items()):
        compared += _assert_same_ids(preprocessors[lower], tokenizers[lower], texts, what=f"lines of {path}")[0]
    assert compared > 12_000  # every line of data/corpus, data/sentiment and the fixtures


@pytest.mark.parametrize("lower", [False, True])
def test_same_ids_on_a_unicode_fuzz(tokenizers, preprocessors, lower):
    fuzz = _fuzz_strings(10_000, seed=lower)
    assert any(b"\xff" in s for s in fuzz) and any(b"1,000," in s for s in fuzz)
    _assert_same_ids(preprocessors[lower], tokenizers[lower], fuzz, what="fuzz strings", ties_allowed=0.005)


def test_same_ids_with_accents_kept(tokenizers):
    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=32, keep_accents=True)
    _assert_same_ids(pre, tokenizers[False], _fuzz_strings(3000, seed=7), keep_accents=True, what="fuzz strings",
                     ties_allowed=0.005)


def test_the_special_cases_one_by_one(tokenizers, preprocessors):
    cases = ["In 2000, the 1,000,000 people", "``quoted''", "  a \u3000 b\u2028c\u0085 ", "Café naïve ﬁ",
             "ΟΔΟΣ ΑΣ İstanbul", "x 12,3 ,4, 5,", "a\u200bb\u00adc", "\u2581 1,", "", "   "]
    for lower in (False, True):
        _assert_same_ids(preprocessors[lower], tokenizers[lower], cases, what="cases")
    # This vocabulary has pieces "▁1,", "8,", "14,": the digit-comma rule must split them as the Python one does.
    text = "Items 1, x8, and 14, then 2000,"
    raw = [tokenizers[False].id_to_piece(i) for i in tokenizers[False].sp.EncodeAsIds(preprocess_text(text))]
    ids = preprocessors[False].tokenize([text]).to_list()[0]
    ours = [tokenizers[False].id_to_piece(i) for i in ids]
    assert {"▁1,", "8,", "14,"} <= set(raw) and not {"▁1,", "8,", "14,"} & set(ours)
    assert ids == tokenizers[False].encode_ids(text)  # "▁14," -> "14" (not a piece: <unk>) + "," as the original


def test_invalid_utf8_is_replaced_not_an_error(tokenizers, preprocessors):
    """Each invalid sequence becomes U+FFFD as Python's ``errors="replace"`` makes it (maximal subparts)."""
    raw = [b"ab\xffcd", b"\xe2\x82", b"\xed\xa0\x80x", b"ok\xc0\xaf!", b"\xf4\x90\x80\x80"]
    cleaned = preprocessors[False].clean(tf.constant(raw)).numpy()
    assert [c.decode("utf-8") for c in cleaned] == [preprocess_text(r.decode("utf-8", "replace")) for r in raw]
    _assert_same_ids(preprocessors[False], tokenizers[False], raw, what="invalid UTF-8 strings")


def test_pair_lengths_is_truncate_pair():
    cases = [(a, b, m) for a in range(9) for b in range(9) for m in range(0, 12)]
    la, lb = pair_lengths(tf.constant([c[0] for c in cases]), tf.constant([c[1] for c in cases]),
                          tf.constant([c[2] for c in cases]))
    for (a, b, m), got_a, got_b in zip(cases, la.numpy(), lb.numpy()):
        tokens_a, tokens_b = list(range(a)), list(range(b))
        classifier_data.truncate_pair(tokens_a, tokens_b, m)
        assert (got_a, got_b) == (len(tokens_a), len(tokens_b)), (a, b, m)


class _Example:
    def __init__(self, text_a, text_b=None):
        self.text_a, self.text_b = text_a, text_b


@pytest.mark.parametrize("seq_length", [16, 64])
def test_features_equal_encode_example(tokenizers, seq_length):
    """Single sentences and pairs from the sentiment data and the GLUE pair fixtures (MNLI, MRPC, QQP, ...);
    at 16 tokens most are truncated, at 64 most are padded."""
    single = classifier_data.read_examples(classifier_data.get_task("sst-2"), os.path.join(ROOT, "data",
                                                                                            "sentiment"), "dev")
    pairs = []
    for task, folder in [("mnli", "MNLI"), ("mrpc", "MRPC"), ("qqp", "QQP"), ("qnli", "QNLI"), ("rte", "RTE"),
                         ("sts-b", "STS-B")]:
        pairs += classifier_data.read_examples(classifier_data.get_task(task), os.path.join(FIXTURES, "glue",
                                                                                            folder), "train").examples
    examples = single.examples[:200] + pairs + [_Example("", ""), _Example("one", "a b c d e f g h i j k l m n o p q")]
    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=seq_length)
    truncated = 0
    for group in ([e for e in examples if e.text_b is None], [e for e in examples if e.text_b is not None]):
        second = None if group[0].text_b is None else [e.text_b for e in group]
        ours = {k: v.numpy() for k, v in pre([e.text_a for e in group], second).items()}
        assert ours["input_ids"].dtype == np.int32 and ours["segment_ids"].dtype == np.int32
        assert ours["padding_mask"].dtype == np.float32 and ours["input_ids"].shape == (len(group), seq_length)
        for i, example in enumerate(group):
            ids, segs, mask, cut = classifier_data.encode_example(tokenizers[False], example, seq_length)
            truncated += cut
            np.testing.assert_array_equal(ours["input_ids"][i], ids, err_msg=str(vars(example)))
            np.testing.assert_array_equal(ours["segment_ids"][i], segs, err_msg=str(vars(example)))
            np.testing.assert_array_equal(ours["padding_mask"][i], mask, err_msg=str(vars(example)))
    assert truncated > (len(examples) // 2 if seq_length == 16 else 0)


def test_multiple_choice_equals_race_encode_example(tokenizers):
    batch = _race_questions()
    # Questions with "_" and without; long enough to be cut at seq 24 (article) and max_qa_length 8 (options).
    for seq_length, max_qa in [(24, 8), (128, 64)]:
        pre = XLNetPreprocessor.from_file(SPIECE, seq_length=seq_length, max_qa_length=max_qa)
        ours = encode_choices(pre, [e.context for _, _, e in batch], [q for q, _, _ in batch],
                              [options for _, options, _ in batch])
        assert ours["input_ids"].shape == (len(batch), race_data.NUM_CHOICES, seq_length)
        for i, (_, _, example) in enumerate(batch):
            ids, segs, masks, _ = race_data.encode_example(tokenizers[False], example, seq_length, max_qa)
            np.testing.assert_array_equal(ours["input_ids"][i], ids)
            np.testing.assert_array_equal(ours["segment_ids"][i], segs)
            np.testing.assert_array_equal(ours["padding_mask"][i], masks)


def _race_questions():
    """(question, options, RaceExample) of every question in the RACE fixtures: ``RaceExample`` holds the
    question already joined with each option, the preprocessor takes them apart."""
    out = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "race", "*", "*", "*.txt"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for question, options in zip(data["questions"], data["options"]):
            example = race_data.RaceExample("", data["article"], [race_data.qa_text(question, o) for o in options],
                                            0, 0)
            out.append((question, options, example))
    assert any("_" in q for q, _, _ in out) and any("_" not in q for q, _, _ in out)
    return out


def test_config_round_trip_and_errors(preprocessors):
    pre = preprocessors[True]
    config = pre.get_config()
    assert isinstance(config["spiece_model"], str) and json.dumps(config)  # base64: JSON-serialisable
    again = XLNetPreprocessor.from_config(config)
    assert (again.seq_length, again.lower_case, again.spiece_model) == (32, True, pre.spiece_model)
    text = ["Ünïcode 1,000, and ``more''"]
    np.testing.assert_array_equal(again(text)["input_ids"], pre(text)["input_ids"])
    with pytest.raises(ValueError, match="spiece_model"):
        XLNetPreprocessor(spiece_model=b"not a model")
    with pytest.raises(ValueError, match="spiece_model"):
        XLNetPreprocessor(spiece_model=SPIECE)  # a path, not the bytes
    with pytest.raises(ValueError, match="seq_length"):
        XLNetPreprocessor.from_file(SPIECE, seq_length=2)
    with pytest.raises(InputError, match=r"nope\.model: SentencePiece model not found"):
        XLNetPreprocessor.from_file("nope.model")
    with pytest.raises(ValueError, match="max_qa_length"):
        XLNetPreprocessor.from_file(SPIECE, seq_length=16, max_qa_length=14)
    with pytest.raises(ValueError, match="sentence2"):
        pre(["a"], [1.0])
    with pytest.raises(ValueError, match="options"):
        encode_choices(pre, ["a"], ["b"], ["c"])
    with pytest.raises(ValueError, match="sentence2: 1 rows for the 2 of sentence"):
        pre(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="question: 1 rows for the 2 of article"):
        encode_choices(pre, ["a", "b"], ["q"], [["c", "d"], ["e", "f"]])
    with pytest.raises(ValueError, match="question: 2 rows for the 1 of context"):
        squad_windows(pre, ["q", "r"], ["a context"])


@pytest.mark.slow
def test_the_graphs_hold_no_row_partition_assertions(preprocessors):
    """Sentences, pairs, SQuAD windows and tagging's words trace without assertion ops: each ragged partition check
    is an If with two branch functions that every trace, export, SavedModel load and tf.data iterator start pays
    (they were half the SQuAD graph and most of its start-up: bench/reports/serving.md)."""
    from xlnet_tf.tasks.tagging import tagging_graph

    pre = preprocessors[False]

    def words(text):
        return tagging_graph.encode_words(pre, tagging_graph.split_words(text)[0], 8)

    graphs = {"sentence": (lambda a: pre(a), 1), "pair": (lambda a, b: pre(a, b), 2),
              "squad": (lambda q, c: squad_windows(pre, q, c), 2), "words": (words, 1)}
    for name, (function, arity) in graphs.items():
        graph = tf.function(function, autograph=False).get_concrete_function(
            *[tf.TensorSpec([None], tf.string)] * arity).graph
        checks = [op.type for op in graph.get_operations() if op.type in ("If", "StatelessIf", "Assert")]
        assert not checks, (name, len(checks))


# The features of the texts in argv[1] (JSON: [sentences, second sentences]): pairs, and SQuAD windows of the
# second ones as questions over the first as contexts.
_FEATURES = """
import json, sys
import tensorflow as tf
a, b = json.loads(sys.argv[1])
def features(pair, squad):
    out = {k: v.numpy().tolist() for k, v in pair(tf.constant(a), tf.constant(b)).items()}
    out.update({f"squad_{k}": v.numpy().tolist() for k, v in squad(tf.constant(b), tf.constant(a)).items()})
    print(json.dumps(out))
"""

# Saves tf.functions over the layer (input signature [None] tf.string) to argv[3], after checking that their string
# ops are pinned to the CPU (a GPU serving host has no kernels for them); prints the layer's own features.
_SAVE = _FEATURES + """
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.squad.squad_graph import squad_windows
pre = XLNetPreprocessor.from_file(sys.argv[2], seq_length=32, lower_case=False)
module = tf.Module()
module.pre = pre
module.serve = tf.function(lambda a, b: pre(a, b), input_signature=[tf.TensorSpec([None], tf.string)] * 2)
module.squad = tf.function(lambda q, c: squad_windows(pre, q, c),
                           input_signature=[tf.TensorSpec([None], tf.string)] * 2)
for function in (module.serve, module.squad):
    ops = [op for op in function.get_concrete_function().graph.get_operations()
           if op.type.startswith(("Regex", "Unicode", "StringLower", "NormalizeUTF8", "Sentencepiece", "TFText",
                                  "StringSplit", "ReduceJoin"))]
    assert ops and all(op.device.endswith("CPU:0") for op in ops), {op.type: op.device for op in ops}
tf.saved_model.save(module, sys.argv[3])
features(pre, lambda q, c: squad_windows(pre, q, c))
"""

# Loads argv[3] with tensorflow and tensorflow_text only; prints its features.
_LOAD = _FEATURES + """
import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)
loaded = tf.saved_model.load(sys.argv[3])
features(loaded.serve, loaded.squad)
assert "xlnet_tf" not in sys.modules and "sentencepiece" not in sys.modules
"""


@background
def test_saved_model_runs_with_tensorflow_and_tensorflow_text_only(tmp_path):
    """A SavedModel of a ``tf.function`` over the layer is self-contained: a process that imports only tensorflow
    and tensorflow_text (no xlnet_tf, no sentencepiece, no spiece.model file) gives the features the layer gives in
    the process that saved it."""
    texts = json.dumps([["In 2000, Café ``x''", "\u00e9\u0301 1,000,"], ["b", "a much longer second sentence " * 3]])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    printed = []
    for script, cwd in ((_SAVE, ROOT), (_LOAD, str(tmp_path))):  # the loading one starts outside the repository
        result = subprocess.run([sys.executable, "-c", script, texts, SPIECE, str(tmp_path / "pre")],
                                capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        printed.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert printed[1] == printed[0]


def _squad_examples(mixed_too: bool = True):
    """(path, examples) of the SQuAD fixtures, and paragraphs of corpus lines mixed with accents, quote pairs,
    digit-commas, odd whitespace, CJK and case oddities (questions: other lines)."""
    from xlnet_tf.tasks.squad import squad_data
    out = [(path, squad_data.read_squad_file(path, is_training=False).examples)
           for path in sorted(glob.glob(os.path.join(FIXTURES, "squad", "*.json")))]
    with open(os.path.join(ROOT, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    extras = ["Café naïve résumé", "``Quoted'' text", "He said ''yes'' ```no''", "1,000, 2000, items", "ΑΣ Σ ﬁne",
              "日本語 テキスト", "İstanbul", "a\u00a0b\u3000c\t\n d", "  leading and trailing  "]
    rng = random.Random(0)
    mixed = []
    for i in range(80):
        parts = [rng.choice(lines) for _ in range(rng.randint(1, 3))] + rng.sample(extras, rng.randint(0, 3))
        rng.shuffle(parts)
        mixed.append(squad_data.SquadExample(str(i), rng.choice(lines + extras)[:150], "  ".join(parts)))
    return out + [("mixed", mixed)] * mixed_too


@pytest.mark.parametrize("lower", [False, True])
def test_squad_windows_equal_squad_data(tokenizers, lower):
    """``squad_windows`` against ``squad_data.convert_examples_to_features`` (squad_lib_sp's algorithm): the same
    windows (ids, segments, masks, p_mask, cls_index, example of each window, max context) and, for every
    paragraph token, the same answer text cut from the original context with its character offsets."""
    from xlnet_tf.tasks.squad import squad_data
    seq, query, stride = 48, 12, 16
    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=seq, max_query_length=query, doc_stride=stride,
                                      lower_case=lower)
    windows = tokens = reordered = moved = 0
    for source, examples in _squad_examples(mixed_too=not lower):  # uncased: the fixtures only (time)
        features, _ = squad_data.convert_examples_to_features(examples, tokenizers[lower], seq, stride, query,
                                                              is_training=False)
        ours = {k: v.numpy() for k, v in squad_windows(pre, [e.question_text for e in examples],
                                                        [e.paragraph_text for e in examples]).items()}
        assert ours["input_ids"].shape == (len(features), seq), source  # every example aligns here
        for w, feature in enumerate(features):
            windows += 1
            assert ours["example_index"][w] == feature.example_index and ours["cls_index"][w] == feature.cls_index
            for key in ("segment_ids", "padding_mask", "p_mask"):
                np.testing.assert_array_equal(ours[key][w], getattr(feature, key), err_msg=f"{source} {key} {w}")
            if not np.array_equal(ours["input_ids"][w], feature.input_ids):  # a SentencePiece tie (see above)
                assert sorted(ours["input_ids"][w]) == sorted(feature.input_ids), (source, w)
                reordered += 1
            n = feature.paragraph_len
            np.testing.assert_array_equal(ours["token_is_max_context"][w][:n],
                                          [feature.token_is_max_context[i] for i in range(n)])
            assert not ours["token_is_max_context"][w][n:].any() and (ours["token_start_char"][w][n:] == -1).all()
            context = examples[feature.example_index].paragraph_text
            for i in range(n):
                tokens += 1
                got = context[ours["token_start_char"][w][i]:ours["token_end_char"][w][i] + 1].strip()
                theirs = context[feature.tok_start_to_orig_index[i]:feature.tok_end_to_orig_index[i] + 1].strip()
                # Where squad_lib_sp's alignment gives a token no text ("```" -> '"`', or a first word after
                # leading spaces) ours gives it its characters; everywhere else the same text.
                moved += bool(theirs) and got != theirs
    assert windows > (600 if not lower else 400), windows
    assert reordered <= 0.01 * windows and not moved, (windows, reordered, moved)
