"""SQuAD around ``XLNetSquad``: the original loss and the in-graph answer selection of its TF Serving export
(``best_answers``); the squad family's helpers (``xlnet_tf.tasks.squad``)."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.preprocessing import char_classes
from xlnet_tf.tasks.squad.squad_graph import squad_windows
from xlnet_tf.tasks.squad.squad_head import XLNetSquad

# The head's inference outputs (the serve_ids signature of a SQuAD export).
INFERENCE_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")


def squad_window_losses(features, outputs):
    """The original loss of each window [W]: 1/2 (CE_start + CE_end) + 1/2 BCE(cls_logits, is_impossible)."""
    start = tf.cast(features["start_positions"], tf.int32)
    end = tf.cast(features["end_positions"], tf.int32)
    start_ce = -tf.gather(outputs["start_log_probs"], start, batch_dims=1)
    end_ce = -tf.gather(outputs["end_log_probs"], end, batch_dims=1)
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(features["is_impossible"], tf.float32),
                                                  logits=outputs["cls_logits"])
    return 0.5 * (start_ce + end_ce) + 0.5 * bce


def squad_loss(features, outputs):
    """The original loss per example (``squad_window_losses``).

    Returns ``(sum over the batch, batch size)`` as ``Task.loss`` returns it (the loop divides by the
    global batch, so the result is the original's batch mean)."""
    per_example = squad_window_losses(features, outputs)
    return tf.reduce_sum(per_example), tf.cast(tf.shape(per_example)[0], tf.float32)


def best_answers(model: XLNetSquad, preprocessor, question, context, settings: dict) -> dict:
    """``run_squad.py --do_predict``'s answer per question, in TensorFlow ops (the SQuAD export's raw-text
    signature): the same windows, beam and rules as ``squad_postprocess.compute_predictions``.

    question, context: [B] strings. ``squad_graph.squad_windows(preprocessor, question, context)`` gives the W
    windows: the model inputs [W, S] / [W], ``example_index`` [W], ``token_is_max_context`` [W, S] and each
    paragraph token's first and last character in the context, ``token_start_char``/``token_end_char`` [W, S]
    (-1 outside the paragraph). ``settings``: ``max_answer_length`` (the beam is the model's ``start_n_top``,
    ``end_n_top``).

    Over every window's ``start_n_top x end_n_top`` beam, the candidates with start and end inside the paragraph,
    the start in its max-context window, ``end >= start`` and at most ``max_answer_length`` pieces; the best by
    ``start_log_prob + end_log_prob`` (summed in float64 as the Python code does; ties go to the earlier window and
    beam position, as its stable sort). Returns, each [B]: ``text`` (the context's characters from the start
    piece's first to the end piece's last, stripped of whitespace as Python's ``str.strip``), ``start_char`` and
    ``end_char`` (``context[start_char:end_char] == text`` in characters; -1 when there is no valid span: text
    ""), ``null_odds`` (the minimum answer-class logit over the question's windows). A question that
    ``run_squad.py`` skips (empty question or context, a context over ``squad_data.MAX_PARAGRAPH_CHARS``
    characters, no window) answers "" with ``null_odds`` = ``squad_postprocess.SKIPPED_NULL_ODDS``.
    """
    from xlnet_tf.tasks.squad.squad_data import INFERENCE_KEYS

    question, context, skipped = answerable_inputs(question, context)
    windows = squad_windows(preprocessor, question, tf.where(skipped, "", context))
    outputs = model({k: windows[k] for k in INFERENCE_KEYS}, training=False)
    return answers_from_windows(windows, outputs, context, skipped, model.start_n_top, model.end_n_top,
                                settings["max_answer_length"])


def valid_utf8(text):
    """Strings with invalid UTF-8 replaced (U+FFFD), as the preprocessor counts a context's characters."""
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)


def answerable_inputs(question, context):
    """``(question, context, skipped)`` for ``best_answers``: the texts with invalid UTF-8 replaced (U+FFFD) and
    whether ``run_squad.py`` skips the question when reading the file (an empty question or context, a context
    over ``squad_data.MAX_PARAGRAPH_CHARS`` characters), bool [B]. A skipped question's windows are those of an
    empty context: none."""
    from xlnet_tf.tasks.squad.squad_data import MAX_PARAGRAPH_CHARS

    space = char_classes()["space"]  # Python's str.isspace, as str.strip uses it

    def blank(x):
        return tf.equal(tf.strings.regex_replace(x, f"^{space}+|{space}+$", ""), "")

    question, context = valid_utf8(question), valid_utf8(context)
    skipped = blank(question) | blank(context) | (tf.strings.length(context, unit="UTF8_CHAR") > MAX_PARAGRAPH_CHARS)
    return question, context, skipped


