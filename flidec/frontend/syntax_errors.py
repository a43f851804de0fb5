"""Lark's syntax errors -> a Diagnostic in words, with a hint for the common mistakes.

Consumes a lark UnexpectedInput raised while parsing a spec (its position, the offending token and the
terminals the parser expected) and the source; produces one Diagnostic that never shows lark's terminal
names (COLON, __ANON_3): it says what was expected, after what, and what was found instead.
"""

from __future__ import annotations

import difflib
import re

import lark

from flidec.ir.errors import Diagnostic
from flidec.ir.tree import Loc

_KEYWORDS = ("model", "format", "tree", "state", "text", "fork", "ask", "bound", "none", "resumable",
             "true", "false")
_DECL_KEYWORDS = ("model", "format", "tree", "state", "text", "fork", "ask")
_WORDS = {"NAME": "a name", "INT": "a number", "STRING": "a string", "$END": "the end of the file"}
# A rough token scan used only to name what stands before the error ("after the ask name `safe`").
_SCAN = re.compile(r'//[^\n]*|/\*[\s\S]*?\*/|"(?:[^"\\\n]|\\.)*"|[^\W\d]\w*|\d+|\.\.|\S', re.DOTALL)
_START_HINT = 'a spec begins with `model qwen3_5`, then `format next_token(style="vllm")`, then its trees'


def describe_syntax_error(e: lark.exceptions.UnexpectedInput, source: str, file: str,
                          parser: lark.Lark) -> Diagnostic:
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return _bad_character(e, source, file)
    if isinstance(e, lark.exceptions.UnexpectedToken):
        return _unexpected_token(e, source, file, parser)
    # UnexpectedEOF (not raised by LALR in practice) and anything newer: say where, at least.
    line, col = _end_position(source)
    return Diagnostic(Loc(file, line, col, line, col + 1), "the file ends in the middle of a declaration",
                      "finish the declaration, or close its braces")


def _bad_character(e: lark.exceptions.UnexpectedCharacters, source: str, file: str) -> Diagnostic:
    loc = Loc(file, e.line, e.column, e.line, e.column + 1)
    rest = source[e.pos_in_stream:]
    if rest.startswith('"'):
        return Diagnostic(loc, "this string is not closed on its line",
                          'close it with " before the line ends; write \\n for a line break')
    if rest.startswith("/*"):
        return Diagnostic(loc, "this comment is never closed", "close it with */")
    char = rest[:1]
    if char == "'":
        return Diagnostic(loc, "unexpected character `'`",
                          'strings are written in double quotes: "like this"')
    if char.isdigit():
        return Diagnostic(loc, f"unexpected number `{_word_at(rest)}`",
                          "names start with a letter or `_`; numbers stand in [..] ranges and options")
    shown = char if char.isprintable() and not char.isspace() else f"U+{ord(char):04X}" if char else "?"
    return Diagnostic(loc, f"unexpected character `{shown}`", _char_hint(char))


def _char_hint(char: str) -> str | None:
    if char == ";":
        return "declarations end at the line's end; no `;` is needed"
    if char == "#":
        return "comments start with // or are enclosed in /* */"
    return None


def _unexpected_token(e: lark.exceptions.UnexpectedToken, source: str, file: str,
                      parser: lark.Lark) -> Diagnostic:
    tok = e.token
    if tok.type == "$END":
        line, col = _end_position(source)
        loc = Loc(file, line, col, line, col + 1)
        pos = len(source)
    else:
        loc = Loc(file, tok.line, tok.column, tok.end_line or tok.line,
                  tok.end_column if tok.end_line == tok.line else tok.column + 1)
        pos = tok.start_pos if tok.start_pos is not None else len(source)
    expected = _acceptable(e)
    found = _found(tok)
    context = _context(source, pos)
    message = f"expected {_expected_words(expected, parser)}{context}, found {found}"
    return Diagnostic(loc, message, _hint(expected, tok, parser, source))


def _acceptable(e: lark.exceptions.UnexpectedToken) -> set[str]:
    """The terminals truly acceptable here. `e.expected` is the LALR state's lookahead set, which merges the
    contexts of shared rules (after `[..5]` it lists what may follow any bracket anywhere)."""
    ip = getattr(e, "interactive_parser", None)
    if ip is not None:
        try:
            return set(ip.accepts()) or set(e.expected)
        except lark.exceptions.LarkError:  # best effort: the lookahead set is still right, if loose
            return set(e.expected)
    return set(e.expected)


