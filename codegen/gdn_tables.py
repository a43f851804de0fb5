"""Host tables of the forked Gated DeltaNet and the fork conv kernels (work items, tail rows, conv taps).

The implementation lives in runtime/tables.py (the runtime fills them at bind time without importing
codegen); this module re-exports it for the kernels' emitters and tests.
"""

from flidec.runtime.tables import (  # noqa: F401 (re-exports)
    ITEM_FIELDS,
    GdnTables,
    conv_taps,
    gdn_tables,
    state_slots,
)
