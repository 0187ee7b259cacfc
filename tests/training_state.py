"""What "the same training state" means in the tests of resume, replicas and workers: one definition for all.

Integer state (steps, dropout seed states, the recorded data order) must be equal. Floating-point state (weights,
optimizer moments) must agree to float32 round-off, measured per variable against that variable's scale:

    max |a - b|  <=  ROUND_OFF * max |b|

Why per variable and not per element: two runs that sum the same numbers in another order (two processes, two
replicas, another thread split) differ by an ulp here and there, and an ulp of an element near zero is a large
relative difference. Seen once in a full suite run: 2 of 256 elements of an Adam second moment, 1.3440302e-11 vs
1.3440339e-11 (relative 2.8e-6, absolute 4e-17) when the variable's largest element is ~1e-8. A per-element
relative tolerance flakes on such elements however loose it is; against the variable's scale the same difference
is 4e-9.

Why this still catches what these tests are for: a wrong data position or dropout mask changes the gradients of
the remaining steps entirely, moving weights by about the learning rate (1e-3 and more against scales of 0.02-1:
1e-3 to 1e-1 of the scale) and optimizer moments by their whole size. ``ROUND_OFF`` = 1e-5 leaves two orders of
magnitude on either side; ``test_finetune_resume.py`` checks the comparison fails for a run resumed one batch off.
"""

import numpy as np

ROUND_OFF = 1e-5


def differences(a: dict, b: dict, round_off: float = ROUND_OFF) -> dict:
    """``{name: why}`` for every variable in which the states ``a`` and ``b`` (name -> array) differ beyond
    ``round_off`` of its scale (floats) or at all (integers, booleans, strings); a name in one state only
    differs too."""
    out = {name: "missing on one side" for name in sorted(set(a) ^ set(b))}
    for name in sorted(set(a) & set(b)):
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.shape != y.shape:
            out[name] = f"shapes {x.shape} vs {y.shape}"
        elif x.dtype.kind in "fc" or y.dtype.kind in "fc":
            x, y = x.astype(np.float64), y.astype(np.float64)
            if not (np.isfinite(x).all() and np.isfinite(y).all()):
                out[name] = "a non-finite value"
                continue
            scale = max(np.abs(x).max(initial=0.0), np.abs(y).max(initial=0.0))
            worst = np.abs(x - y).max(initial=0.0)
            # (all zeros on both sides: scale 0, no difference; zeros on one side only: a difference of its scale)
            if worst > round_off * scale:
                out[name] = f"max |a - b| = {worst:.3g}, {worst / scale:.3g} of its scale {scale:.3g}"
        elif not np.array_equal(x, y):
            out[name] = f"{int(np.sum(x != y))} of {x.size} values differ"
    return out


def assert_same_state(a: dict, b: dict, round_off: float = ROUND_OFF):
    """Fails naming every variable in which ``a`` and ``b`` differ (see ``differences``)."""
    differ = differences(a, b, round_off)
    assert not differ, "training states differ:\n" + "\n".join(f"  {n}: {why}" for n, why in differ.items())


def model_state(model) -> dict:
    """A Keras model's weights by path."""
    return {w.path: w.numpy() for w in model.weights}


def checkpoint_state(path: str, skip=lambda name: False) -> dict:
    """Every tensor of the checkpoint at ``path`` (a prefix or a directory: its latest) by its key, except the
    object graph and names ``skip`` selects."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not skip(name)}


def stopped_at(run_dir, step: int, into, name: str = "xlnet_model"):
    """``into``: a copy of the run directory ``run_dir`` (checkpoints ``<name>-<step>``) as it was when its
    step-``step`` checkpoint was the newest (a run stopped there); a rerun in ``into`` resumes from it."""
    import shutil

    import tensorflow as tf

    def later(file):  # <name>-<step>.index, <name>-<step>.data-...
        return file.startswith(f"{name}-") and int(file[len(name) + 1:].split(".")[0]) > step
    shutil.copytree(run_dir, into, ignore=lambda _, names: [n for n in names if n == "checkpoint" or later(n)])
    tf.compat.v1.train.update_checkpoint_state(str(into), f"{name}-{step}")
