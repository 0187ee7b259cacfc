"""SQuAD's paragraph windows in TensorFlow ops: what the raw-text export (``squad_answers.best_answers``) and
``XLNetTextSquad`` run, built on ``XLNetPreprocessor`` (``xlnet_tf.preprocessing``) as ``squad_data`` builds the
prediction features in Python."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.preprocessing import batch_of_strings, check_same_rows, keep_first
from xlnet_tf.tokenization import CLS_ID, SEP_ID, SQUAD_SEG_ID_CLS as SQUAD_SEG_CLS, SQUAD_SEG_ID_P as SQUAD_SEG_P, \
    SQUAD_SEG_ID_PAD as SQUAD_SEG_PAD, SQUAD_SEG_ID_Q as SQUAD_SEG_Q


def squad_windows(preprocessor, question, context) -> dict:
    """SQuAD's inputs as ``squad_data.convert_examples_to_features`` builds them for prediction: every
    paragraph is cut into windows of ``P <sep> Q <sep> <cls>`` (P = up to ``seq_length - len(Q) - 3``
    paragraph tokens, each window ``min(that, doc_stride)`` tokens after the previous one, Q = the first
    ``max_query_length`` question tokens), right-padded with id 0.

    question, context: [B] strings. Returns, for the W windows of the whole batch (W >= B; a paragraph with
    no tokens has none):
      ``input_ids``, ``segment_ids`` int32 [W, S] (P=0, Q=1 (each with its sep), CLS=2, PAD=3);
      ``padding_mask`` float32 [W, S] (1 = token); ``p_mask`` float32 [W, S] (1 = not an answer position:
      everything but the paragraph tokens and CLS); ``cls_index`` int32 [W];
      ``example_index`` int32 [W]: the window's row in the batch (windows of one example are consecutive);
      ``token_start_char``, ``token_end_char`` int32 [W, S]: the characters of the *original* context that
      the token covers, first and last (inclusive); -1 outside the paragraph. The answer between window
      positions i <= j is ``tf.strings.substr(context, start, end - start + 1, unit="UTF8_CHAR")`` with start =
      ``token_start_char[i]``, end = ``token_end_char[j]``, stripped of surrounding whitespace (as
      ``squad_postprocess``); a token's start may be the whitespace before its word. For a context that is
      not valid UTF-8 the characters are those of its U+FFFD-replaced text;
      ``token_is_max_context`` bool [W, S]: the window where the token has the most context on both sides
      (``squad_lib_sp._check_is_max_context``), the one whose prediction counts for it.

    Text is cleaned as for SQuAD's features (the quotes replaced last, squad_lib_sp's order); the characters
    come from ``XLNetPreprocessor.encode_with_offsets`` (which says where they can be off by one or two).
    """
    question = batch_of_strings(question, "question")
    context = batch_of_strings(context, "context")
    check_same_rows("context", context, question=question)
    with tf.device("/CPU:0"):
        S = preprocessor.seq_length
        query = keep_first(preprocessor.tokenize(question, quotes_last=True),
                           tf.fill(tf.shape(question), preprocessor.max_query_length))
        tokens, start_char, end_char = preprocessor.encode_with_offsets(context)  # [B, (T)] each
        num_tokens = tokens.row_lengths()
        len_q = query.row_lengths()
        max_tokens = S - 3 - len_q  # paragraph tokens per window
        step = tf.minimum(max_tokens, preprocessor.doc_stride)
        windows = tf.where(num_tokens == 0, tf.zeros_like(num_tokens),
                           1 + tf.maximum(num_tokens - max_tokens + step - 1, 0) // step)  # ceil
        example = tf.repeat(tf.range(tf.size(num_tokens, out_type=tf.int64)), windows)  # [W]
        start = tf.ragged.range(windows).flat_values * tf.gather(step, example)  # first paragraph token
        length = tf.minimum(tf.gather(num_tokens, example) - start, tf.gather(max_tokens, example))
        # Paragraph tokens of each window: indices into the flat tokens of the batch.
        first_token = start + tf.gather(tokens.row_starts(), example)
        index = tf.ragged.range(first_token, first_token + length)
        W = tf.shape(example)[0]
        j = tf.range(S, dtype=tf.int64)[None, :]
        end_p = length[:, None]  # the paragraph's sep
        cls_index = end_p + tf.gather(len_q, example)[:, None] + 2

        def per_token(values, fill):  # [flat tokens] -> [W, S] at the paragraph positions
            return index.with_flat_values(tf.gather(values, index.flat_values)).to_tensor(fill, shape=[None, S])

        # P <sep> Q <sep> <cls>, right-padded with 0, on the dense [W, S] grid (see pack).
        query_ids = tf.gather(query.to_tensor(shape=[None, S]), example)
        query_ids = tf.gather(query_ids, tf.clip_by_value(j - end_p - 1, 0, S - 1), batch_dims=1)
        input_ids = tf.where(j < end_p, per_token(tokens.flat_values, 0), tf.where(
            (j == end_p) | (j == cls_index - 1), SEP_ID, tf.where(j < cls_index, query_ids, tf.where(
                j == cls_index, CLS_ID, 0))))
        segment_ids = tf.where(j <= end_p, SQUAD_SEG_P, tf.where(j < cls_index, SQUAD_SEG_Q, tf.where(
            j == cls_index, SQUAD_SEG_CLS, SQUAD_SEG_PAD)))
        padding_mask = tf.cast(j <= cls_index, tf.float32)
        p_mask = 1.0 - tf.cast((j < end_p) | (j == cls_index), tf.float32)

        # Max context: score = min(left, right) + 0.01 * window length, the first window with the best score.
        position = tf.ragged.range(length).flat_values
        window_length = tf.repeat(length, length)
        score = (tf.cast(tf.minimum(position, window_length - 1 - position), tf.float64)
                 + 0.01 * tf.cast(window_length, tf.float64))
        token = index.flat_values
        count = tf.size(tokens.flat_values, out_type=tf.int64)
        best = tf.math.unsorted_segment_max(score, token, count)
        window = tf.repeat(tf.range(tf.cast(W, tf.int64)), length)
        first_best = tf.math.unsorted_segment_min(tf.where(score == tf.gather(best, token), window,
                                                           tf.int64.max), token, count)
        is_max = index.with_flat_values(tf.gather(first_best, token) == window).to_tensor(False, shape=[None, S])
        return {"input_ids": input_ids, "segment_ids": tf.cast(segment_ids, tf.int32),
                "padding_mask": padding_mask, "p_mask": p_mask, "cls_index": tf.cast(cls_index[:, 0], tf.int32),
                "example_index": tf.cast(example, tf.int32),
                "token_start_char": tf.cast(per_token(start_char.flat_values, -1), tf.int32),
                "token_end_char": tf.cast(per_token(end_char.flat_values, -1), tf.int32),
                "token_is_max_context": is_max}