def _found(tok: lark.Token) -> str:
    if tok.type == "$END":
        return "the end of the file"
    if tok.type == "NAME":
        return f"`{tok}`"
    if tok.type == "STRING":
        return f"the string {tok}" if len(tok) <= 30 else "a string"
    if tok.type == "INT":
        return f"the number {tok}"
    return f"`{tok}`"


def _terminal_word(name: str, parser: lark.Lark) -> str:
    if name in _WORDS:
        return _WORDS[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name.lower()
    if isinstance(pattern, lark.lexer.PatternStr):
        return f"`{pattern.value}`"
    return name.lower()


def _expected_words(expected: set[str], parser: lark.Lark) -> str:
    nodes = {"TEXT", "ASK", "FORK"}
    if nodes <= expected:
        rest = sorted(_terminal_word(x, parser) for x in expected - nodes)
        return "a node (`text`, `ask` or `fork`)" + "".join(f" or {w}" for w in rest)
    words = sorted(_terminal_word(x, parser) for x in expected)
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _context(source: str, pos: int) -> str:
    """ ' after X' naming what stands just before `pos`, or '' at the start of the file."""
    toks = [m.group() for m in _SCAN.finditer(source, 0, pos) if not m.group().startswith(("//", "/*"))]
    if not toks:
        return " at the start of the spec"
    last = toks[-1]
    if last == "]" and "[" in toks:
        i = len(toks) - 1 - toks[::-1].index("[")
        if i > 0 and _is_name(toks[i - 1]):
            subject = toks[i - 1] + "".join(toks[i:])
            if i > 1 and toks[i - 2] in _DECL_KEYWORDS:
                return f" after the {toks[i - 2]} `{subject}`"
            return f" after `{subject}`"
        return f" after `{''.join(toks[i:])}`"
    if _is_name(last) and len(toks) > 1 and toks[-2] in _DECL_KEYWORDS and last not in _KEYWORDS:
        return f" after the {toks[-2]} name `{last}`"
    if last.startswith('"'):
        return " after a string"
    return f" after `{last}`"


def _hint(expected: set[str], tok: lark.Token, parser: lark.Lark, source: str) -> str | None:
    if "MODEL" in expected:
        return _START_HINT
    if expected == {"FORMAT"}:
        return 'the model is followed by its format: `format next_token(style="vllm")`'
    if expected == {"STATE"}:
        return "a tree begins with its state: `state history: text[..16384]`"
    if expected == {"TEXT"}:
        return "the token bound follows the word text: `text[..4096]`"
    if str(tok) == "none" and "NONE" not in expected:
        return "criteria left out are absent; `none` only stands for absent instructions, before the criteria"
    if tok.type == "NAME":
        keywords = [parser.get_terminal(x).pattern.value for x in expected
                    if x.isupper() and x not in _WORDS and x.lower() in _KEYWORDS]
        close = difflib.get_close_matches(str(tok), keywords, n=1, cutoff=0.6)
        if close:
            return f"did you mean `{close[0]}`?"
    if expected == {"COLON"} or "COLON" in expected and "LSQB" in expected and tok.type in ("NAME", "STRING"):
        return "a colon goes between a name and its type: `ask safe: noul`"
    if tok.type == "STRING" and "NAME" in expected:
        return "names are written without quotes; quotes are for text and for option names"
    if "RBRACE" in expected and tok.type == "$END":
        line = _unclosed_brace(source)
        return f"the `{{` on line {line} is never closed: add `}}`" if line else "add `}`"
    return None


def _is_name(tok: str) -> bool:
    return bool(re.fullmatch(r"[^\W\d]\w*", tok))


def _word_at(text: str) -> str:
    m = re.match(r"\w+", text)
    return m.group() if m else text[:1]


def _end_position(source: str) -> tuple[int, int]:
    """Just after the last character that is not white space: where a caret at "the end" can be seen."""
    text = source.rstrip()
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _unclosed_brace(source: str) -> int | None:
    """The line of the outermost `{` never closed, if any."""
    open_lines: list[int] = []
    for m in _SCAN.finditer(source):
        if m.group() == "{":
            open_lines.append(source.count("\n", 0, m.start()) + 1)
        elif m.group() == "}" and open_lines:
            open_lines.pop()
    return open_lines[0] if open_lines else None
