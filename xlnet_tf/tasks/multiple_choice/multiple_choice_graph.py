"""Multiple choice in TensorFlow ops: RACE's layout from raw text, what the raw-text export and
``XLNetTextMultipleChoice`` run, built on ``XLNetPreprocessor`` (``xlnet_tf.preprocessing``) as
``race_data.encode_example`` builds it in Python."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.preprocessing import batch_of_strings, check_same_rows, keep_first, keep_last, positions, row_values, \
    text_tensor
from xlnet_tf.tokenization import max_qa_length_limit


def encode_choices(preprocessor, article, question, options) -> dict:
    """RACE's layout: article [B], question [B], options [B, C] -> the three features, each [B, C, S]."""
    article = batch_of_strings(article, "article")
    question = batch_of_strings(question, "question")
    options = text_tensor(options, "options")
    if options.shape.rank != 2:
        raise ValueError(f"options: expected shape [batch, choices], got {options.shape}")
    check_same_rows("article", article, question=question, options=options)
    with tf.device("/CPU:0"):
        batch, choices = tf.shape(options)[0], tf.shape(options)[1]
        option = tf.reshape(options, [-1])  # [B * C]
        qa = _qa_text(tf.repeat(question, choices), option)
        tokens_qa = keep_last(preprocessor.tokenize(qa), preprocessor.max_qa_length)
        context = tf.gather(preprocessor.tokenize(article), tf.repeat(tf.range(batch), choices))
        budget = max_qa_length_limit(preprocessor.seq_length) - tokens_qa.row_lengths()
        features = preprocessor.pack(keep_first(context, budget), tokens_qa)
        return {k: tf.reshape(v, [batch, choices, preprocessor.seq_length]) for k, v in features.items()}


def _qa_text(question: tf.Tensor, option: tf.Tensor) -> tf.Tensor:
    """``race_data.qa_text`` on [N] strings: every ``_`` in the question replaced by the option, or the option
    appended after a space if there is none."""
    parts = tf.strings.split(question, "_")  # [N, (k)]: "a_b_" -> "a", "b", ""
    is_last = positions(parts).flat_values == row_values(parts, parts.row_lengths() - 1)
    filler = tf.where(is_last, "", row_values(parts, option))
    joined = tf.strings.reduce_join(parts.with_flat_values(parts.flat_values + filler), axis=1)
    return tf.where(tf.strings.regex_full_match(question, "(?s).*_.*"), joined, question + " " + option)