def answers_from_windows(windows: dict, outputs: dict, context, skipped, start_n_top: int, end_n_top: int,
                         max_answer_length: int) -> dict:
    """``best_answers``' answer per question from the windows of ``squad_windows`` (``example_index``,
    ``token_start_char``, ``token_end_char``, ``token_is_max_context``, in the windows' order) and the head's
    inference outputs on them (``INFERENCE_OUTPUTS``, beam ``start_n_top`` x ``end_n_top``). ``context``,
    ``skipped``: [B] from ``answerable_inputs``; ``example_index`` is the row in them."""
    from xlnet_tf.tasks.squad.squad_postprocess import SKIPPED_NULL_ODDS

    k1, k2 = start_n_top, end_n_top
    batch = tf.shape(context)[0]
    space = char_classes()["space"]
    example = tf.cast(windows["example_index"], tf.int32)  # [W]

    # The beam, flattened per window in the Python loops' order: start i, then end j ([W, k1 * k2]).
    start = tf.repeat(outputs["start_top_index"], k2, axis=1)
    end = outputs["end_top_index"]
    score = (tf.repeat(tf.cast(outputs["start_top_log_probs"], tf.float64), k2, axis=1)
             + tf.cast(outputs["end_top_log_probs"], tf.float64))
    first_char, last_char = windows["token_start_char"], windows["token_end_char"]  # [W, S], -1: not paragraph
    in_paragraph = ((tf.gather(first_char, start, batch_dims=1) >= 0)
                    & (tf.gather(last_char, end, batch_dims=1) >= 0))
    max_context = tf.gather(tf.cast(windows["token_is_max_context"], tf.bool), start, batch_dims=1)
    valid = in_paragraph & max_context & (end >= start) & (end - start + 1 <= max_answer_length)

    # Per question: the first candidate (window order, then beam order) with the highest valid score.
    per_window = k1 * k2
    flat_valid = tf.reshape(valid, [-1])
    flat_score = tf.where(flat_valid, tf.reshape(score, [-1]), tf.constant(-float("inf"), tf.float64))
    flat_example = tf.repeat(example, per_window)
    best_score = tf.math.unsorted_segment_max(flat_score, flat_example, batch)  # -inf: no valid candidate
    position = tf.range(tf.size(flat_score))
    is_best = flat_valid & (flat_score == tf.gather(best_score, flat_example))
    first = tf.math.unsorted_segment_min(tf.where(is_best, position, tf.size(flat_score)), flat_example, batch)
    found = first < tf.size(flat_score)
    # One all-zero row after the windows, picked when a question has no valid span (or there are no windows).
    def padded(x):
        return tf.concat([tf.cast(x, tf.int32), tf.zeros([1, tf.shape(x)[1]], tf.int32)], axis=0)
    window = tf.where(found, first // per_window, tf.shape(example)[0])
    slot = tf.where(found, first % per_window, 0)
    s = tf.gather_nd(padded(start), tf.stack([window, slot], 1))
    e = tf.gather_nd(padded(end), tf.stack([window, slot], 1))
    char_start = tf.gather_nd(padded(first_char), tf.stack([window, s], 1))
    char_end = tf.gather_nd(padded(last_char), tf.stack([window, e], 1))

    raw = tf.strings.substr(context, char_start, tf.maximum(char_end - char_start + 1, 0), unit="UTF8_CHAR")
    left = tf.strings.regex_replace(raw, f"^{space}+", "")
    text = tf.strings.regex_replace(left, f"{space}+$", "")
    answer_start = char_start + tf.strings.length(raw, unit="UTF8_CHAR") - tf.strings.length(left, unit="UTF8_CHAR")
    answer_end = answer_start + tf.strings.length(text, unit="UTF8_CHAR")

    null_odds = tf.math.unsorted_segment_min(tf.cast(outputs["cls_logits"], tf.float32), example, batch)
    skipped |= tf.math.unsorted_segment_sum(tf.ones_like(example), example, batch) == 0  # no window
    answered = found & ~skipped
    return {"text": tf.where(answered, text, ""),
            "start_char": tf.where(answered, answer_start, -1),
            "end_char": tf.where(answered, answer_end, -1),
            "null_odds": tf.where(skipped, tf.constant(SKIPPED_NULL_ODDS, tf.float32), null_odds)}
