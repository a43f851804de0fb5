"""The `flidec` command line: one function per subcommand, each registered on an argparse subparser.

Consumes argv; produces exit codes (0 fine, 1 a problem in the user's input or surroundings, 2 a usage
error from argparse, 70 an internal error, 130 interrupted) and text: results on stdout, diagnostics on
stderr. Every FlideError or OSError becomes one line, never a traceback; anything else is reported as a bug
in flidec (FLIDEC_TRACEBACK=1 shows its traceback). To add a subcommand, write `add_NAME(subparsers)`
(setting `run`) and list it in COMMANDS.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from flidec.ir.errors import FlideError, SpecError
from flidec.ir.tree import Ask, Node, Text, Tree
from flidec.models import DEMO_MODEL

EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in flidec, as rustc reports its own
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.run(args))
    except FlideError as e:
        print(f"flidec: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nflidec: interrupted; nothing was replaced in the output", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`): not our error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # the surroundings (a full disk, a vanished file), not flidec's logic
        where = f"{e.filename}: " if e.filename else ""
        print(f"flidec: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:
        if os.environ.get("FLIDEC_TRACEBACK"):
            traceback.print_exc()
        message = str(e).splitlines()[0][:300] if str(e) else ""
        print(f"flidec: internal error: {type(e).__name__}: {message}; this is a bug in flidec; please "
              "report it with the command and input (FLIDEC_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_INTERNAL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flidec", description="Compile decision trees for decision models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


# ---- check ----------------------------------------------------------------------------------------------


def add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="parse and verify specs; print every error")
    p.add_argument("specs", nargs="+", metavar="SPEC", help=".flide files")
    p.set_defaults(run=run_check)


def run_check(args: argparse.Namespace) -> int:
    from flidec.frontend import load_spec

    trees, failed = 0, False
    for path in args.specs:
        try:
            spec, _ = load_spec(path)
        except SpecError as e:
            print(e.render(), file=sys.stderr)
            failed = True
            continue
        trees += len(spec.trees)
    if failed:
        return 1
    print(f"ok: {trees} tree{'s' if trees != 1 else ''}")
    return 0


# ---- inspect --------------------------------------------------------------------------------------------


def add_inspect(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a spec's trees, bounds and worst-case token counts, or an "
                       "artifact's manifest, buckets, kernels and padding")
    p.add_argument("spec", metavar="SPEC|ARTIFACT", help="a .flide file or an artifact directory")
    p.set_defaults(run=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    from flidec.frontend import load_spec

    if Path(args.spec).is_dir():
        from flidec.runtime.artifact import load_manifest

        manifest = load_manifest(args.spec, allow_incomplete=True)
        print(inspect_artifact(manifest, _decision_lines(Path(args.spec))))
        print(inspect_saved_states(Path(args.spec), manifest))
        return 0

    try:
        spec, _ = load_spec(args.spec)
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 1
    print("\n\n".join(inspect_tree(t) for t in spec.trees))
    return 0


def inspect_tree(tree: Tree) -> str:
    """A tree as indented lines with each node's bounds, then its worst-case stream tokens per level."""
    from flidec.ir.printer import bound_text, range_text, type_text
    from flidec.ir.verify import (
        ASK_FRAME_TOKENS,
        MAX_TREE_TOKENS,
        OPTION_FRAME_TOKENS,
        ask_tokens,
        level_tokens,
    )

    rows: list[tuple[str, str]] = []

    def part(value: object) -> str:
        if value is None:
            return "none"
        if isinstance(value, str):
            return f"{len(value.encode('utf-8'))} bytes"
        if hasattr(value, "max_tokens"):
            return "bound" + bound_text(value)  # type: ignore[arg-type]
        n = len(getattr(value, "options", getattr(value, "levels", ())))
        return f"{n} listed" if n else "listed"

    def walk(body: tuple[Node, ...], depth: int, level: int) -> None:
        pad = "  " * depth
        for node in body:
            if isinstance(node, Text):
                what = f"bound{bound_text(node.value)}" if not isinstance(node.value, str) else \
                    f"constant, {len(node.value.encode('utf-8'))} bytes"
                rows.append((f"{pad}text {node.name or ''}".rstrip(), what))
            elif isinstance(node, Ask):
                repeat = range_text(node.repeat) if node.repeat else ""
                types = " | ".join(type_text(t, node.criteria) for t in node.types)
                parts = f"instructions {part(node.instructions)}, criteria {part(node.criteria)}"
                rows.append((f"{pad}ask {node.name}{repeat}: {types}",
                             f"{parts}; <= {ask_tokens(node)} tokens"))
            else:
                text = f", text{bound_text(node.text)} each" if node.text else ""
                rows.append((f"{pad}fork {node.name}",
                             f"level {level + 1}: {range_text(node.fanout)} branches{text}"))
                walk(node.body, depth + 1, level + 1)

    s = tree.state
    head = f"tree {tree.name}"
    if tree.wire:
        head += f"  (wire {tree.wire})"
    if tree.buckets:
        head += "  buckets " + ", ".join(str(b) for b in tree.buckets)
    rows.append((f"  state {s.name}",
                 f"level 0: text{bound_text(s.bound)}" + (", resumable" if s.resumable else "")))
    walk(tree.body, 1, 0)
    width = max(len(a) for a, _ in rows) + 2
    lines = [head] + [f"{a:<{width}}{b}" for a, b in rows]
    levels = level_tokens(tree)
    lines.append("  worst-case stream tokens per level:")
    for i, n in enumerate(levels):
        lines.append(f"    level {i}: {n}")
    lines.append(f"    total:   {sum(levels)} (limit {MAX_TREE_TOKENS})")
    lines.append(f"  (upper bounds: a constant string counts as its UTF-8 bytes, which byte-level BPE never "
                 f"exceeds in tokens; each ask adds {ASK_FRAME_TOKENS} tokens of framing and "
                 f"{OPTION_FRAME_TOKENS} per option)")
    return "\n".join(lines)


