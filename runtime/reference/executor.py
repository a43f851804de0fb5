"""The reference executor: runs a model graph on a stream with plain-torch fork ops, on any device.

Consumes a torch.fx GraphModule traced from a model definition whose fork-aware ops (fork_attention,
fork_gdn, fork_conv, label_logits, and the batch-invariant linear and norms) are leaf calls, and a Stream
from the binder. It runs the graph node by node (torch.fx.Interpreter), calling for each leaf op the
implementation registered under its name: by default runtime/reference/ops.py, the oracle every generated
kernel is checked against; tests swap single ops for kernels through `overrides`. It produces the label
logits of every read, [R, Lmax] float32 (padding labels -inf).

`run_saving` also runs streams with stored segments (StreamMeta.stored: positions a saved point holds) and
captures new saved points: the graph runs on the computed rows only, and each fork op gets its layer's
saved keys, values, conv window and GDN state appended to what the computed rows give it (the i-th call of
an op is the i-th layer of its kind: the graph calls them in layer order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.fx

from flidec.runtime.meta import CONV_TAPS, Stream, StreamMeta
from flidec.runtime.reference.ops import path_rows

FORK_OPS = ("fork_attention", "fork_conv", "fork_gdn")


@dataclass
class Captured:
    """A saved point in the making: the tensors of the first `length` positions of a segment's path (keys
    and values from position `start` on: an engine leaves out what the point it resumed from holds)."""

    segment: int
    length: int
    start: int = 0
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    states: list[torch.Tensor] = field(default_factory=list)
    windows: list[torch.Tensor] = field(default_factory=list)


@dataclass
class _Run:
    meta: StreamMeta  # the whole stream's meta: what the fork ops read
    held: Sequence  # per stored segment (meta.stored order): its saved point
    captures: list[Captured]
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FORK_OPS, 0))


class ReferenceExecutor(torch.fx.Interpreter):
    def __init__(self, graph: torch.fx.GraphModule, overrides: Mapping[str, Callable] | None = None):
        super().__init__(graph)
        self.overrides = dict(overrides or {})
        self._run: _Run | None = None

    def call_function(self, target, args, kwargs):
        name = getattr(target, "__name__", "")
        impl = self.overrides.get(name) or target
        if self._run is not None and name in FORK_OPS:
            return getattr(self, f"_{name}")(impl, self._run, args, kwargs)
        return impl(*args, **kwargs)

    @torch.inference_mode()
    def run_stream(self, stream: Stream, device: torch.device | str = "cpu") -> torch.Tensor:
        tokens = stream.tokens.to(device)
        meta = stream.meta.to(device)
        return self.run(tokens, meta)

    @torch.inference_mode()
    def run_saving(self, stream: Stream, device: torch.device | str, held: Sequence,
                   capture: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, list[Captured]]:
        """The stream's label logits, its stored segments' positions read from `held` (one saved point per
        stored segment, in meta.stored order) instead of computed, and per `capture` entry (segment,
        length) the tensors of the first `length` positions of that segment's path (a multiple of CHUNK at
        or before the segment's end, past its stored ancestor's)."""
        meta = stream.meta.to(device)
        assert len(held) == len(meta.stored)
        live = meta.live_rows
        rows = replace(meta, positions=meta.positions[:live], segment_ids=meta.segment_ids[:live],
                       conv_prev=meta.conv_prev[:live])  # what the row-wise ops see: the computed rows
        self._run = _Run(meta, held, [Captured(s, n) for s, n in capture])
        try:
            logits = self.run(stream.tokens[:live].to(device), rows)
        finally:
            run, self._run = self._run, None
        return logits, run.captures

    # -- the fork ops of a run with stored segments or captures ---------------------------------------------

    def _fork_attention(self, impl, run: _Run, args, kwargs):
        q, k, v, _meta, *rest = args
        i = run.calls["fork_attention"]
        run.calls["fork_attention"] += 1
        held = [p.layer(i) for p in run.held]  # each point's layer i, joined once
        k = torch.cat([k, *(hk.to(k.device) for hk, _ in held)])
        v = torch.cat([v, *(hv.to(v.device) for _, hv in held)])
        for c in run.captures:
            rows = path_rows(run.meta, c.segment)[: c.length].to(k.device)
            c.keys.append(k[rows].clone())
            c.values.append(v[rows].clone())
        return impl(q, k, v, run.meta, *rest, **kwargs)

    def _fork_conv(self, impl, run: _Run, args, kwargs):
        x, weight, _meta, *rest = args
        i = run.calls["fork_conv"]
        run.calls["fork_conv"] += 1
        live, meta = x.shape[0], run.meta
        for c in run.captures:
            rows = path_rows(meta, c.segment)[c.length - (CONV_TAPS - 1) : c.length].to(x.device)
            assert bool((rows < live).all()), "a captured conv window lies in computed rows"
            c.windows.append(x[rows].clone())
        if not run.held:
            return impl(x, weight, replace(meta, conv_prev=meta.conv_prev[:live]), *rest, **kwargs)
        # each stored segment's rows are read only through its window (its last CONV_TAPS - 1 rows): they
        # come after the computed rows, a window each, in meta.stored order
        before = meta.conv_prev[:live]
        prev, n = before.clone(), CONV_TAPS - 1
        for j, s in enumerate(meta.stored):  # masks from the original rows: a moved row may land in another
            seg = meta.segments[s]
            last = seg.start + seg.length
            inside = (before >= seg.start) & (before < last)
            assert bool((before[inside] >= last - n).all()), "a row reads a stored row past its window"
            prev = torch.where(inside, before - (last - n) + live + j * n, prev)
        x = torch.cat([x, *(p.windows[i].to(x.device) for p in run.held)])
        prev = torch.cat([prev, prev.new_full((n * len(run.held), n), -1)])
        return impl(x, weight, replace(meta, conv_prev=prev), *rest, **kwargs)[:live]

    def _fork_gdn(self, impl, run: _Run, args, kwargs):
        q, k, v, g, beta, _meta = args
        i = run.calls["fork_gdn"]
        run.calls["fork_gdn"] += 1
        start = {s: p.states[i].to(q.device) for s, p in zip(run.meta.stored, run.held, strict=True)}
        got: dict[tuple[int, int], torch.Tensor] = {(c.segment, c.length): None for c in run.captures}
        out = impl(q, k, v, g, beta, run.meta, start=start, capture=got, **kwargs)
        for c in run.captures:
            c.states.append(got[(c.segment, c.length)].clone())
        return out
