"""RACE reading comprehension (multiple choice) in its release layout.

``{data_dir}/{train,dev,test}/{middle,high}/*.txt``, each a JSON object with ``article``, ``questions``,
``options`` (four per question), ``answers`` (letters A-D; the test split's too, which ``--do_eval
--eval_split=test`` scores) and ``id``. A question's id is ``{id}-{index}``; a file without an ``id`` is named by
its path in the split, ``middle/1.txt`` (its bare name is in middle/ and high/ alike, and the predictions, keyed
by id, lost questions). An id two questions share is an error naming both files. Each question becomes four
sequences ``article <sep> question-with-option <sep> <cls>``: a ``_`` in the question is replaced by the option,
otherwise the option is appended; the question+option part keeps its last ``max_qa_length`` tokens and the article
is cut to fit. Each option's token list is built fresh (the original aliased the article list when no truncation was
needed, so option k's sequence also held options 1..k-1 -- zihangdai/xlnet#204).

A file that is not JSON, lacks a key or has one of another type (``"article": null``) is an error naming the file
(and the key); a question with an empty text or not exactly four options is skipped and counted; an answer outside
A-D is an error naming the file and question.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.finetuning import records
from xlnet_tf.errors import InputError, MissingInputError
from xlnet_tf.tokenization import max_qa_length_limit

NUM_CHOICES = 4
LEVELS = ("middle", "high")
ANSWERS = "ABCD"
_JSON_TYPES = {type(None): "null", bool: "a boolean", str: "a string", list: "a list", dict: "an object"}


@dataclasses.dataclass
class RaceExample:
    guid: str  # "{file id}-{question index}", file id: its "id", else "{level}/{file name}"
    context: str
    qa_list: list  # NUM_CHOICES question+option strings
    label: int
    level: int  # index into LEVELS


def qa_text(question: str, option: str) -> str:
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def read_examples(data_dir: str, split: str, levels=LEVELS):
    """(examples, skipped) of ``split``; ``skipped`` lists 'file question i: reason'."""
    examples, skipped, seen = [], [], {}
    split_dir = os.path.join(data_dir, split)
    if not io_utils.isdir(split_dir):
        raise MissingInputError(f"{split_dir}: RACE {split} split not found (expected "
                                f"{split}/{{middle,high}}/*.txt under --data_dir)")
    found = False
    for level in levels:
        level_dir = os.path.join(split_dir, level)
        if not io_utils.isdir(level_dir):
            continue
        found = True
        for name in io_utils.listdir(level_dir):
            path = os.path.join(level_dir, name)
            if not name.endswith(".txt") or not io_utils.isfile(path):
                continue
            try:
                with io_utils.open(path, encoding="utf-8-sig") as f:  # a BOM (some editors write one) is no JSON
                    data = json.load(f)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InputError(f"{path}: not a RACE JSON file ({e})") from None
            if not isinstance(data, dict):
                raise InputError(f"{path}: expected a JSON object with article/questions/options/answers")
            missing = [k for k in ("article", "questions", "options", "answers") if k not in data]
            if missing:  # (RACE's test files have answers: a test split without them cannot be evaluated either)
                raise InputError(f"{path}: missing key(s) {missing}"
                                 + (" (RACE files carry their answers, the test split's too)"
                                    if missing == ["answers"] else ""))
            # A null or mistyped value would fail later in the tokenizer or len(), naming no file.
            wrong = [f"'{key}' is {_JSON_TYPES.get(type(data[key]), 'a number')}, expected {what}"
                     for key, kind, what in (("article", str, "a string"), ("questions", list, "a list"),
                                             ("options", list, "a list"), ("answers", list, "a list"))
                     if not isinstance(data[key], kind)]
            if wrong:
                raise InputError(f"{path}: {'; '.join(wrong)}")
            bad = io_utils.surrogate_keys(data)
            if bad:
                raise InputError(f"{path}: {', '.join(map(repr, bad))} holds a lone surrogate (not valid Unicode)")
            questions, options, answers = data["questions"], data["options"], data["answers"]
            if not (len(questions) == len(options) == len(answers)):
                raise InputError(f"{path}: {len(questions)} questions, {len(options)} option lists and "
                                 f"{len(answers)} answers (must be equal)")
            # Unique without an "id": the file's bare name is in both middle/ and high/ (1.txt).
            file_id = str(data["id"]) if "id" in data else f"{level}/{name}"
            for i, (question, opts, answer) in enumerate(zip(questions, options, answers)):
                where = f"{path} question {i}"
                if not isinstance(question, str) or not question.strip():
                    skipped.append(f"{where}: empty question")
                    continue
                if not isinstance(opts, list) or len(opts) != NUM_CHOICES:
                    skipped.append(f"{where}: {len(opts) if isinstance(opts, list) else 'no'} options, "
                                   f"expected {NUM_CHOICES}")
                    continue
                if answer not in tuple(ANSWERS):
                    raise InputError(f"{where}: answer {answer!r} is not one of {list(ANSWERS)}")
                guid = f"{file_id}-{i}"
                if guid in seen:  # predictions are keyed by id: one of the two would be lost
                    raise InputError(f"{path} question {i}: id {guid!r} is also that of {seen[guid]} (give each "
                                     "file its own \"id\", or none: then its path names it)")
                seen[guid] = where
                examples.append(RaceExample(guid, data["article"],
                                            [qa_text(question, str(o)) for o in opts],
                                            ANSWERS.index(answer), LEVELS.index(level)))
    if not found:
        raise MissingInputError(f"{split_dir}: no {'/'.join(levels)} subdirectory")
    if skipped:
        logging.warning("RACE %s: skipped %d question(s), e.g. %s", split, len(skipped), "; ".join(skipped[:3]))
    return examples, skipped


def encode_example(tokenizer, example: RaceExample, max_seq_length: int, max_qa_length: int):
    """([C, L] input_ids, segment_ids, padding_mask, truncated)."""
    context = tokenizer.encode_ids(example.context)
    ids, segs, masks, truncated = [], [], [], False
    for qa in example.qa_list:
        tokens_qa = tokenizer.encode_ids(qa)
        if len(tokens_qa) > max_qa_length:
            tokens_qa, truncated = tokens_qa[-max_qa_length:], True
        budget = max_qa_length_limit(max_seq_length) - len(tokens_qa)
        tokens_context = list(context[:budget])  # a fresh list per option (no aliasing)
        truncated |= len(context) > budget
        i, s, m = records.pack_sequence(tokens_context, tokens_qa, max_seq_length)
        ids.append(i), segs.append(s), masks.append(m)
    return ids, segs, masks, truncated


def feature_spec(max_seq_length: int) -> dict:
    import tensorflow as tf
    shape = [NUM_CHOICES, max_seq_length]
    return {"input_ids": (shape, tf.int64), "segment_ids": (shape, tf.int64), "padding_mask": (shape, tf.float32),
            "label": ([], tf.int64), "level": ([], tf.int64), "is_real_example": ([], tf.int64),
            "example_index": ([], tf.int64)}


def dummy_features(max_seq_length: int) -> dict:
    ids, segs, mask = records.dummy_sequence(max_seq_length)
    tile = lambda x, dtype: np.tile(np.asarray(x, dtype)[None], [NUM_CHOICES, 1])  # noqa: E731
    return {"input_ids": tile(ids, np.int32), "segment_ids": tile(segs, np.int32),
            "padding_mask": tile(mask, np.float32), "label": np.int32(0), "level": np.int32(0),
            "is_real_example": np.int32(0), "example_index": np.int32(-1)}


# The format of prepare_features' cache; another is encoded again (records.cached_meta), never reused. 2: a file
# without an "id" is named by its path in the split ("middle/1.txt"; 1, unnamed: by its bare name, the same in
# middle/ and high/, and a cache's ids depended on whether it was written before).
CACHE_VERSION = 2


def prepare_features(data_dir: str, split: str, tokenizer, max_seq_length: int, max_qa_length: int,
                     output_dir: str, levels=LEVELS, overwrite: bool = False) -> tuple[str, dict]:
    """Encodes ``split`` once into ``{spm}.len-{L}.qa-{Q}.{levels}.{split}.tf_record`` (cached)."""
    level_tag = "+".join(levels)
    path = os.path.join(output_dir, f"race.{os.path.basename(tokenizer.model_file)}.len-{max_seq_length}."
                                    f"qa-{max_qa_length}.{level_tag}.{split}.tf_record")
    expected = {"cache_version": CACHE_VERSION, "task": "race", "split": split, "max_seq_length": max_seq_length,
                "max_qa_length": max_qa_length, "levels": list(levels), "uncased": tokenizer.lower,
                "spiece_sha256": tokenizer.fingerprint(),
                "inputs": records.file_identity(os.path.join(data_dir, split))}

    def encode():
        examples, skipped = read_examples(data_dir, split, levels)

        def rows():
            for i, ex in enumerate(examples):
                ids, segs, masks, cut = encode_example(tokenizer, ex, max_seq_length, max_qa_length)
                yield {"input_ids": ids, "segment_ids": segs, "padding_mask": np.asarray(masks, np.float32),
                       "label": ex.label, "level": ex.level, "is_real_example": 1, "example_index": i}, cut

        return dict(source=os.path.join(data_dir, split), num_examples=len(examples), num_skipped=len(skipped),
                    skipped=skipped[:100], labels=list(ANSWERS), guids=[ex.guid for ex in examples]), rows()

    return records.cache_features(path, expected, overwrite, encode)