def inspect_artifact(m: dict, decision: list[str] | None = None) -> str:
    """An artifact's manifest as text: versions and target, hashes, its decision format's lines
    (`decision`, flidec.runtime.decision.describe), buckets with padding, kernels."""
    v = m["versions"]
    lines = [f"artifact for {m['target']}: flidec {v['flidec']}, torch {v['torch']}, triton {v['triton']}"
             + ("" if m["complete"] else f"  INCOMPLETE (no kernels for {', '.join(m['missing_kernels'])})"),
             f"  spec     sha256 {m['spec']['sha256'][:16]}  trees {', '.join(m['spec']['trees'])}",
             f"  weights  sha256 {m['model']['weights_sha256'][:16]}  at {m['model']['weights']}",
             f"  tokenizer sha256 {m['model']['tokenizer_sha256'][:16]}",
             f"  files    {len(m['files'])}",
             *([f"  activations {m['activations']} (GEMM operands bf16; flidec compile --activations)"]
               if "activations" in m else []),
             *(decision or []),
             "  buckets:"]
    for b in m["buckets"]:
        extra = (f"  arena {b['arena_bytes'] / 2**20:.1f} MiB, {b['launches']} launches"
                 if "recording" in b else "")
        lines.append(f"    {b['tree']}/{b['bucket']}: rows {b['rows']}, segments {b['segments']}, "
                     f"depth {b['depth']}, reads {b['reads']}, labels {b['labels']}, "
                     f"padding <= {100 * b['padding']:.1f}%{extra}")
    if m["kernels"]:
        lines.append("  kernels (registers: not recorded by Triton's metadata):")
        for _, k in sorted(m["kernels"].items(), key=lambda kv: (kv[1]["name"], kv[0])):
            lines.append(f"    {k['name']:<24} {k['digest'][:12]}  warps {k['num_warps']}, "
                         f"shared {k['shared']} B")
    return "\n".join(lines)


