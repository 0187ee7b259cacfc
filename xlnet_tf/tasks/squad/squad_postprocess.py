"""From XLNet SQuAD head outputs to answers, the three prediction files, and the official SQuAD metrics.

Answer selection follows the original ``run_squad.write_predictions``: for every window, the
``start_n_top x end_n_top`` beam of the head; keep start/end inside the paragraph, the start in its max-context
window, ``end >= start`` and at most ``max_answer_length`` pieces; rank by ``start_log_prob + end_log_prob``;
n-best distinct texts; always emit the best non-null answer; ``null_odds`` = the answer-class logit, minimum over
the example's windows. (tf-models-official's ``squad_lib_sp.postprocess_output(xlnet_format=True)`` is not used:
it walks an ``n_best_size x n_best_size`` grid, which pairs the wrong starts and ends whenever ``start_n_top`` or
``end_n_top`` differ from ``n_best_size``.) ``apply_null_threshold`` turns those answers into a SQuAD 2.0
submission: "" where the null odds exceed a threshold (``--null_score_diff_threshold``).

Metrics: SQuAD 2.0 files are scored by ``official.nlp.tools.squad_evaluate_v2_0`` (answer normalisation, EM/F1,
HasAns/NoAns splits), SQuAD 1.1 files by ``squad_evaluate_v1_1``'s (``exact_match_v1``, ``f1_v1``: which
differ where an answer normalises to nothing; ``is_version_2`` tells the files apart). On top of them, the
original's ``find_all_best_thresh_v2`` keys (``best_exact``, ``best_f1``, their thresholds,
``has_ans_exact``/``has_ans_f1``) since XLNet's null odds are logits, not probabilities, and the official
``evaluate()`` thresholds them at 1.0; the threshold search scores every candidate as the file it would write
(``_best_thresh``), so that a best score is what its threshold gives.
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
SUMMARY = "squad.summary.json"  # what the prediction files were made from, and the settings they depend on
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


def apply_null_threshold(predictions: dict, null_odds: dict, threshold: Optional[float]) -> dict:
    """``predictions`` with "" ("no answer") for each question whose null odds exceed ``threshold``; ``predictions``
    itself when ``threshold`` is None. The direction is the official search's (``_find_best_thresh``: a question
    is answered while its null odds are <= the threshold), so ``best_f1_thresh`` applied here scores ``best_f1``."""
    if threshold is None:
        return predictions
    return collections.OrderedDict((k, "" if float(null_odds[k]) > threshold else v) for k, v in predictions.items())


# SQuAD v1.1's metric: tf-models-official's copy of the official evaluate-v1.1.py (squad_evaluate_v1_1), whose
# scores differ from v2.0's where an answer normalises to nothing: a question keeps every gold answer, and an F1
# without a common token is 0 even where both texts normalise to nothing (v2.0: 1 when both are empty, and gold
# answers that normalise to nothing are dropped).
def exact_match_v1(prediction: str, ground_truth: str) -> bool:
    from official.nlp.tools import squad_evaluate_v1_1 as v11
    return v11._exact_match_score(prediction, ground_truth)  # noqa: SLF001


def f1_v1(prediction: str, ground_truth: str) -> float:
    from official.nlp.tools import squad_evaluate_v1_1 as v11
    return v11._f1_score(prediction, ground_truth)  # noqa: SLF001


def _raw_scores_v1(dataset: list, predictions: dict) -> tuple:
    """``(exact, f1)`` by question id, each the maximum over the question's gold answers (v1.1's
    ``metric_max_over_ground_truths``); the layout of ``official._get_raw_scores``."""
    exact, f1 = {}, {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                golds = [a["text"] for a in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact[qa["id"]] = max(int(exact_match_v1(prediction, g)) for g in golds)
                f1[qa["id"]] = max(f1_v1(prediction, g) for g in golds)
    return exact, f1


def is_version_2(data: list, version=None) -> bool:
    """Whether a SQuAD file (its ``data`` list and its ``version`` field) is scored by SQuAD 2.0's rules: its
    version says 2 ("v2.0"), or a question carries ``is_impossible`` (every SQuAD 2.0 question does, no 1.1 one)
    or has no gold answer (v1.1's metric, a maximum over the gold answers, has none to take). Otherwise v1.1's:
    the official 1.1 files, and files of answered questions that name no version."""
    if isinstance(version, str) and version.lower().lstrip("v").startswith("2"):
        return True
    return any("is_impossible" in qa or not qa.get("answers")
               for article in data for p in article["paragraphs"] for qa in p["qas"])


def _best_thresh(answered: dict, nulled: dict, null_odds: dict) -> tuple:
    """The best score (0-100) over no-answer thresholds, and its threshold: a question scores ``answered`` (its
    best non-null answer) where its null odds are <= the threshold, else ``nulled`` (its score for "").

    The official ``_find_best_thresh`` scores the written file only approximately: it may stop between questions
    of equal null odds (a threshold answers all of them), counts a no-answer question answered by text that
    normalises to nothing as wrong (its F1 is 1), and reports 0.0 when answering nothing is best (0.0 may answer
    some). Here only thresholds at the end of a run of equal odds are candidates, the score is that of the file
    the threshold writes (summed in the official order: the same float), and answering nothing has a threshold
    below every null odds. Where none of those cases arises, the score is the official one.

    The threshold lies midway between the last answered question's odds and the next ones up (1 above the
    highest; 1 below the lowest when answering nothing is best), not on that question's odds as the official
    one: a rerun's odds move by float32 round-off (another batch size or device) and batch prediction rounds
    them to 6 decimals, which flipped that question to ""."""
    qids = list(answered)
    if not qids:
        return 0.0, 0.0
    odds = {q: null_odds.get(q, math.inf) for q in qids}  # no null odds: never answered, as the official search
    order = sorted(qids, key=odds.get)
    current = best = sum(nulled.values())
    last = None  # the position in ``order`` of the last question answered at the best threshold
    for i, q in enumerate(order):
        current += answered[q] - nulled[q]
        last_of_run = i + 1 == len(order) or odds[order[i + 1]] != odds[q]
        if last_of_run and math.isfinite(odds[q]) and current > best:
            best, last = current, i
    if last is None:  # answering nothing is best
        lowest = odds[order[0]]
        thresh = lowest - 1.0 if math.isfinite(lowest) else 0.0
    else:
        below = odds[order[last]]
        above = odds[order[last + 1]] if last + 1 < len(order) else math.inf
        thresh = below + (above - below) / 2 if math.isfinite(above) else below + 1.0
        if not below <= thresh < above:  # adjacent floats: no value between them
            thresh = below
    scores = [answered[q] if odds[q] <= thresh else nulled[q] for q in qids]
    return 100.0 * sum(scores) / len(scores), thresh


def evaluate(data: list, predictions: dict, null_odds: Optional[dict] = None, threshold: Optional[float] = None,
             version_2: Optional[bool] = None) -> dict:
    """The official metrics (0-100) of ``predictions`` (the best non-null answers) against the file's ``data``
    list: SQuAD 2.0's rules if ``version_2`` (default: ``is_version_2(data)``), else v1.1's.

    ``exact``/``f1`` (and ``HasAns_*``, ``NoAns_*``) score the predictions as written, i.e. always answering, or
    with ``threshold`` "" where ``null_odds`` exceed it (``apply_null_threshold``): the official script's scores of
    that predictions.json. ``best_exact``/``best_f1`` and their ``*_thresh`` answer "" where ``null_odds``
    exceeds the best threshold found on this data (``_best_thresh``: that threshold as ``threshold`` makes
    ``exact``/``f1`` these); ``has_ans_exact``/``has_ans_f1`` are the raw scores on answerable questions
    (fractions, as the original).
    """
    from official.nlp.tools import squad_evaluate_v2_0 as official

    if version_2 is None:
        version_2 = is_version_2(data)
    raw_scores = official._get_raw_scores if version_2 else _raw_scores_v1  # noqa: SLF001
    qas = [qa for article in data for p in article["paragraphs"] for qa in p["qas"]]
    # Ids as the predictions key them (a file's number id would otherwise never meet its prediction).
    scored = [{"paragraphs": [{"qas": [dict(qa, id=str(qa["id"]))]}]} for qa in qas if str(qa["id"]) in predictions]
    predictions = {str(k): v for k, v in predictions.items()}
    if null_odds is not None:
        null_odds = {str(k): float(v) for k, v in null_odds.items()}
    if threshold is not None and null_odds is None:
        raise ValueError("a no-answer threshold needs the null odds")
    qid_to_has_ans = official._make_qid_to_has_ans(scored)  # noqa: SLF001
    exact_raw, f1_raw = raw_scores(scored, apply_null_threshold(predictions, null_odds, threshold))
    out = dict(official._make_eval_dict(exact_raw, f1_raw))  # noqa: SLF001
    for prefix, want in (("HasAns", True), ("NoAns", False)):
        ids = [k for k, v in qid_to_has_ans.items() if v == want]
        if ids:
            official._merge_eval(out, official._make_eval_dict(exact_raw, f1_raw, qid_list=ids), prefix)  # noqa
    out["missing"] = len(qas) - len(scored)
    if null_odds is not None:
        answered = raw_scores(scored, predictions)
        nulled = raw_scores(scored, {k: "" for k in predictions})
        has_ans = [k for k, v in qid_to_has_ans.items() if v]
        for name, answered_scores, nulled_scores in zip(("exact", "f1"), answered, nulled):
            out[f"best_{name}"], out[f"best_{name}_thresh"] = _best_thresh(answered_scores, nulled_scores,
                                                                           null_odds)
            out[f"has_ans_{name}"] = sum(answered_scores[k] for k in has_ans) / len(has_ans) if has_ans else 0.0
    return out
