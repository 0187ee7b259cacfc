"""From XLNet SQuAD head outputs to answers, the three prediction files, and the official SQuAD v2 metrics.

Answer selection follows the original ``run_squad.write_predictions``: for every window, the
``start_n_top x end_n_top`` beam of the head; keep start/end inside the paragraph, the start in its max-context
window, ``end >= start`` and at most ``max_answer_length`` pieces; rank by ``start_log_prob + end_log_prob``;
n-best distinct texts; always emit the best non-null answer; ``null_odds`` = the answer-class logit, minimum over
the example's windows. (tf-models-official's ``squad_lib_sp.postprocess_output(xlnet_format=True)`` is not used:
it walks an ``n_best_size x n_best_size`` grid, which pairs the wrong starts and ends whenever ``start_n_top`` or
``end_n_top`` differ from ``n_best_size``.)

Metrics reuse ``official.nlp.tools.squad_evaluate_v2_0`` (answer normalisation, EM/F1, HasAns/NoAns splits, best
threshold search); on top of it, the original's ``find_all_best_thresh_v2`` keys (``best_exact``, ``best_f1``,
their thresholds, ``has_ans_exact``/``has_ans_f1``) since XLNet's null odds are logits, not probabilities, and
the official ``evaluate()`` thresholds them at 1.0.
"""

from __future__ import annotations

import collections
import math
import os
from typing import Optional

import numpy as np

from xlnet_tf.io_utils import write_json_atomic

PREDICTIONS, NBEST, NULL_ODDS, EVAL_RESULTS = ("predictions.json", "nbest_predictions.json", "null_odds.json",
                                               "eval_results.json")
PREDICTION_FILES = (PREDICTIONS, NBEST, NULL_ODDS)
# Null odds of an example that got no window (skipped in preprocessing): certainly "no answer".
SKIPPED_NULL_ODDS = 1e6

_Prelim = collections.namedtuple("Prelim", ["feature_index", "start_index", "end_index", "start_log_prob",
                                            "end_log_prob"])


def _softmax(scores):
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def compute_predictions(examples: list, features: list, results: dict, n_best_size: int = 5,
                        max_answer_length: int = 64, start_n_top: int = 5, end_n_top: int = 5):
    """``results``: arrays from the head, keyed by output name, rows aligned with ``results["unique_ids"]``.

    Returns ``(predictions, nbest, null_odds)``, ordered dicts keyed by question id. Examples without features
    (skipped in preprocessing) predict "" with null odds ``SKIPPED_NULL_ODDS``.
    """
    row_of = {int(u): i for i, u in enumerate(np.asarray(results["unique_ids"]).reshape(-1))}
    start_lp, start_ix = results["start_top_log_probs"], results["start_top_index"]
    end_lp, end_ix, cls_logits = results["end_top_log_probs"], results["end_top_index"], results["cls_logits"]
    by_example = collections.defaultdict(list)
    for feature in features:
        by_example[feature.example_index].append(feature)

    predictions, nbest_json, null_odds = (collections.OrderedDict() for _ in range(3))
    for example_index, example in enumerate(examples):
        features_here = [f for f in by_example.get(example_index, []) if f.unique_id in row_of]
        if not features_here:
            predictions[example.qas_id], nbest_json[example.qas_id] = "", []
            null_odds[example.qas_id] = SKIPPED_NULL_ODDS
            continue
        prelim, score_null = [], math.inf
        for feature_index, feature in enumerate(features_here):
            r = row_of[feature.unique_id]
            score_null = min(score_null, float(cls_logits[r]))
            for i in range(start_n_top):
                start_index, start_log_prob = int(start_ix[r, i]), float(start_lp[r, i])
                for j in range(end_n_top):
                    k = i * end_n_top + j
                    end_index, end_log_prob = int(end_ix[r, k]), float(end_lp[r, k])
                    if start_index >= feature.paragraph_len or end_index >= feature.paragraph_len:
                        continue  # not a paragraph piece (query, separators, CLS, padding)
                    if not feature.token_is_max_context.get(start_index, False):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim.append(_Prelim(feature_index, start_index, end_index, start_log_prob, end_log_prob))
        prelim.sort(key=lambda p: p.start_log_prob + p.end_log_prob, reverse=True)

        seen, nbest = set(), []
        for p in prelim:
            if len(nbest) >= n_best_size:
                break
            feature = features_here[p.feature_index]
            start = feature.tok_start_to_orig_index[p.start_index]
            end = feature.tok_end_to_orig_index[p.end_index]
            text = example.paragraph_text[start:end + 1].strip()
            if text in seen:
                continue
            seen.add(text)
            nbest.append((text, p.start_log_prob, p.end_log_prob))
        if not nbest:  # no valid span at all (as the original: an empty answer with a very low score)
            nbest.append(("", -1e6, -1e6))
        probs = _softmax([s + e for _, s, e in nbest])
        nbest_json[example.qas_id] = [
            collections.OrderedDict(text=t, probability=p, start_log_prob=s, end_log_prob=e)
            for (t, s, e), p in zip(nbest, probs)]
        predictions[example.qas_id] = nbest[0][0]  # the best non-null answer; the threshold decides null
        null_odds[example.qas_id] = score_null
    return predictions, nbest_json, null_odds


