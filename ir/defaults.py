"""What a .flide spec means where it says nothing: the default token bounds of an ask's bound parts.

Shared by the frontend (which fills them in), the printer (which leaves them out again, so printing is
canonical) and docs/LANGUAGE.md (which states them). Pure data: no lark, no torch.
"""

from __future__ import annotations

from flidec.ir.tree import Bound

# An ask written with nothing after its type takes both parts from the instance, as System One does.
# The bounds are generous for one question (a paragraph of instructions, 255 short option names) and
# small enough that System One's 64 questions fit the 2**20-token tree limit with a 32k state.
DEFAULT_INSTRUCTIONS = Bound(max_tokens=1024)
DEFAULT_CRITERIA = Bound(max_tokens=4096)
