"""Answer objects from label logits: the formulas live in runtime/answers_math.py (the runtime needs them
without importing the compiler's packages); re-exported here for the formats."""

from flidec.runtime.answers_math import (  # noqa: F401 (re-exports)
    JSONValue,
    argmax,
    choice_answer,
    choice_confidence,
    noul_answer,
    score_answer,
    score_confidence,
    softmax,
)