def write_prediction_files(predict_dir: str, predictions: dict, nbest: dict, null_odds: dict) -> dict:
    """Writes predictions.json, nbest_predictions.json and null_odds.json atomically; returns their paths."""
    paths = {}
    for name, obj in zip(PREDICTION_FILES, (predictions, nbest, null_odds)):
        paths[name] = os.path.join(predict_dir, name)
        write_json_atomic(paths[name], obj, indent=4)
    return paths


def _best_thresh_v2(predictions, scores, null_odds, qid_to_has_ans):
    """The original ``find_best_thresh_v2``: the official best-threshold search plus the HasAns score."""
    from official.nlp.tools import squad_evaluate_v2_0 as official

    best, thresh = official._find_best_thresh(predictions, scores, null_odds, qid_to_has_ans)  # noqa: SLF001
    has_ans = [k for k, v in qid_to_has_ans.items() if v]
    has_ans_score = sum(scores.get(k, 0.0) for k in has_ans) / len(has_ans) if has_ans else 0.0
    return best, thresh, has_ans_score


def evaluate(data: list, predictions: dict, null_odds: Optional[dict] = None) -> dict:
    """Official SQuAD v2 metrics (0-100) of ``predictions`` against the file's ``data`` list.

    ``exact``/``f1`` (and ``HasAns_*``, ``NoAns_*``) score the predictions as written, i.e. always answering
    (the SQuAD v1.1 metric on v1.1 data); ``best_exact``/``best_f1`` and their ``*_thresh`` answer "" where
    ``null_odds`` exceeds the best threshold found on this data; ``has_ans_exact``/``has_ans_f1`` are the raw
    scores on answerable questions (fractions, as the original).
    """
    from official.nlp.tools import squad_evaluate_v2_0 as official

    qas = [qa for article in data for p in article["paragraphs"] for qa in p["qas"]]
    scored = [{"paragraphs": [{"qas": [qa]}]} for qa in qas if str(qa["id"]) in predictions]
    predictions = {str(k): v for k, v in predictions.items()}
    qid_to_has_ans = official._make_qid_to_has_ans(scored)  # noqa: SLF001
    exact_raw, f1_raw = official._get_raw_scores(scored, predictions)  # noqa: SLF001
    out = dict(official._make_eval_dict(exact_raw, f1_raw))  # noqa: SLF001
    for prefix, want in (("HasAns", True), ("NoAns", False)):
        ids = [k for k, v in qid_to_has_ans.items() if v == want]
        if ids:
            official._merge_eval(out, official._make_eval_dict(exact_raw, f1_raw, qid_list=ids), prefix)  # noqa
    out["missing"] = len(qas) - len(scored)
    if null_odds is not None:
        null_odds = {str(k): float(v) for k, v in null_odds.items() if str(k) in qid_to_has_ans}
        out["best_exact"], out["best_exact_thresh"], out["has_ans_exact"] = _best_thresh_v2(
            predictions, exact_raw, null_odds, qid_to_has_ans)
        out["best_f1"], out["best_f1_thresh"], out["has_ans_f1"] = _best_thresh_v2(
            predictions, f1_raw, null_odds, qid_to_has_ans)
    return out

