"""Token classification in TensorFlow ops: what the raw-text export and ``XLNetTextTagger`` run.

The same alignment and windows as ``tagging_data`` (training's features), built in the graph from words:

* ``split_words``: raw text [B] -> its whitespace-separated words (Python's ``str.split``: ``str.isspace``
  characters separate) with character offsets (code points; start inclusive, end exclusive) into the text. Invalid
  UTF-8 is replaced by U+FFFD first: offsets are those of the replaced text;
* ``encode_words``: words [B, (N)] -> the windows of ``pieces <sep> <cls>`` (``XLNetPreprocessor``'s classifier
  layout), each word's first piece, and the window where that piece has the most context (``tagging_data``'s
  rule), which labels the word;
* ``tag_words``: the network on the windows -> each word's tag id and probability;
* ``entities``: BIO-family tags -> entity spans, by seqeval's (= conlleval's) chunk rules.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.preprocessing import char_classes
from xlnet_tf.tokenization import UNK_ID


def split_words(text: tf.Tensor) -> tuple:
    """[B] strings -> (words, start_char, end_char), ragged [B, (N)] each (see the module docstring)."""
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    chars = tf.strings.unicode_split(text, "UTF-8").with_row_splits_dtype(tf.int64)
    flat = chars.flat_values
    space = tf.strings.regex_full_match(flat, char_classes()["space"])
    position = tf.ragged.range(chars.row_lengths()).flat_values
    previous_space = tf.concat([[True], space[:-1]], axis=0) | (position == 0)
    starts = ~space & previous_space
    count = tf.reduce_sum(tf.cast(starts, tf.int64))
    word = tf.boolean_mask(tf.cumsum(tf.cast(starts, tf.int64)) - 1, ~space)  # each non-space character's word
    words = tf.strings.unsorted_segment_join(tf.boolean_mask(flat, ~space), word, count)
    start = tf.boolean_mask(position, starts)
    end = tf.math.unsorted_segment_max(tf.boolean_mask(position, ~space), word, count) + 1
    rows = tf.boolean_mask(chars.value_rowids(), starts)
    nrows = chars.nrows()
    # validate=False: the row ids are sorted by construction (assertions would be graph ops, checked per call)
    return tuple(tf.RaggedTensor.from_value_rowids(v, rows, nrows=nrows, validate=False) for v in (words, start, end))


def encode_words(preprocessor, words: tf.RaggedTensor, stride: int) -> dict:
    """Words [B, (N)] -> the windows' ``input_ids``, ``segment_ids``, ``padding_mask`` [W, S], ``window_words``
    [W, S] (the word, flat index in the batch, whose first piece is at a position; -1 elsewhere: training's labels)
    and, per word (flat, [sum N]), ``window`` and ``position``: where its label is read."""
    S = preprocessor.seq_length
    max_tokens = S - 2
    words = words.with_row_splits_dtype(tf.int64)
    pieces = preprocessor.tokenize(words.flat_values).with_row_splits_dtype(tf.int64)  # [Nw, (P)]
    kept = tf.clip_by_value(pieces.row_lengths(), 1, max_tokens)  # a word with no pieces: <unk>
    # Each word's first ``kept`` pieces, read from the flat pieces (the <unk> appended after them for the empty ones).
    source = tf.concat([pieces.flat_values, [UNK_ID]], axis=0)
    first_piece = tf.where(pieces.row_lengths() > 0, pieces.row_starts(), tf.size(pieces.flat_values, tf.int64))
    pieces = tf.RaggedTensor.from_row_lengths(
        tf.gather(source, tf.ragged.range(first_piece, first_piece + kept).flat_values), kept, validate=False)
    first = tf.cumsum(kept, exclusive=True)  # each word's first piece in the flat pieces of the batch
    per_sentence = tf.math.unsorted_segment_sum(kept, words.value_rowids(), words.nrows())  # pieces
    flat = pieces.flat_values
    row_start = tf.cumsum(per_sentence, exclusive=True)
    windows = tf.where(per_sentence == 0, tf.zeros_like(per_sentence),
                       1 + tf.maximum(per_sentence - max_tokens + stride - 1, 0) // stride)
    example = tf.repeat(tf.range(words.nrows()), windows)  # [W]
    start = tf.ragged.range(windows).flat_values * stride
    length = tf.minimum(tf.gather(per_sentence, example) - start, max_tokens)
    window_start = start + tf.gather(row_start, example)
    index = tf.ragged.range(window_start, window_start + length)  # flat piece indices
    features = preprocessor.pack(index.with_flat_values(tf.gather(flat, index.flat_values)))
    # Training's labels: the word of every first piece of every window (-1 elsewhere).
    count = tf.size(flat, out_type=tf.int64)
    word_of_first = tf.scatter_nd(first[:, None], tf.range(tf.size(first, out_type=tf.int64)) + 1, [count]) - 1
    at = tf.ragged.range(length).flat_values
    window = tf.repeat(tf.range(tf.size(example, out_type=tf.int64)), length)
    column = S - 2 - tf.repeat(length, length) + at
    window_words = tf.tensor_scatter_nd_update(tf.fill([tf.size(example), S], tf.constant(-1, tf.int64)),
                                               tf.stack([window, column], axis=1),
                                               tf.gather(word_of_first, index.flat_values))
    # The window where each piece has the most context: min(left, right) + 0.01 * length, the earliest on a tie.
    piece = index.flat_values
    window_length = tf.repeat(length, length)
    score = tf.cast(tf.minimum(at, window_length - 1 - at), tf.float64) + 0.01 * tf.cast(window_length, tf.float64)
    best = tf.gather(tf.math.unsorted_segment_max(score, piece, count), piece)
    best_window = tf.math.unsorted_segment_min(tf.where(score == best, window, tf.int64.max), piece, count)
    word_window = tf.gather(best_window, first)
    # Left padding: the window's pieces end at S - 2 (then <sep>, <cls>).
    offset = first - tf.gather(start + tf.gather(row_start, example), word_window)
    position = S - 2 - tf.gather(length, word_window) + offset
    return dict(features, window=word_window, position=position, window_words=window_words)


def tag_words(network, preprocessor, words: tf.RaggedTensor, stride: int) -> tuple:
    """(tag ids int32, probabilities float32 [.., T], the tag's probability), each ragged [B, (N)] like ``words``."""
    encoded = encode_words(preprocessor, words, stride)
    features = {k: encoded[k] for k in ("input_ids", "segment_ids", "padding_mask")}
    logits = network(features, training=False)["logits"]  # [W, S, T]
    word_logits = tf.gather_nd(logits, tf.stack([encoded["window"], encoded["position"]], axis=1))
    probabilities = tf.nn.softmax(word_logits, axis=-1)
    ids = tf.argmax(word_logits, axis=-1, output_type=tf.int32)
    words = words.with_row_splits_dtype(tf.int64)
    return (words.with_flat_values(ids), words.with_flat_values(probabilities),
            words.with_flat_values(tf.reduce_max(probabilities, axis=-1)))


def entities(tags: tf.RaggedTensor) -> dict:
    """BIO-family tags [B, (N)] -> entity ``type`` (string), ``first_word``, ``last_word`` (int64), each ragged
    [B, (E)], by seqeval's ``get_entities`` (conlleval's chunk rules with IOBES's E-/S-)."""
    tags = tags.with_row_splits_dtype(tf.int64)
    dense = tags.to_tensor("O")
    dense = tf.concat([dense, tf.fill([tf.shape(dense)[0], 1], "O")], axis=1)  # a final O closes the last chunk
    B, M = tf.shape(dense, out_type=tf.int64)[0], tf.shape(dense, out_type=tf.int64)[1]
    prefix = tf.strings.substr(dense, 0, 1)
    kind = tf.strings.regex_replace(tf.strings.substr(dense, 1, tf.int32.max), "^[^-]*-", "")
    kind = tf.where(kind == "", "_", kind)
    prev = tf.concat([tf.fill([B, 1], "O"), prefix[:, :-1]], axis=1)
    prev_kind = tf.concat([tf.fill([B, 1], "_"), kind[:, :-1]], axis=1)

    def both(a, b):
        return (prev == a) & (prefix == b)

    changed = kind != prev_kind
    end = (tf.equal(prev, "E") | tf.equal(prev, "S") | both("B", "B") | both("B", "S") | both("B", "O")
           | both("I", "B") | both("I", "S") | both("I", "O") | ((prev != "O") & (prev != ".") & changed))
    start = (tf.equal(prefix, "B") | tf.equal(prefix, "S") | both("E", "E") | both("E", "I") | both("S", "E")
             | both("S", "I") | both("O", "E") | both("O", "I") | ((prefix != "O") & (prefix != ".") & changed))
    chunk = tf.cumsum(tf.cast(start, tf.int64), axis=1)  # [B, M]: the last chunk started at or before
    ends = tf.cumsum(tf.cast(end, tf.int64), axis=1)
    j = tf.range(M)[None, :]
    gid = tf.range(B)[:, None] * (M + 1) + chunk  # chunk ids unique in the batch
    count = B * (M + 1)
    ends_at_start = tf.math.unsorted_segment_max(tf.where(start, ends, -1), gid, count)
    member = (chunk > 0) & tf.equal(ends, tf.gather(ends_at_start, gid)) & (j < M - 1)
    first = tf.math.unsorted_segment_min(tf.where(start, j + tf.zeros_like(gid), M), gid, count)
    last = tf.math.unsorted_segment_max(tf.where(member, j + tf.zeros_like(gid), -1), gid, count)
    # One entity per start: its chunk id, in order.
    starts = tf.where(start & (j < M - 1))  # [E, 2]: (row, word)
    chunk_id = tf.gather_nd(gid, starts)
    rows = starts[:, 0]

    def ragged(values):
        return tf.RaggedTensor.from_value_rowids(values, rows, nrows=B, validate=False)  # tf.where: rows sorted

    return {"type": ragged(tf.gather_nd(kind, starts)), "first_word": ragged(tf.gather(first, chunk_id)),
            "last_word": ragged(tf.gather(last, chunk_id))}


def tag_text(network, preprocessor, text: tf.Tensor, labels: list, stride: int, bio: bool) -> dict:
    """Raw text [B] -> what the raw-text export returns (padded [B, N] / [B, E] tensors plus lengths; see
    docs/tagging.md): ``words``, ``start_char``, ``end_char``, ``tags``, ``tag_ids``, ``scores``, ``num_words``;
    with ``bio`` also ``entity_types``, ``entity_text``, ``entity_start_char``, ``entity_end_char``,
    ``entity_first_word``, ``entity_last_word``, ``num_entities``."""
    with tf.device("/CPU:0"):
        words, start, end = split_words(text)
    ids, _, scores = tag_words(network, preprocessor, words, stride)
    tags = tf.gather(tf.constant(list(labels), tf.string), ids)
    out = {"words": words.to_tensor(""), "start_char": tf.cast(start.to_tensor(-1), tf.int32),
           "end_char": tf.cast(end.to_tensor(-1), tf.int32), "tags": tags.to_tensor(""),
           "tag_ids": ids.to_tensor(-1), "scores": scores.to_tensor(0.0),
           "num_words": tf.cast(words.row_lengths(), tf.int32)}
    if bio:
        spans = entities(tags)
        first_char = tf.gather(start, spans["first_word"], batch_dims=1)
        last_char = tf.gather(end, spans["last_word"], batch_dims=1)
        clean = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
        span_text = tf.strings.substr(tf.gather(clean, first_char.value_rowids()), first_char.flat_values,
                                      last_char.flat_values - first_char.flat_values, unit="UTF8_CHAR")
        out.update(entity_types=spans["type"].to_tensor(""),
                   entity_text=first_char.with_flat_values(span_text).to_tensor(""),
                   entity_start_char=tf.cast(first_char.to_tensor(-1), tf.int32),
                   entity_end_char=tf.cast(last_char.to_tensor(-1), tf.int32),
                   entity_first_word=tf.cast(spans["first_word"].to_tensor(-1), tf.int32),
                   entity_last_word=tf.cast(spans["last_word"].to_tensor(-1), tf.int32),
                   num_entities=tf.cast(spans["type"].row_lengths(), tf.int32))
    return out
