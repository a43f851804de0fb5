"""Recordings: a bucket's launch sequence, planned once at compile time, replayed with no tracing or tuning.

Consumes the lowered, fused model graph (passes lower_forks .. fuse_pointwise) and a Bucket; produces a
Recording (runtime/recording.py: the format and its writer): the buffers (weights by name, constant tables
with their values, and one arena at byte offsets for the meta buffers, derived tables and activations, reused
once dead) and the steps in order, each a kernel with its grid and arguments. Shapes come from running the
graph on meta-device tensors (a view is an argument, never a copy). Each op has an emitter registered against
its op table entry; a step with none is recorded as missing, which `flidec compile` refuses. `play` runs a
recording eagerly on a bound stream (the interpreter on the CPU), its meta filled by runtime/tables.py.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from flidec.codegen import attention, conv, gdn, gemm, pointwise, saved_rows
from flidec.codegen.gdn_out import gdn_out_kernel
from flidec.codegen.gdn_prep import gdn_prep_kernel
from flidec.codegen.gdn_walk import gdn_state_kernel
from flidec.codegen.pointwise import KernelCall
from flidec.ir.program import Bucket
from flidec.passes import graph
from flidec.runtime import tables
from flidec.runtime.meta import CHUNK, StreamMeta
from flidec.runtime.recording import DTYPE_NAMES, Arg, Buffer, KernelSpec, Recording, Step
from flidec.runtime.reference import op_table, ops
from flidec.runtime.reference.op_table import BY_FN as OPS_BY_FN
from flidec.runtime.reference.op_table import Op, meta_like
from flidec.runtime.tables import FillRequest, fill_meta

ALIGN = 256  # byte alignment of every arena buffer (the kernels assume 16)
VIEW_OPS = {"getitem", "reshape", "view", "float", "contiguous"}
SAVED_ROWS_OP = "saved_rows"  # the op of the steps restoring and capturing saved points (saved_rows.py)


# ---- emitters ---------------------------------------------------------------------------------------------


@dataclass
class EmitContext:
    """What an emitter may ask for besides its operands: derived meta tables (filled by the binder by the
    named rule) and the bucket."""

    bucket: Bucket
    derived: dict[str, tuple[tuple[int, ...], torch.dtype, str]] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    scratches: dict[str, torch.Tensor] = field(default_factory=dict)
    staging: dict[str, torch.Tensor] = field(default_factory=dict)
    ordinals: dict[str, int] = field(default_factory=dict)

    def ordinal(self, kind: str) -> int:
        """This op's index among the ops of its kind emitted so far: its layer among the layers of its kind
        (the graph calls them in layer order, as the reference executor counts them)."""
        n = self.ordinals.get(kind, 0)
        self.ordinals[kind] = n + 1
        return n

    def saved(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A saved-point staging buffer (region "saved"): outside the arena, the engine's, shared by every
        recording of the artifact by name (codegen/saved_rows.py)."""
        t = self.staging.setdefault(name, torch.empty(shape, dtype=dtype, device="meta"))
        return self._same(t, name, shape, dtype)

    def table(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, fill: str) -> torch.Tensor:
        if name not in self.tensors:
            self.derived[name] = (shape, dtype, fill)
            self.tensors[name] = torch.empty(shape, dtype=dtype, device="meta")
        return self._same(self.tensors[name], name, shape, dtype)

    def scratch(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A buffer the kernels write before they read it, shared by every step that asks for `name`: an
        activation live from its first to its last step, never filled by the binder."""
        t = self.scratches.setdefault(name, torch.empty(shape, dtype=dtype, device="meta"))
        return self._same(t, name, shape, dtype)

    @staticmethod
    def _same(t: torch.Tensor, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            raise ValueError(f"buffer {name} asked for as {tuple(shape)} {dtype}, already "
                             f"{tuple(t.shape)} {t.dtype}")
        return t


# op table entry -> fn(ctx, out, *node args) -> KernelCalls; `out` is the node's (meta) output, or tuple of
# outputs
Emitter = Callable[..., list[KernelCall]]
EMITTERS: dict[Op, Emitter] = {}
JIT_KERNELS: dict[str, Any] = {}  # kernel name -> @triton.jit function, for playing and AOT compiling


def register_emitter(target: Callable[..., Any], fn: Emitter, kernels: tuple[Any, ...]) -> None:
    """`fn` emits the launches of the op table's entry for `target` (the function graph nodes call);
    `kernels` are the @triton.jit functions it may launch."""
    op = OPS_BY_FN.get(target)
    if op is None:
        raise ValueError(f"register_emitter: {getattr(target, '__name__', target)} has no entry in "
                         "runtime/reference/op_table.py OPS; declare the op there first")
    EMITTERS[op] = fn
    for k in kernels:
        JIT_KERNELS[k.__name__] = k


def _live_rows(ctx: EmitContext, x: torch.Tensor) -> torch.Tensor:
    """The GEMMs' rows pointer (codegen/gemm.py ROWS): how many of x's rows are the stream's, which the binder
    writes, so a projection computes the stream's rows or reads, not the bucket's. x has the bucket's rows or,
    past trim_reads, its reads; when the two counts are equal the bound covers both."""
    b = ctx.bucket
    stream, reads = int(x.shape[0] == b.rows), int(x.shape[0] == b.reads)
    if not stream | reads:
        raise ValueError(f"a projection over {x.shape[0]} rows: neither the bucket's {b.rows} rows nor its "
                         f"{b.reads} reads")
    name = {(1, 0): "stream_rows", (0, 1): "read_count", (1, 1): "stream_rows_or_reads"}[stream, reads]
    return ctx.table(name, (1,), torch.int32, f"live_rows(stream={stream},reads={reads})")


def _gemm(ctx: EmitContext, out: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
          dtype: torch.dtype | None = None) -> list[KernelCall]:
    spec = gemm.gemm_spec(x, w, out)
    t = spec.tiles
    return [KernelCall(spec.kernel(), spec.grid(x.shape[0]), (x, w, out, _live_rows(ctx, x)),
                       spec.signature(), spec.constexprs(), t.num_warps, t.num_stages)]


def _gemm_group(ctx: EmitContext, outs: tuple[torch.Tensor, ...], x: torch.Tensor,
                weights: tuple[torch.Tensor, ...], dtype: torch.dtype | None = None) -> list[KernelCall]:
    spec = gemm.gemm_group_spec(x, weights, outs)
    t = spec.tiles
    return [KernelCall(spec.kernel(), spec.grid(x.shape[0]),
                       spec.args(x, weights, outs, _live_rows(ctx, x)), spec.signature(), spec.constexprs(),
                       t.num_warps, t.num_stages)]


def _gemm_silu_mul(ctx: EmitContext, out: torch.Tensor, x: torch.Tensor, w_gate: torch.Tensor,
                   w_up: torch.Tensor, dtype: torch.dtype | None = None) -> list[KernelCall]:
    spec = gemm.silu_mul_spec(x, w_gate, w_up, out, dtype)
    t = spec.tiles
    return [KernelCall(spec.kernel(silu_mul=True), spec.grid(x.shape[0]),
                       (x, w_gate, w_up, out, _live_rows(ctx, x)), spec.signature(gemm.SILU_MUL_POINTERS),
                       spec.constexprs(), t.num_warps, t.num_stages)]


def _saved_copies(ctx: EmitContext, kind: str, i: int, parts: dict[str, torch.Tensor], rows: tuple[str, str],
                  staged_rows: int) -> list[KernelCall]:
    """Restore the stream's stored roots into each arena part ([rows, D] views) from its staging, then
    capture its saved points out of it (codegen/saved_rows.py); `rows` names the two maps' fill rules."""
    restore = ctx.table(rows[0], (staged_rows,), torch.int32, rows[0])
    capture = ctx.table(rows[1], (staged_rows,), torch.int32, rows[1])
    calls = []
    for part, x in parts.items():
        staged = ctx.saved(f"saved.{kind}.{i}.{part}", (staged_rows, x.shape[1]), x.dtype)
        calls.append(saved_rows.emit_copy_rows(staged, x, restore, scatter=True))
    for part, x in parts.items():
        staged = ctx.saved(f"capture.{kind}.{i}.{part}", (staged_rows, x.shape[1]), x.dtype)
        calls.append(saved_rows.emit_copy_rows(x, staged, capture, scatter=False))
    return calls


def _flat(t: torch.Tensor) -> torch.Tensor:
    """[rows, ...] as [rows, D] rows, a view (ValueError when it is not one)."""
    flat = t.flatten(1) if t.dim() > 2 else t
    if flat.dim() != 2 or (flat is not t and flat._base is None) or flat.stride(1) != 1:
        raise ValueError(f"saved points copy rows of {tuple(t.shape)} with strides {t.stride()}: not rows")
    return flat


def _attention(ctx: EmitContext, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               gate: torch.Tensor, segments: torch.Tensor) -> list[KernelCall]:
    b = ctx.bucket
    o = out.view(q.shape)
    depth = tables.path_table_depth(b)
    spec = attention.attention_spec(q, k, v, gate, o, depth)
    bm = spec.tiles.block_m
    tiles = ctx.table(f"query_tiles_{bm}", (tables.max_query_tiles(b.rows, b.segments, bm), 4), torch.int32,
                      f"query_tiles(block_m={bm})")
    levels = ctx.table("path_levels", (b.segments, depth, 2), torch.int32, "path_levels")
    t = spec.tiles
    sig = spec.signature()
    copies = _saved_copies(ctx, "attention", ctx.ordinal("attention"), {"keys": _flat(k), "values": _flat(v)},
                           ("stored_rows", "capture_rows"), b.rows)
    return copies + [KernelCall(attention.fork_attention_kernel, spec.grid(tiles.shape[0]),
                                (q, k, v, gate, o, tiles, levels, spec.head_dim ** -0.5), sig,
                                spec.constexprs(), t.num_warps, t.num_stages)]


def _conv(ctx: EmitContext, out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, conv_prev: torch.Tensor,
          dtype: torch.dtype | None = None) -> list[KernelCall]:
    spec = conv.conv_spec(x, w, out)
    taps = ctx.table("conv_taps", (ctx.bucket.rows, conv.CONV_TAPS), torch.int32, "conv_taps")
    t = spec.tiles
    copies = _saved_copies(ctx, "gdn", ctx.ordinal("conv"), {"window": _flat(x)},
                           ("stored_windows", "capture_windows"), tables.MAX_SAVED * (conv.CONV_TAPS - 1))
    return copies + [KernelCall(conv.fork_conv_kernel, spec.grid(taps.shape[0]),
                                (x, w, out, taps, _live_rows(ctx, x)), spec.signature(), spec.constexprs(),
                                t.num_warps, t.num_stages)]


def _gdn(ctx: EmitContext, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         g: torch.Tensor, beta: torch.Tensor, segments: torch.Tensor) -> list[KernelCall]:
    return _gdn_calls(ctx, out, q, k, v, g, beta, None, None)


def _gdn_gated(ctx: EmitContext, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
               segments: torch.Tensor) -> list[KernelCall]:
    return _gdn_calls(ctx, out, q, k, v, a, b, a_log, dt_bias)


def _gdn_normed(ctx: EmitContext, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, z: torch.Tensor,
                weight: torch.Tensor, eps: float, dtype: torch.dtype | None, segments: torch.Tensor
                ) -> list[KernelCall]:
    return _gdn_calls(ctx, out, q, k, v, a, b, a_log, dt_bias, (z, weight, eps))


def _gdn_calls(ctx: EmitContext, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               g: torch.Tensor, beta: torch.Tensor, a_log: torch.Tensor | None, dt_bias: torch.Tensor | None,
               norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> list[KernelCall]:
    """The layer's launches (gdn.GdnSpec.calls): the prep over `tables.max_chunks(rows, segments)` chunk
    slots, one state walk per tree level (bucket.depth), each over `per_level = bucket.segments` work items
    (the Bucket bounds only the total segment count, and one level may hold all of them: packed roots), then
    the outputs of every chunk slot (with `norm` = (z, weight, eps), normed by the gated RMS norm). The chunk
    work and the state slots (one per bucket segment, tables.state_slots numbers them) are scratch shared by
    every GDN layer: a layer's prep writes every chunk slot its walks read, each walk writes a slot at a
    level before any deeper level reads it, and the outputs read only what this layer's prep and walks
    wrote."""
    b = ctx.bucket
    fused = a_log is not None  # g and beta are the raw projections a and b: the prep computes the gates
    spec = gdn.gdn_spec(q, k, v, g, beta, out, fused, *(norm[:2] if norm else (None, None)), a_log)
    per_level, chunks = b.segments, tables.max_chunks(b.rows, b.segments)
    capacity = f"per_level={per_level},slots={b.segments},chunks={chunks}"
    items = ctx.table("gdn_items", (b.depth * per_level, len(tables.ITEM_FIELDS)), torch.int32,
                      f"gdn_items({capacity})")
    tails = ctx.table("gdn_tails", (b.depth * per_level, CHUNK), torch.int32, f"gdn_tails({capacity})")
    chunk_table = ctx.table("gdn_chunks", (chunks, 2), torch.int32, f"gdn_chunks({capacity})")
    slots = ctx.scratch("gdn_state_slots", (b.segments, spec.num_v_heads, spec.key_dim, spec.value_dim),
                        torch.float32)
    shapes = gdn.ChunkWork.shapes(chunks, spec.num_v_heads, spec.key_dim, spec.value_dim, spec.split)
    dtypes = gdn.ChunkWork.dtypes(spec.split)
    work = gdn.ChunkWork(*(ctx.scratch(f"gdn_chunk_{part.removesuffix('_ptr')}", shape, dtype)
                           for part, shape, dtype in zip(gdn.ChunkWork.PARTS, shapes, dtypes, strict=True)))
    if not fused:  # the unfused prep never reads a_log_ptr / dt_bias_ptr: g fills their (typed) slots
        a_log = dt_bias = g
    # a stored root's state goes into its slot before the first walk; a saved point's is the state entering
    # the chunk that starts at its end, which the walks write into the chunk states
    i, per = ctx.ordinal("gdn"), spec.num_v_heads * spec.key_dim
    rows = (tables.MAX_SAVED * per,)
    restore = ctx.table("stored_states", rows, torch.int32, f"stored_states(per={per})")
    capture = ctx.table("capture_states", rows, torch.int32, f"capture_states(per={per},{capacity})")
    staged = ctx.saved(f"saved.gdn.{i}.state", (rows[0], spec.value_dim), torch.float32)
    captured = ctx.saved(f"capture.gdn.{i}.state", (rows[0], spec.value_dim), torch.float32)
    states = work.states.view(-1, spec.value_dim)
    calls = [saved_rows.emit_copy_rows(staged, slots.view(-1, spec.value_dim), restore, scatter=True)]
    calls += [KernelCall(c.kernel, c.grid, c.args, c.signature, c.constexprs, c.num_warps, c.num_stages)
              for c in spec.calls(chunks, b.depth, per_level, q, k, v, g, beta, a_log, dt_bias, items, tails,
                                  chunk_table, work, out, slots, *(norm or ()))]
    return calls + [saved_rows.emit_copy_rows(states, captured, capture, scatter=False)]


def _pw(fn: Callable[..., KernelCall]) -> Emitter:
    """A row-wise op's emitter: `fn(out, *operands, rows=...)` with the live rows of out's tokens (its first
    dim: the bucket's rows or reads; add_rms_norm's out is the pair of its outputs)."""
    def emit(ctx: EmitContext, out: Any, *args: Any, **kwargs: Any) -> list[KernelCall]:
        return [fn(out, *args, rows=_live_rows(ctx, out[0] if isinstance(out, tuple) else out), **kwargs)]
    return emit


register_emitter(ops.linear, _gemm, (gemm.gemm_kernel, gemm.gemm_tma_kernel))
register_emitter(op_table.linear_group, _gemm_group, (gemm.gemm_group_kernel, gemm.gemm_group_tma_kernel))
register_emitter(op_table.linear_silu_mul, _gemm_silu_mul,
                 (gemm.gemm_silu_mul_kernel, gemm.gemm_silu_mul_tma_kernel))
register_emitter(op_table.fork_conv_static, _conv, (conv.fork_conv_kernel, saved_rows.copy_rows_kernel))
register_emitter(op_table.fork_gdn_static, _gdn, (gdn_prep_kernel, gdn_state_kernel, gdn_out_kernel))
register_emitter(op_table.fork_gdn_gated, _gdn_gated, ())
register_emitter(op_table.fork_gdn_normed, _gdn_normed, ())
register_emitter(op_table.fork_attention_gated, _attention, (attention.fork_attention_kernel,))
register_emitter(ops.rms_norm,
                 _pw(lambda out, x, w, eps, dtype=None, rows=None:
                     pointwise.emit_rms_norm(x, w, out, eps, rows)),
                 (pointwise.rms_norm_kernel,))
register_emitter(op_table.rms_norm_f32, EMITTERS[OPS_BY_FN[ops.rms_norm]], ())
register_emitter(op_table.add_rms_norm,
                 _pw(lambda out, x, y, w, eps, dtype=None, rows=None:
                     pointwise.emit_add_rms_norm(x, y, w, *out, eps, rows)),
                 (pointwise.add_rms_norm_kernel,))
register_emitter(ops.gated_rms_norm,
                 _pw(lambda out, x, z, w, eps, dtype=None, rows=None:
                     pointwise.emit_gated_rms_norm(x, z, w, out, eps, rows)),
                 (pointwise.gated_rms_norm_kernel,))
register_emitter(ops.rotary,
                 _pw(lambda out, x, pos, inv, rows: pointwise.emit_rotary(x, pos, inv, out, rows)),
                 (pointwise.rotary_kernel,))
register_emitter(operator.add,
                 _pw(lambda out, a, b, rows: pointwise.emit_binary(pointwise.ADD, a, b, out, rows)),
                 (pointwise.binary_kernel,))
register_emitter(op_table.silu_mul,
                 _pw(lambda out, a, b, dtype=None, rows=None:
                     pointwise.emit_binary(pointwise.SILU_MUL, a, b, out, rows)), ())
register_emitter(ops.embed,
                 _pw(lambda out, idx, w, dtype=None, rows=None:
                     pointwise.emit_gather_rows(w, idx, out, rows)),
                 (pointwise.gather_rows_kernel,))
register_emitter(op_table.gather_rows,
                 _pw(lambda out, x, idx, rows: pointwise.emit_gather_rows(x, idx, out, rows)), ())
register_emitter(ops.gdn_decay,
                 _pw(lambda out, a, a_log, dt, rows: pointwise.emit_gdn_gate(a, out, a_log, dt, rows)),
                 (pointwise.gdn_gate_kernel,))
register_emitter(ops.gdn_beta, _pw(lambda out, b, rows: pointwise.emit_gdn_gate(b, out, rows=rows)), ())
register_emitter(op_table.label_head,
                 lambda ctx, out, h, w, lab, n: [pointwise.emit_label_head(h, w, lab, n, out)],
                 (pointwise.label_head_kernel,))  # one program per read and label block: no rows pointer


# ---- shapes: the graph on meta tensors ---------------------------------------------------------------------


class _MetaRun(torch.fx.Interpreter):
    """Runs the graph on meta tensors, noting each node's output and where parameters come from."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.params: dict[int, str] = {}  # id(meta tensor) -> parameter name
        self.constants: dict[str, torch.Tensor] = {}

    def get_attr(self, target, args, kwargs):
        real = super().get_attr(target, args, kwargs)
        t = meta_like(real)
        self.params[id(t)] = target
        if target not in dict(self.module.named_parameters()):
            self.constants[target] = real.detach().float()  # a computed buffer (inv_freq): a constant table
        return t

    def call_function(self, target, args, kwargs):
        op = OPS_BY_FN.get(target)
        if op is not None and op.outputs is not None:
            return op.outputs(*args, **kwargs)
        return target(*args, **kwargs)


def _is_view(value: Any, source: Any) -> bool:
    """A table lookup, a tuple element, or a tensor aliasing its source's storage: no launch needed."""
    if isinstance(source, (dict, tuple)) or value is source:
        return True
    return isinstance(value, torch.Tensor) and value._base is not None


def record(gm: torch.fx.GraphModule, bucket: Bucket) -> Recording:
    """The recording of a lowered (and fused) graph for `bucket`: its launches, buffers and arena."""
    if not graph.is_lowered(gm):
        raise ValueError("record needs a lowered graph (run lower_forks first)")
    inputs = {b.name: torch.empty(b.shape, dtype=b.dtype, device="meta") for b in tables.meta_buffers(bucket)}
    runner = _MetaRun(gm)
    env: dict[torch.fx.Node, Any] = {}
    ctx = EmitContext(bucket)
    calls: list[tuple[torch.fx.Node, str, list[KernelCall] | None]] = []
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = inputs
                continue
            if node.op == "output":
                output = env[node.args[0]]
                continue
            args = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
            env[node] = getattr(runner, node.op)(node.target, args, kwargs)
            name = graph.op_name(node)
            if node.op == "get_attr" or (name in VIEW_OPS and _is_view(env[node], args[0])):
                continue
            op = OPS_BY_FN.get(node.target) if node.op == "call_function" else None
            emit = EMITTERS.get(op) if op is not None else None
            calls.append((node, name, emit(ctx, env[node], *args, **kwargs) if emit else None))
    return _assemble(gm, bucket, env, runner, ctx, inputs, calls, output)


def _assemble(gm, bucket, env, runner, ctx, inputs, calls, output) -> Recording:
    """The recording of the noted calls: buffers named and placed in the arena, steps, kernels, constants."""
    roots: dict[int, str] = {}  # id(root tensor) -> buffer name
    buffers: dict[str, Buffer] = {}

    def add(name: str, t: torch.Tensor, region: str, fill: str = "") -> None:
        roots[id(t)] = name
        buffers[name] = Buffer(name, region, DTYPE_NAMES[t.dtype], tuple(t.shape), fill=fill)

    for name, t in inputs.items():
        add(name, t, "meta", name)
    for name, (_shape, _dtype, fill) in ctx.derived.items():
        add(name, ctx.tensors[name], "meta", fill)
    for name, t in ctx.scratches.items():
        add(name, t, "activation")
    for name, t in ctx.staging.items():
        add(name, t, "saved")
    for node in gm.graph.nodes:
        value = env.get(node)
        if node.op == "get_attr":
            add(node.target, value, "constant" if node.target in runner.constants else "weight")
        elif isinstance(value, torch.Tensor) and value._base is None and id(value) not in roots:
            add(node.name, value, "activation")
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                if isinstance(v, torch.Tensor) and v._base is None and id(v) not in roots:
                    add(f"{node.name}.{i}", v, "activation")

    def arg(t: Any) -> Arg:
        if isinstance(t, torch.Tensor):
            root = t._base if t._base is not None else t
            return Arg(buffer=roots[id(root)], offset=t.storage_offset(), shape=tuple(t.shape),
                       strides=tuple(t.stride()))
        return Arg(scalar="fp32" if isinstance(t, float) else "i32", value=t)

    steps, kernels = [], {}
    for node, name, kcalls in calls:
        if kcalls is None:
            operands = [a for a in torch.fx.node.map_arg(node.args, lambda n: env[n])
                        if isinstance(a, torch.Tensor)]
            outs = env[node] if isinstance(env[node], tuple) else (env[node],)
            steps.append(Step(node.name, name, args=tuple(arg(t) for t in (*operands, *outs)),
                              outputs=len(outs)))
            continue
        for c in kcalls:
            spec = KernelSpec(c.name, tuple(c.signature.items()), tuple(c.constexprs.items()), c.num_warps,
                              c.num_stages)
            kernels[spec.key] = spec
            op = SAVED_ROWS_OP if c.kernel is saved_rows.copy_rows_kernel else name  # a saved point's copy
            steps.append(Step(node.name, op, spec.key, tuple(c.grid), tuple(arg(a) for a in c.args)))
    out_name = roots[id(output)]
    arena = _allocate(buffers, steps, out_name)
    constants = tuple((n, tuple(runner.constants[n].flatten().tolist())) for n in sorted(runner.constants))
    return Recording(bucket, tuple(arena[0]), arena[1], tuple(steps),
                     tuple(kernels[k] for k in sorted(kernels)), constants, out_name)


def _allocate(buffers: dict[str, Buffer], steps: list[Step], output: str) -> tuple[list[Buffer], int]:
    """First-fit offsets for the arena: meta buffers and the output live throughout, an activation from its
    first to its last step; same inputs, same plan."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        for a in s.args:
            if a.buffer:
                first.setdefault(a.buffer, i)
                last[a.buffer] = i
    end = len(steps)
    live: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    placed: dict[str, Buffer] = {}
    top = 0
    for name, b in buffers.items():
        if b.region in ("weight", "constant", "saved"):
            placed[name] = b
            continue
        if b.region == "activation" and name not in first:
            continue  # never read nor written by a step (a dead value)
        lo, hi = (0, end) if b.region == "meta" or name == output else (first[name], last[name])
        size = -(-b.nbytes // ALIGN) * ALIGN
        offset = 0
        while clash := [o + sz for o, sz, f, la in live
                        if f <= hi and lo <= la and offset < o + sz and o < offset + size]:
            offset = max(clash)
        live.append((offset, size, lo, hi))
        top = max(top, offset + size)
        placed[name] = Buffer(b.name, b.region, b.dtype, b.shape, offset, b.fill)
    return list(placed.values()), top


# ---- playing ----------------------------------------------------------------------------------------------


def fill_tables(rec: Recording, tokens: torch.Tensor, meta: StreamMeta) -> dict[str, torch.Tensor]:
    """The meta buffers' contents for one stream, by each buffer's fill rule (runtime/tables.py: the rules
    the runtime's binder applies, so playing fills exactly what a replay does)."""
    requests = [FillRequest(b.name, b.fill, b.shape) for b in rec.buffers if b.region == "meta"]
    return fill_meta(requests, tokens, meta, rec.bucket)


def play(rec: Recording, tokens: torch.Tensor, meta: StreamMeta, weights: Mapping[str, torch.Tensor],
         saved: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """Run the recording eagerly on one stream (bucket-padded): returns the output buffer, [reads, labels].
    The arena starts NaN-poisoned (all bits set), so a kernel reading bytes nothing wrote fails. `saved`:
    the staging buffers by name (region "saved"), read and written in place; missing ones are made
    (NaN-poisoned too). The saved-point copies run only for a stream that has stored roots or captures, as
    the engine replays them."""
    device = torch.device("cpu")
    arena = torch.full((rec.arena_bytes,), 0xFF, dtype=torch.uint8)
    by_name = {b.name: b for b in rec.buffers}
    consts = {n: torch.tensor(v, dtype=torch.float32) for n, v in rec.constants}
    saved = {} if saved is None else saved
    for b in rec.buffers:
        if b.region == "saved" and b.name not in saved:
            saved[b.name] = torch.full((b.nbytes,), 0xFF, dtype=torch.uint8).view(b.torch_dtype).view(b.shape)
    copies = bool(meta.stored or meta.captures)

    def storage(name: str) -> torch.Tensor:
        b = by_name[name]
        dtype = b.torch_dtype
        if b.region == "saved":
            return saved[name].reshape(-1)
        if b.region == "weight":
            return weights[name].reshape(-1)
        if b.region == "constant":
            return consts[name].to(dtype)
        return arena[b.offset : b.offset + b.nbytes].view(dtype)

    def tensor(a: Arg) -> torch.Tensor:
        base = storage(a.buffer)  # as_strided's offset counts from the start of the whole storage
        return torch.as_strided(base, a.shape, a.strides, base.storage_offset() + a.offset)

    for name, value in fill_tables(rec, tokens, meta).items():
        storage(name).copy_(value.reshape(-1).to(storage(name).dtype))
    kernels = {k.key: k for k in rec.kernels}
    for step in rec.steps:
        if not step.kernel:
            raise RuntimeError(f"step {step.node}: {step.op} has no kernel")
        spec = kernels[step.kernel]
        if spec.name == saved_rows.copy_rows_kernel.__name__ and not copies:
            continue
        args = [tensor(a) if a.buffer else a.value for a in step.args]
        pointwise.eager.launch(JIT_KERNELS[spec.name], step.grid, *args, device=device,
                               **dict(spec.constexprs))
    b = by_name[rec.output]
    return storage(rec.output).view(b.shape).clone()

