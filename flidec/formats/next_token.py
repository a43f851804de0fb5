"""The next_token format (each ask rendered the way vLLM 0.32 reads a chat model, cut into token pieces):
the implementation lives in runtime/next_token.py, because the runtime binds instances with it without
importing the compiler's packages; re-exported here for the format registry, the passes and tools."""

from flidec.ir.instance import render_value  # noqa: F401 (re-export: tools render values as the format does)
from flidec.runtime.next_token import (  # noqa: F401 (re-exports)
    REPLY,
    SEP,
    AskPiece,
    ChatLayout,
    ChatTokenizer,
    NextTokenFormat,
    strip_text,
)
