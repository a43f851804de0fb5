"""Answer labels of the next_token format: the implementation lives in runtime/labels.py (the runtime binds
without importing the compiler's packages); re-exported here for the formats."""

from flidec.runtime.labels import (  # noqa: F401 (re-exports)
    MAX_CHOICE,
    MAX_SCORE,
    NOUL_LABELS,
    LabelError,
    Labels,
    LabelTable,
)
