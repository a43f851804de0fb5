"""The pass manager: a registry of named passes between named IR levels, and the one loop that runs them.

Consumes an IR value, a pipeline (pass names) and a context (passes/context.CompileContext in a compile);
produces the last pass's IR. Around every pass it runs the verifier of the pass's output level, times the
pass, prints the IR after the passes named in `dump_after` and skips those in `disabled`; a pass that raises,
or whose output its level's verifier rejects, fails with "in pass X (after A, B): ...", A, B being every
pass run before it (`before` names those of earlier pipelines). The manager knows no level: tree passes,
torch.fx passes and the build stages (record_buckets .. write_artifact) register the same way (`register`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from flidec.ir.errors import FlideError


@dataclass(frozen=True, slots=True)
class Level:
    """An IR level: its name, its verifier (IR -> problems) and its printer (IR -> text)."""

    name: str
    verify: Callable[[Any], Sequence[object]]
    render: Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class Pass:
    """A registered pass: `run(ir, ctx)` turns IR of `level_in` into IR of `level_out`."""

    name: str
    level_in: str
    level_out: str
    run: Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Timing:
    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Options:
    """The pass instruments (`--dump-ir after=P`, `--time-passes`, `--disable-pass=P`), kept out of passes.

    `verify`: run the level verifiers around each pass (on by default; the cost is small next to codegen).
    Dumps go to `dump_to` as `// IR after P (level L)` then the level's text; `time_passes` prints a table
    there too at the end.
    """

    dump_after: frozenset[str] = frozenset()
    time_passes: bool = False
    disabled: frozenset[str] = frozenset()
    verify: bool = True
    dump_to: TextIO | None = None


@dataclass(frozen=True, slots=True)
class Result:
    ir: Any
    level: str
    timings: tuple[Timing, ...]
    dumps: tuple[tuple[str, str], ...] = ()  # (pass name, IR text) for each pass in dump_after


class PassError(FlideError):
    """A pass raised, or produced IR its output level's verifier rejects."""

    def __init__(self, name: str, before: Sequence[str], message: str):
        self.pass_name = name
        self.before = tuple(before)
        after = f" (after {', '.join(self.before)})" if self.before else " (the first pass)"
        super().__init__(f"in pass {name}{after}: {message}")


LEVELS: dict[str, Level] = {}
PASSES: dict[str, Pass] = {}


def register_level(name: str, verify: Callable[[Any], Sequence[object]], render: Callable[[Any], str]
                   ) -> Level:
    if name in LEVELS:
        raise ValueError(f"IR level {name!r} is registered twice")
    LEVELS[name] = Level(name, verify, render)
    return LEVELS[name]


PassFn = Callable[[Any, Any], Any]


def register(name: str, level_in: str, level_out: str) -> Callable[[PassFn], PassFn]:
    """Decorator: register `fn(ir, ctx) -> ir` as the pass `name` from `level_in` to `level_out`. A pass is a
    pure function in its own file, named by its verb; `ctx` is read, never written. A level comes first:

        register_level("fx", verify=lambda gm: [str(e) for e in _lint(gm)], render=lambda gm: gm.code)

        @register("trim_reads", level_in="fx", level_out="fx")
        def trim_reads(gm: GraphModule, ctx: CompileContext | None = None) -> GraphModule: ...

    A level's `verify` returns its problems (empty when the IR is well formed; anything with a str()); its
    `render` gives the deterministic `--dump-ir` text. Then run a pipeline: `run(ir, ["trim_reads"], ctx)`."""

    def add(fn: PassFn) -> PassFn:
        if name in PASSES:
            raise ValueError(f"pass {name!r} is registered twice")
        PASSES[name] = Pass(name, level_in, level_out, fn)
        return fn

    return add


def check_pipeline(names: Iterable[str], level: str, disabled: frozenset[str] = frozenset()) -> str:
    """The level a pipeline ends at, starting from `level`; raises ValueError on an unknown pass or a pass
    whose input level is not the level before it (a disabled pass must keep its level)."""
    for name in names:
        if name not in PASSES:
            raise ValueError(f"unknown pass {name!r}; the registered passes: {', '.join(sorted(PASSES))}")
        p = PASSES[name]
        if p.level_in != level:
            raise ValueError(f"pass {name} takes {p.level_in} IR, but the pipeline has {level} IR there")
        if name in disabled and p.level_in != p.level_out:
            raise ValueError(f"pass {name} cannot be disabled: it turns {p.level_in} IR into {p.level_out} "
                             "IR")
        level = p.level_out
    return level


def run(ir: Any, names: Sequence[str], ctx: Any = None, level: str | None = None,
        options: Options = Options(), before: Sequence[str] = ()) -> Result:
    """Run the passes `names` in order on `ir` (of `level`, default: the first pass's input level).
    `before`: the passes earlier pipelines of the same compile ran, named in a failure's "(after ...)"."""
    if not names:
        raise ValueError("an empty pipeline")
    if level is None:
        level = PASSES[names[0]].level_in if names[0] in PASSES else ""
    unknown = (options.dump_after | options.disabled) - set(names)
    if unknown:
        raise ValueError(f"no pass named {', '.join(sorted(unknown))} in this pipeline: {', '.join(names)}")
    check_pipeline(names, level, options.disabled)
    if options.verify:
        _verify(ir, level, names[0], before, "its input")
    done: list[str] = list(before)
    timings: list[Timing] = []
    dumps: list[tuple[str, str]] = []
    for name in names:
        if name in options.disabled:
            continue
        p = PASSES[name]
        start = time.perf_counter()
        try:
            ir = p.run(ir, ctx)
        except FlideError as e:
            raise PassError(name, done, str(e)) from e
        except Exception as e:  # a bug in the pass: keep its type and the passes that ran before it
            raise PassError(name, done, f"{type(e).__name__}: {e}") from e
        timings.append(Timing(name, time.perf_counter() - start))
        level = p.level_out
        if options.verify:
            _verify(ir, level, name, done, "its output")
        if name in options.dump_after:
            text = LEVELS[level].render(ir)
            dumps.append((name, text))
            if options.dump_to is not None:
                options.dump_to.write(f"// IR after {name} ({level} IR)\n{text}\n")
        done.append(name)
    if options.time_passes and options.dump_to is not None:
        options.dump_to.write(render_timings(timings))
    return Result(ir, level, tuple(timings), tuple(dumps))


def render_timings(timings: Sequence[Timing]) -> str:
    total = sum(t.seconds for t in timings) or 1e-12
    lines = [f"{'pass':<24} {'ms':>10} {'%':>6}"]
    for t in timings:
        lines.append(f"{t.name:<24} {t.seconds * 1e3:>10.3f} {100 * t.seconds / total:>6.1f}")
    return "\n".join(lines) + "\n"


def _verify(ir: Any, level: str, name: str, before: Sequence[str], what: str) -> None:
    if level not in LEVELS:
        raise PassError(name, before, f"no verifier: IR level {level!r} is not registered")
    problems = LEVELS[level].verify(ir)
    if problems:
        listed = "\n  ".join(str(p) for p in problems)
        raise PassError(name, before, f"the {level} IR verifier rejects {what}:\n  {listed}")