def _decision_lines(directory: Path) -> list[str] | None:
    """An artifact's decision format as inspect prints it (None: the artifact reads next_token)."""
    from flidec.runtime.decision.load import load_reading

    decision = load_reading(directory)
    return None if decision is None else decision[0].describe()


def inspect_saved_states(directory: Path, m: dict) -> str:
    """Which trees' states save points (runtime/saved) and what a point costs in bytes, in the GPU kernels'
    bf16 and the reference executor's fp32."""
    import json

    from flidec.ir.errors import ArtifactError
    from flidec.ir.serde import spec_from_json
    from flidec.models.config import TextConfig
    from flidec.runtime.artifact import weights_dir
    from flidec.runtime.recording import MODEL_DTYPES
    from flidec.runtime.saved.keys import BLOCK
    from flidec.runtime.saved.point import PointLayout

    spec = spec_from_json(json.loads((directory / "tree.json").read_text(encoding="utf-8")))
    lines = [f"  saved states (a point every {BLOCK} positions of a state's prefix; runtime/saved):"]
    for t in spec.trees:
        how = "resumable: every request saves" if t.state.resumable else "saves for requests with x_session"
        lines.append(f"    {t.name}: state {t.state.name} {how}; every request resumes from its longest "
                     "saved prefix")
    try:
        cfg = TextConfig.from_dir(weights_dir(directory, m, verify_weights=False))
    except (ArtifactError, OSError, ValueError) as e:
        lines.append(f"    bytes per point: unknown (the model config cannot be read: {e})")
        return "\n".join(lines)
    windows = MODEL_DTYPES[m.get("activations", "fp32")]  # a cpu artifact's executor runs fp32 activations
    for name in ("bf16", "fp32"):
        layout = PointLayout.of(cfg, MODEL_DTYPES[name], windows)
        fixed, per = layout.nbytes(0), layout.nbytes(1) - layout.nbytes(0)
        lines.append(f"    a point in {name}: {fixed / 2**20:.2f} MiB (GDN states and conv windows, "
                     f"{layout.gdn_layers} layers) + {per / 1024:.1f} KiB a position (keys and values of "
                     f"{layout.attention_layers} attention layer{'s' * (layout.attention_layers != 1)}, "
                     f"token id); 4,096 positions: {layout.nbytes(4096) / 2**20:.1f} MiB")
    return "\n".join(lines)


# ---- compile --------------------------------------------------------------------------------------------


def add_compile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile a spec and a model into an artifact (no GPU needed)")
    p.add_argument("spec", metavar="SPEC", help=".flide file")
    p.add_argument("--model", default=None, help="model directory or hub id (default: the embedded demo "
                   "model, flidec/models/demo)")
    p.add_argument("--target", required=True, choices=["sm_90", "cpu"], help="sm_90 (H100/H200) or cpu (the "
                   "reference executor)")
    p.add_argument("-o", "--out", required=True, metavar="OUT", help="the artifact directory (new or empty)")
    p.add_argument("--tree", help="compile only this tree")
    p.add_argument("--bundle-weights", action="store_true", help="copy the safetensors into the artifact")
    p.add_argument("--dump-ir", action="append", default=[], metavar="after=PASS",
                   help="print the IR after PASS to stderr (repeatable; a tree or graph pass, or a build "
                   "stage: record_buckets, compile_kernels, write_artifact)")
    p.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                   help="skip PASS (repeatable; only passes that keep their IR level, e.g. dedup_prefixes)")
    p.add_argument("--time-passes", action="store_true", help="print each pass's and build stage's time to "
                   "stderr")
    p.add_argument("--kernel-cache", metavar="DIR", help="reuse compiled kernels from DIR (and add to it)")
    p.add_argument("--activations", choices=["bf16", "fp32"], default="bf16",
                   help="sm_90: the dtype of the residual stream, the projections' results and the Gated "
                   "DeltaNet's inputs and outputs; the GEMMs' operands are bf16 either way. fp32 is the "
                   "closest to the float32 model, at a throughput cost (docs/DESIGN.md E4, BENCHMARKS.md); "
                   "default bf16")
    p.add_argument("--format", metavar="FILE|next_token",
                   help="how the model is asked and read: a flide-template-v1 JSON file (docs/FORMATS.md), "
                   "or next_token (the generic chat reading); default: the checkpoint's decision_config.json "
                   "when it declares flide-template-v1, else the spec's format line")
    p.set_defaults(run=run_compile)


