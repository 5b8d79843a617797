"""Train on synthetic, test on real: what a synthetic table is worth to a model of one target column.

NOT a release: it reads the real rows (``evaluate_synthetic --target``, for the data owner). The real rows are
split once, ``TEST_SHARE`` of them held out by a fixed seed; a classifier trained on the synthetic rows and one
trained on the rest of the real rows (the ceiling) are scored on the held-out rows: AUC (for more than two
classes the mean over the classes of each one-against-the-rest AUC, "macro") and accuracy, beside always
guessing the real rows' most common class. The synthetic table was drawn from all the real rows, the held-out
ones too, so its score is a little optimistic; differential privacy bounds by how much. Rows are held out, not
privacy units: one unit's rows may fall on both sides, which flatters the ceiling a little. A table of more
than ``MAX_ROWS`` rows is sampled as it is read (``evaluate_synthetic.table_codes``).

The classifier is a softmax (multinomial logistic) regression on the other columns' codes, one-hot (a numeric
column by its bin), with a small L2 penalty, fitted by Nesterov's accelerated gradient for a fixed number of
steps: numpy alone (scikit-learn is no dependency of the library), the same numbers on every machine.
"""

from __future__ import annotations

import numpy as np

TEST_SHARE = 0.2
SPLIT_SEED = 0
MAX_ROWS = 100_000  # of each table, about: a larger one is sampled as it is read, to keep the fit to seconds
STEPS = 300
L2 = 1e-4


def one_hot(codes: dict[str, np.ndarray], sizes: dict[str, int], features: list[str]) -> np.ndarray:
    """Each row's codes of ``features`` as one-hot columns, then a constant column (the intercept)."""
    rows = len(codes[features[0]]) if features else 0
    offsets = np.cumsum([0] + [sizes[c] for c in features])
    x = np.zeros((rows, int(offsets[-1]) + 1), np.float32)
    for column, offset in zip(features, offsets, strict=False):
        x[np.arange(rows), offset + np.asarray(codes[column], np.int64)] = 1
    x[:, -1] = 1
    return x


def fit(x: np.ndarray, y: np.ndarray, classes: int) -> np.ndarray:
    """The weights (features x classes) of the L2-penalised softmax regression of labels ``y`` on ``x``."""
    weights = np.zeros((x.shape[1], classes), np.float64)
    targets = np.eye(classes)[y]
    # The loss's gradient is Lipschitz in the weights with constant at most (largest row norm^2) / 2 + L2.
    step = 1.0 / (0.5 * float((x**2).sum(axis=1).max()) + L2)
    momentum, previous = weights.copy(), weights.copy()
    for t in range(1, STEPS + 1):
        gradient = x.T @ (_softmax(x @ momentum) - targets) / y.size + L2 * momentum
        weights = momentum - step * gradient
        momentum = weights + (t - 1) / (t + 2) * (weights - previous)
        previous = weights
    return weights


def _softmax(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=1, keepdims=True)


def auc(y: np.ndarray, probabilities: np.ndarray) -> float | None:
    """The area under the ROC curve: for two classes, of class 1's probability; for more, the mean over the
    classes present (and absent from no row) of each one-against-the-rest AUC. Ties count a half (ranks)."""
    present = [c for c in np.unique(y) if 0 < np.sum(y == c) < y.size]
    if not present:
        return None
    if probabilities.shape[1] == 2:
        present = [1]
    return float(np.mean([_binary_auc(y == c, probabilities[:, c]) for c in present]))


def _binary_auc(positive: np.ndarray, score: np.ndarray) -> float:
    """Mann-Whitney: P(a positive row scores above a negative one), ties a half."""
    order = np.argsort(score, kind="stable")
    ranks = np.empty(score.size)
    ranks[order] = np.arange(1, score.size + 1)
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    ranks = (sums / counts)[inverse]  # tied scores share their mean rank
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def train_on_synthetic(real: dict[str, np.ndarray], synthetic: dict[str, np.ndarray], sizes: dict[str, int],
                       target: str) -> dict:  # fmt: skip
    """The learning section of an evaluation (module docstring), JSON-ready."""
    features = [c for c in sizes if c != target]
    classes = sizes[target]
    held = np.random.default_rng(SPLIT_SEED).permutation(len(real[target]))
    cut = round(TEST_SHARE * held.size)
    if cut < 1 or cut == held.size or len(synthetic[target]) == 0:
        raise ValueError(f"too few rows to train on and hold out ({held.size:,} real, {len(synthetic[target]):,} "
                         "synthetic)")  # fmt: skip
    test, train = held[:cut], held[cut:]
    x_test, y_test = one_hot({c: real[c][test] for c in features}, sizes, features), real[target][test]
    scores = {}
    for name, table, rows in (("synthetic", synthetic, None), ("real", real, train)):
        if rows is None:
            rows = np.arange(len(table[target]))
        x = one_hot({c: np.asarray(table[c])[rows] for c in features}, sizes, features)
        y = np.asarray(table[target])[rows].astype(np.int64)
        probabilities = _softmax(x_test @ fit(x, y, classes))
        scores[name] = {"rows": int(rows.size), "auc": auc(y_test, probabilities),
                        "accuracy": float(np.mean(probabilities.argmax(axis=1) == y_test))}  # fmt: skip
    majority = int(np.bincount(real[target][train], minlength=classes).argmax())
    return {
        "target": target,
        "classifier": f"softmax regression on one-hot codes, L2 {L2:g}, {STEPS} steps (numpy)",
        "held_out": {"share": TEST_SHARE, "seed": SPLIT_SEED, "rows": int(test.size)},
        "trained_on_synthetic": scores["synthetic"],
        "trained_on_real": scores["real"],
        "majority_class_accuracy": float(np.mean(y_test == majority)),
    }
