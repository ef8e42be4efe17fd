"""How good is the model? Accuracy and F1 computed offline with scikit-learn (chapter 2 onwards).

``evaluate.load("accuracy")`` fetches its metric script from the Hub and fails offline; scikit-learn's
``accuracy_score`` and ``f1_score`` compute the same numbers locally.
"""

from __future__ import annotations

from collections import Counter

from effitrain_helpers.core.language import tr


def accuracy_f1(predictions, labels) -> dict[str, float]:
    """Accuracy and binary F1 (positive class 1) of predicted labels against true labels."""
    from sklearn.metrics import accuracy_score, f1_score

    predictions, labels = _as_list(predictions), _as_list(labels)
    if len(predictions) != len(labels) or not labels:
        raise ValueError(tr("got {predictions} predictions for {labels} labels; they must match and be non-empty.",
                            predictions=len(predictions), labels=len(labels)))
    return {"accuracy": float(accuracy_score(labels, predictions)), "f1": float(f1_score(labels, predictions, zero_division=0))}


def trainer_metrics(eval_pred) -> dict[str, float]:
    """``compute_metrics`` for ``Trainer``: logits -> predicted class -> accuracy and F1."""
    logits, labels = eval_pred
    return accuracy_f1(logits.argmax(-1), labels)


def majority_rate(labels) -> float:
    """Accuracy of always answering the most common label: the bar a model must clear."""
    labels = _as_list(labels)
    return Counter(labels).most_common(1)[0][1] / len(labels)


def _as_list(values) -> list[int]:
    return [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