def run_compile(args: argparse.Namespace) -> int:
    from flidec.compile import compile_artifact

    after = []
    for d in args.dump_ir:
        if not d.startswith("after="):
            raise FlideError(f"--dump-ir {d}: expected after=PASS")
        after.append(d[len("after="):])
    try:
        model = args.model or _demo_model()
        report = compile_artifact(args.spec, model, args.target, args.out, tree=args.tree,
                                  bundle_weights=args.bundle_weights, dump_after=after,
                                  disabled=args.disable_pass, time_passes=args.time_passes,
                                  kernel_cache=Path(args.kernel_cache) if args.kernel_cache else None,
                                  activations=args.activations, format=args.format)
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 1
    print(f"{report.out}: {report.buckets} buckets, {report.kernels} kernels ({report.compiled} compiled "
          f"now), {report.bytes / 2**20:.1f} MiB in {report.seconds:.1f} s")
    return 0


# ---- fmt ------------------------------------------------------------------------------------------------


def add_fmt(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fmt", help="rewrite specs in canonical form (comments kept)")
    p.add_argument("specs", nargs="+", metavar="SPEC", help=".flide files")
    p.add_argument("--check", action="store_true",
                   help="change nothing; print a diff and exit 1 if not canonical")
    p.set_defaults(run=run_fmt)


def run_fmt(args: argparse.Namespace) -> int:
    from flidec.frontend import read_spec
    from flidec.frontend.layout import layout_of
    from flidec.ir.printer import print_spec

    status = 0
    for path in args.specs:
        try:
            spec, source = read_spec(path)
        except SpecError as e:
            print(e.render(), file=sys.stderr)
            status = 1
            continue
        canonical = print_spec(spec, layout_of(source, spec))
        if canonical == source:
            continue
        if args.check:
            sys.stdout.write(changed_hunk(source, canonical, f"{path} (as written)", f"{path} (canonical)"))
            status = 1
            continue
        try:
            Path(path).write_text(canonical, encoding="utf-8")
        except OSError as e:
            print(f"flidec: error: cannot rewrite {path}: {e.strerror or e}; check its permissions, or use "
                  "--check", file=sys.stderr)
            status = 1
            continue
        print(f"formatted {path}", file=sys.stderr)
    return status


DIFF_LINES = 40  # lines of each side a `fmt --check` hunk shows
DIFF_WIDTH = 200  # characters of each shown line


def changed_hunk(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> str:
    """One unified-diff hunk from the first line that differs to the last one, found in linear time (the
    common leading and trailing lines are skipped; no alignment in between), each side cut to DIFF_LINES
    lines of at most DIFF_WIDTH characters."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start = max(0, head - context)
    a_end, b_end = len(a) - max(0, tail - context), len(b) - max(0, tail - context)

    def shown(prefix: str, lines: list[str]) -> list[str]:
        out = []
        for line in lines[:DIFF_LINES]:
            text = line.rstrip("\n")
            out.append(prefix + (text if len(text) <= DIFF_WIDTH else text[:DIFF_WIDTH] + "...") + "\n")
        if len(lines) > DIFF_LINES:
            out.append(f"{prefix}... ({len(lines) - DIFF_LINES} more lines)\n")
        return out

    lines = [f"--- {old_name}\n", f"+++ {new_name}\n",
             f"@@ -{start + 1},{a_end - start} +{start + 1},{b_end - start} @@\n"]
    lines += shown(" ", a[start:head]) + shown("-", a[head:len(a) - tail]) + shown("+", b[head:len(b) - tail])
    lines += shown(" ", a[len(a) - tail:a_end])
    return "".join(lines)


# ---- run ------------------------------------------------------------------------------------------------


def add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="answer instances with an artifact, or a spec with the reference executor")
    p.add_argument("spec", metavar="SPEC", help=".flide file, or an artifact directory (flidec compile -o)")
    p.add_argument("--model", help="model directory or hub id, for a .flide spec (default: the embedded demo "
                   "model; an artifact brings its own)")
    p.add_argument("--instances", required=True, metavar="I.jsonl[.gz]", help="one instance per line")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="writes DIR/results.jsonl and DIR/summary.json")
    p.add_argument("--tree", help="the tree to run (needed when the spec has several)")
    p.add_argument("--device", default="cpu", type=device_name, help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], help="weights and activations (default fp32; a cuda "
                   "artifact: its kernels' own, and another is refused)")
    p.add_argument("--trust-weights", action="store_true", help="an artifact: skip hashing its weights at "
                   "load (a trusted in-place swap of same-sized weights; sizes and config are still checked)")
    p.add_argument("--served-name", help="the model name System One responses report (default: the model "
                   "directory's name)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--format", metavar="FILE|next_token",
                   help="a .flide spec: how the model is read, as flidec compile --format (default: the "
                   "checkpoint's decision_config.json, else the spec's format)")
    g = p.add_argument_group("saved states (an artifact; docs/SAVED_STATES.md)")
    g.add_argument("--checkpoints", metavar="DIR", help="also write every saved point to DIR, and resume "
                   "from the points earlier runs wrote there")
    g.add_argument("--no-saved-states", action="store_true", help="compute every state whole")
    g.add_argument("--saved-gpu-gib", type=float, default=4.0, metavar="GIB",
                   help="GPU memory for saved points (default 4)")
    g.add_argument("--saved-host-gib", type=float, default=8.0, metavar="GIB",
                   help="host memory for saved points (default 8)")
    p.set_defaults(run=run_run)


def device_name(text: str) -> str:
    """--device's value: cpu, cuda or cuda:N (argparse turns the error into a usage line)."""
    if re.fullmatch(r"cpu|cuda(:\d+)?", text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device flidec runs on: use cpu, cuda or cuda:N")
    return text


def run_run(args: argparse.Namespace) -> int:
    from flidec.run import SavedOptions, run

    model = args.model or (None if Path(args.spec).is_dir() else _demo_model())  # an artifact brings its own
    saved = SavedOptions(not args.no_saved_states, args.checkpoints, args.saved_gpu_gib, args.saved_host_gib)
    summary = run(args.spec, model, args.instances, args.out, tree=args.tree, device=args.device,
                  dtype=args.dtype, served_name=args.served_name,
                  progress=not args.quiet, trust_weights=args.trust_weights, saved=saved, format=args.format)
    print(f"{summary.answered} answered, {summary.failed} failed, {summary.questions} questions in "
          f"{summary.wall_s:.1f} s ({summary.questions_per_s:.1f} questions/s); results in "
          f"{Path(args.out) / 'results.jsonl'}")
    if summary.saved_states is not None and (summary.saved_states["hits"] or summary.saved_states["saved"]):
        s = summary.saved_states
        print(f"saved states: {s['hits']} resumed ({s['tokens_reused']} positions reused), {s['saved']} saved"
              + (f", {sum(s['refused'].values())} checkpoints refused" if s["refused"] else ""))
    return 0


def _demo_model() -> str:
    """The default --model, said on stderr: a spec's errors then read as the demo model's limits (such as its
    47 single-token labels), not as the spec's."""
    print(f"flidec: no --model: using the embedded demo model ({DEMO_MODEL}; its MODEL_CARD.md says what it "
          "knows)", file=sys.stderr)
    return str(DEMO_MODEL)


# ---- serve ----------------------------------------------------------------------------------------------


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="answer an artifact over HTTP: System One, Decisions and every tree "
                       "(docs/SERVE.md)")
    p.add_argument("artifact", metavar="ARTIFACT", help="an artifact directory (flidec compile -o)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key", action="append", default=[], metavar="KEY",
                      help="accept this Bearer key (repeatable); without keys any request is answered")
    keys.add_argument("--api-key-file", action="append", default=[], metavar="F",
                      help="accept the keys in F, one a line (repeatable)")
    p.add_argument("--served-name", help="the model name responses report and requests may ask for "
                   "(default: the model directory's name); jev-latest and jev-preview are accepted too")
    p.add_argument("--checkpoints", metavar="DIR", help="saved states: also write every saved point to DIR, "
                   "and resume from the points earlier processes wrote there")
    p.add_argument("--device", type=device_name, help="cuda, cuda:N or cpu (default: cuda if there is one)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], help="cpu: the reference executor's dtype (default "
                   "fp32); cuda: must be the artifact's own")
    p.add_argument("--trust-weights", action="store_true", help="skip hashing the weights at load")
    p.add_argument("--max-queue", type=int, default=1024, metavar="N",
                   help="requests waiting for a run; past it 429 with Retry-After (default 1024)")
    p.add_argument("--max-batch", type=int, default=256, metavar="N", help="requests a run (default 256; a "
                   "run also ends at two of the largest bucket's rows)")
    p.add_argument("--deadline", type=float, default=60.0, metavar="S",
                   help="seconds from a request's arrival to its answer; past it 503 (default 60)")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, metavar="B",
                   help="request body limit, sent and decoded; past it 413 (default 8 MiB)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch threads (default torch's); on a CPU shared with other work, 1")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--replicas", type=int, metavar="N", help="N replicas on Ray Serve behind this endpoint, "
                   "one GPU each (cpu: a process each), routed by saved state; the `replicas` extra")
    p.add_argument("--ray-address", metavar="ADDR", help="with --replicas: an existing Ray cluster (default: "
                   "a local one on 127.0.0.1)")
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import torch

    from flidec.runtime.http.main import ServeOptions, serve

    if not Path(args.artifact).is_dir():
        raise FlideError(f"{args.artifact}: not an artifact directory (flidec compile -o DIR makes one)")
    for name in ("max_queue", "max_batch", "max_body_bytes", "threads", "replicas"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise FlideError(f"--{name.replace('_', '-')} {value}: it must be at least 1")
    if not args.deadline > 0:
        raise FlideError(f"--deadline {args.deadline}: it must be a positive number of seconds")
    if args.ray_address and args.replicas is None:
        raise FlideError("--ray-address needs --replicas N")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    options = ServeOptions(Path(args.artifact), host=args.host, port=args.port, api_keys=tuple(args.api_key),
                           api_key_files=tuple(args.api_key_file), served_name=args.served_name,
                           checkpoints=args.checkpoints, device=device, dtype=args.dtype,
                           trust_weights=args.trust_weights, max_queue=args.max_queue,
                           max_batch=args.max_batch, deadline_s=args.deadline,
                           max_body_bytes=args.max_body_bytes, threads=args.threads, log_level=args.log_level)
    if args.replicas is None:
        serve(options)
        return 0
    try:
        from flidec.runtime.replicas.service import serve_replicas
    except ImportError as e:
        raise FlideError(f"--replicas needs Ray Serve: pip install 'flidec[replicas]' ({e})") from None
    serve_replicas(options, args.replicas, args.ray_address)
    return 0


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [add_check, add_inspect, add_fmt, add_run,
                                                                  add_compile, add_serve]

if __name__ == "__main__":
    sys.exit(main())
