"""Host-side constant tables of the fork attention kernel: query tiles and path levels.

The implementation lives in runtime/tables.py (the runtime fills them at bind time without importing
codegen); this module re-exports it for the kernels' emitters and tests.
"""

from flidec.runtime.tables import (  # noqa: F401 (re-exports)
    POS_NONE,
    TILE_FIELDS,
    max_query_tiles,
    path_depth,
    path_levels,
    query_tiles,
)
