"""Forked Gated DeltaNet: the tile choices, the launch specs and the eager driver of its three kernels.

Consumes q/k [T, Hk, Dk], v [T, Hv, Dv], g and beta [T, Hv] (or the raw gate projections with A_log and
dt_bias), the GdnTables of runtime/tables.py, a ChunkWork scratch and fp32 state slots; produces GdnSpec (what
one layer's kernels are specialized on), its launches in order (GdnSpec.calls, split as flash-linear-
attention's chunked kernels: codegen/gdn_prep.py over every chunk slot, codegen/gdn_walk.py once per tree
level, codegen/gdn_out.py over every chunk slot) and `fork_gdn`, which runs them eagerly. Relies on E3: a
row's bits depend only on the positions at or before it on its path (later products are masked to exact
zeros, chunk boundaries are absolute), so one tile choice per head dim (TILES) serves every bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from flidec.codegen import eager
from flidec.codegen.gdn_out import gdn_out_kernel
from flidec.codegen.gdn_prep import gdn_prep_kernel
from flidec.codegen.gdn_walk import gdn_state_kernel
from flidec.runtime.meta import CHUNK, StreamMeta
from flidec.runtime.recording import DTYPE_NAMES
from flidec.runtime.reference.ops import L2_EPS
from flidec.runtime.tables import ITEM_FIELDS, GdnTables, gdn_tables


@dataclass(frozen=True, slots=True)
class GdnTiles:
    block_v: int  # state walk: value columns per program (its state block in registers is Dk x block_v)
    wide_v: int  # ... of a level with several live items, whose programs walk items side by side (WALK_SMS)
    state_warps: int
    prep_warps: int  # prep: [CHUNK, CHUNK] products, w and u in blocks of 64 columns
    block_o: int  # outputs: value columns per program
    out_warps: int
    state_stages: int  # software pipelining of the walk's loads (w, ke, u do not depend on the state)
    dot: str  # tl.dot input precision of the fp32 products the state and the WY system depend on
    out_dot: str  # ... and of those only an output row depends on (qe S + attn v_new)


# One tile choice per value head dim, shared by every bucket (E3). At head dim 128 the fp32 products the
# state and the WY system depend on run as bf16x3 (each operand split into bf16 hi and lo parts, three bf16
# tensor-core products: about 16 mantissa bits, far under the bf16 rounding of the outputs): "ieee" fp32 dots
# fall back to FMA loops that spill, and tf32x3 was slower for the whole layer. q k^T and k k^T multiply the
# 16-bit inputs themselves (their products are exact). The products only an output row depends on run as
# bf16x3 too, which was both faster and closer to the fp32 op than one tf32 product. Smaller head dims keep
# tf32x3: there Triton's bf16x3 kernels for sm_90 were far off the reference on the GPU (fork == plain still
# held), and 128 is the dim checked on the hardware. The interpreter computes every precision in fp32
# (eager.py runs bf16x3 as ieee) except the explicit bf16 products (_mul and the walk's), which it multiplies
# as bf16.
# With bf16x3 the kernels split operands by hand instead of asking Triton to (GdnSpec.split): Triton would
# split w and ke in every walk program at every chunk, though they do not depend on the state and are the
# same for every value block of a head; so the prep stores them as bf16 hi and lo planes (the bytes of the
# fp32 tile) and the walk loads the planes and writes Triton's three products itself (lo*hi + hi*lo first,
# then hi*hi), splitting only the state and v_new. The prep and the outputs split each operand once (_parts,
# _mul) however many products use it.
# Register pressure shaped the kernels (benchmarks/gdn_spills.py reports registers, spills and SASS counts):
# the prep writes k's and q's outputs before the WY system and computes w and u in column blocks from k and v
# loaded again, so no fp32 [CHUNK, Dk] tile lives across the inverse; ChunkWork tiles are addressed from a
# scalar base pointer plus constant int32 offsets, which ptxas folds into the loads' and stores' immediates.
# state_stages: the walk prefetches the next chunks' w and ke planes and u by cp.async; three stages at head
# dim 128 walk the long states throughput is made of fastest (benchmarks/gdn_tiles.py), while one stage, or 8
# warps, made the split walk fault at an out-of-range shared address on the GPU that the interpreter does not
# see (not investigated further).
TILES: dict[int, GdnTiles] = {
    16: GdnTiles(block_v=16, wide_v=16, state_warps=4, state_stages=1, prep_warps=4, block_o=16, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    32: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=1, prep_warps=4, block_o=32, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    64: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=1, prep_warps=4, block_o=64, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    128: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=3, prep_warps=4, block_o=64, out_warps=4,
                  dot="bf16x3", out_dot="bf16x3"),
}
KEY_DIMS = (16, 32, 64, 128)
# bf16x3 products need a key dim of at least this: below it the layer was far off the reference with bf16x3
# for the state and WY products (the walk's own split products and Triton's alike) and close with tf32x3;
# from it up bf16x3 is as close. Every Qwen3.5 checkpoint has Dk = 128.
BF16X3_KEY_DIM = 64
# The walk's grid is sized for the SMs of an H100 SXM or H200 (sm_90's largest parts), not for the bucket: a
# level's items are shared among max(1, WALK_SMS // blocks) programs per value-head block, each walking items
# j, j + walkers, ... up to the first padding item (live items come first). A bucket holds up to `segments`
# items a level, few of them live in most streams, and a walk program holds most of an SM's shared memory,
# so an SM runs one at a time: a program per (block, item) made the padding programs of a near-empty level
# cost waves of their own at every launch. The prep and output kernels keep a program per (head block, chunk
# slot): their padding programs return at once, and a loop over slots kept loop-invariant masks live (they
# spilled). The first item is walked outside the loop over items, which ran faster. One width cannot serve
# both shapes of level: wide programs walk several items side by side but one long item slower than narrow
# ones, so each walk launch holds both kinds (GdnTiles.wide_v): narrow programs walk a level with one live
# item, wide ones a level with several, and the other kind returns at once. Wider blocks than TILES' do not
# fit the shared memory. Which program walks an item does not change its bits (E3).
WALK_SMS = 132

_FIELD = {name: i for i, name in enumerate(ITEM_FIELDS)}


@dataclass(frozen=True, slots=True)
class GdnNorm:
    """The gated RMS norm fused into the output kernel: z's and the weight's dtypes, z's row and head
    strides."""

    z_dtype: torch.dtype
    weight_dtype: torch.dtype
    z_strides: tuple[int, int]


@dataclass(frozen=True, slots=True)
class GdnSpec:
    """Everything a forked Gated DeltaNet layer's launches are specialized on: one compiled prep, state walk
    and output kernel per spec."""

    dtype: torch.dtype  # q, k, v: the model dtype, or fp32 (fp32 activations: E4)
    gate_dtype: torch.dtype  # g and beta (fp32), or a and b when fused (the model dtype or fp32)
    out_dtype: torch.dtype
    num_k_heads: int
    num_v_heads: int
    key_dim: int
    value_dim: int
    fused_gate: bool
    strides: tuple[tuple[int, int], ...]  # (row, head) strides in elements of q, k, v, g, beta, out
    norm: GdnNorm | None = None  # the output kernel applies the layer's gated RMS norm (gdn_out_kernel NORM)
    param_dtype: torch.dtype | None = None  # A_log and dt_bias when fused (the weights'); None: gate_dtype

    @property
    def tiles(self) -> GdnTiles:
        """TILES of the value dim, with tf32x3 products under BF16X3_KEY_DIM key dims."""
        t = TILES[self.value_dim]
        if self.key_dim < BF16X3_KEY_DIM and "bf16x3" in (t.dot, t.out_dot):
            return dataclasses.replace(t, dot="tf32x3", out_dot="tf32x3")
        return t

    @property
    def split(self) -> bool:
        """The prep stores w and ke as bf16 hi and lo planes and the walk multiplies them explicitly: with
        bf16x3 tiles (TILES comment)."""
        return self.tiles.dot == "bf16x3"

    def _work(self, parts: tuple[str, ...]) -> dict[str, str]:
        dtypes = dict(zip(ChunkWork.PARTS, ChunkWork.dtypes(self.split), strict=True))
        return {name: "*" + DTYPE_NAMES[dtypes[name]] for name in parts}

    def _fields(self) -> dict[str, int]:
        return {"NUM_FIELDS": len(ITEM_FIELDS), "F_ROW0": _FIELD["row0"], "F_LENGTH": _FIELD["length"],
                "F_TAIL": _FIELD["tail"]}

    def prep_signature(self) -> dict[str, str]:
        sig = {name: "*" + DTYPE_NAMES[self.dtype] for name in ("q_ptr", "k_ptr", "v_ptr")}
        gate = "*" + DTYPE_NAMES[self.gate_dtype]
        param = "*" + DTYPE_NAMES[self.param_dtype or self.gate_dtype]
        sig |= {"g_ptr": gate, "beta_ptr": gate, "a_log_ptr": param, "dt_bias_ptr": param}
        sig |= {"items_ptr": "*i32", "tails_ptr": "*i32", "chunks_ptr": "*i32"}
        sig |= self._work(ChunkWork.PREP_PARTS)
        sig |= {"scale": "fp32"}
        return sig | {name: "constexpr" for name in self.prep_constexprs()}

    def prep_constexprs(self) -> dict[str, int | bool | float | str]:
        (q_st, q_sh), (k_st, k_sh), (v_st, v_sh), (g_st, _), (b_st, _), _ = self.strides
        return {
            "Q_ST": q_st, "Q_SH": q_sh, "K_ST": k_st, "K_SH": k_sh, "V_ST": v_st, "V_SH": v_sh,
            "G_ST": g_st, "B_ST": b_st, "HV": self.num_v_heads, "GROUP": self.num_v_heads // self.num_k_heads,
            "DK": self.key_dim, "DV": self.value_dim, "CHUNK": CHUNK, **self._fields(),
            "FUSED_GATE": self.fused_gate, "EPS": L2_EPS, "DOT": self.tiles.dot, "SPLIT": self.split,
            "SPLIT_QK": self.split and self.dtype == torch.float32,
        }

    def state_signature(self) -> dict[str, str]:
        sig = self._work(ChunkWork.STATE_PARTS)
        sig |= {"items_ptr": "*i32", "slots_ptr": "*fp32", "item_base": "i32", "level_items": "i32"}
        return sig | {name: "constexpr" for name in self.state_constexprs()}

    def state_constexprs(self) -> dict[str, int | str]:
        fields = {f"F_{name.upper()}": _FIELD[name] for name in ("length", "tail", "src", "dst", "first")}
        return {"HV": self.num_v_heads, "DK": self.key_dim, "DV": self.value_dim,
                "BLOCK_V": self.tiles.block_v, "WIDE_V": self.tiles.wide_v, "CHUNK": CHUNK,
                "NUM_FIELDS": len(ITEM_FIELDS), **fields, "DOT": self.tiles.dot, "SPLIT": self.split}

    def out_signature(self) -> dict[str, str]:
        sig = self._work(ChunkWork.OUT_PARTS)
        out = "*" + DTYPE_NAMES[self.out_dtype]
        sig |= {"out_ptr": out, "items_ptr": "*i32", "chunks_ptr": "*i32"}
        norm = self.norm  # without a norm, out fills the z and weight slots (never read)
        sig |= {"z_ptr": "*" + DTYPE_NAMES[norm.z_dtype] if norm else out,
                "norm_w_ptr": "*" + DTYPE_NAMES[norm.weight_dtype] if norm else out, "eps": "fp32"}
        return sig | {name: "constexpr" for name in self.out_constexprs()}

    def out_constexprs(self) -> dict[str, int | str | bool]:
        o_st, o_sh = self.strides[-1]
        z_st, z_sh = self.norm.z_strides if self.norm else (0, 0)
        return {"O_ST": o_st, "O_SH": o_sh, "Z_ST": z_st, "Z_SH": z_sh, "HV": self.num_v_heads,
                "DK": self.key_dim, "DV": self.value_dim, "BLOCK_O": self.tiles.block_o, "CHUNK": CHUNK,
                **self._fields(),
                "DOT_OUT": self.tiles.out_dot, "NORM": self.norm is not None,
                "F32_O": self.dtype == torch.float32}

    # Heads (and value blocks) are the grid's first axis, work slots its second: blocks are dispatched first
    # axis fastest, so a stream's few live slots (they come first) start in the first wave, and the padding
    # slots a bucket's grid is sized for return while those run instead of queueing ahead of them.
    def prep_grid(self, num_chunks: int) -> tuple[int, int]:
        return (self.num_v_heads, num_chunks)

    def state_grid(self, per_level: int) -> tuple[int, int]:
        """One program per narrow value-head block, then per wide block the programs that share a level's
        items (gdn_state_kernel, WALK_SMS); with one width, per block the programs that share them."""
        t = self.tiles
        narrow = self.num_v_heads * (self.value_dim // t.block_v)
        if t.wide_v == t.block_v:
            return (narrow * self.walkers(per_level), 1)
        wide = self.num_v_heads * (self.value_dim // t.wide_v)
        return (narrow + (wide * self.walkers(per_level) if per_level > 1 else 0), 1)

    def walkers(self, per_level: int) -> int:
        """Programs per value-head block that share a level's items: of the wide walk, or of the one width."""
        return min(per_level, max(1, WALK_SMS // (self.num_v_heads * (self.value_dim // self.tiles.wide_v))))

    def out_grid(self, num_chunks: int) -> tuple[int, int]:
        """With the norm, a program holds every value column of its head (the norm reduces over them)."""
        blocks = 1 if self.norm else self.value_dim // self.tiles.block_o
        return (self.num_v_heads * blocks, num_chunks)

    def calls(self, num_chunks: int, levels: int, per_level: int, q, k, v, g, beta, a_log, dt_bias, items,
              tails, chunks, work: ChunkWork, out, slots, z=None, norm_weight=None, eps: float = 0.0
              ) -> list[GdnCall]:
        """The launches of one layer in order: the prep over every chunk slot, one state walk per tree level
        (roots first), then the outputs of every chunk slot (with the spec's norm: normed by z, norm_weight
        and eps). Arguments are tensors (or stand-ins for them)."""
        t = self.tiles
        prep = GdnCall(gdn_prep_kernel, self.prep_grid(num_chunks),
                       (q, k, v, g, beta, a_log, dt_bias, items, tails, chunks,
                        *work.parts(ChunkWork.PREP_PARTS), self.key_dim**-0.5),
                       self.prep_signature(), self.prep_constexprs(), t.prep_warps)
        walks = [GdnCall(gdn_state_kernel, self.state_grid(per_level),
                         (*work.parts(ChunkWork.STATE_PARTS), items, slots, level * per_level, per_level),
                         self.state_signature(), self.state_constexprs(), t.state_warps, t.state_stages)
                 for level in range(levels)]
        if self.norm is None:
            z = norm_weight = out
        outs = GdnCall(gdn_out_kernel, self.out_grid(num_chunks),
                       (*work.parts(ChunkWork.OUT_PARTS), out, items, chunks, z, norm_weight, float(eps)),
                       self.out_signature(), self.out_constexprs(), t.out_warps)
        return [prep, *walks, outs]


@dataclass(frozen=True, slots=True)
class GdnCall:
    kernel: object  # gdn_prep_kernel, gdn_state_kernel or gdn_out_kernel
    grid: tuple[int, int]
    args: tuple
    signature: dict[str, str]
    constexprs: dict[str, object]
    num_warps: int
    num_stages: int = 1


@dataclass(frozen=True, slots=True)
class ChunkWork:
    """The prep kernel's output, fp32, per (chunk slot, value head): w, qe, ke [CHUNK, Dk], u [CHUNK, Dv]
    (v_new after the state walk), attn [CHUNK, CHUNK] and decay (one value); and the state walk's: the state
    entering the chunk [Dk, Dv]. With `split` (GdnSpec.split) w and ke are [2, CHUNK, Dk] bf16 instead: the
    hi and lo planes of the fp32 values, in the same bytes; only the walk reads them."""

    PARTS = ("w_ptr", "u_ptr", "qe_ptr", "ke_ptr", "attn_ptr", "decay_ptr", "states_ptr")
    PREP_PARTS = ("w_ptr", "u_ptr", "qe_ptr", "ke_ptr", "attn_ptr", "decay_ptr")
    STATE_PARTS = ("w_ptr", "u_ptr", "ke_ptr", "decay_ptr", "states_ptr")
    OUT_PARTS = ("qe_ptr", "attn_ptr", "u_ptr", "states_ptr")
    w: torch.Tensor
    u: torch.Tensor
    qe: torch.Tensor
    ke: torch.Tensor
    attn: torch.Tensor
    decay: torch.Tensor
    states: torch.Tensor

    @staticmethod
    def shapes(num_chunks: int, num_v_heads: int, key_dim: int, value_dim: int, split: bool
               ) -> tuple[tuple[int, ...], ...]:
        n, h = max(num_chunks, 1), num_v_heads
        planes = (n, h, 2, CHUNK, key_dim) if split else (n, h, CHUNK, key_dim)
        return (planes, (n, h, CHUNK, value_dim), (n, h, CHUNK, key_dim), planes, (n, h, CHUNK, CHUNK),
                (n, h), (n, h, key_dim, value_dim))

    @staticmethod
    def dtypes(split: bool) -> tuple[torch.dtype, ...]:
        f32, planes = torch.float32, torch.bfloat16 if split else torch.float32
        return (planes, f32, f32, planes, f32, f32, f32)

    @classmethod
    def empty(cls, num_chunks: int, spec: GdnSpec, device: torch.device | str) -> ChunkWork:
        """NaN-filled: a kernel reading a chunk slot no earlier kernel wrote gets NaN outputs."""
        shapes = cls.shapes(num_chunks, spec.num_v_heads, spec.key_dim, spec.value_dim, spec.split)
        return cls(*(torch.full(s, float("nan"), dtype=dtype, device=device)
                     for s, dtype in zip(shapes, cls.dtypes(spec.split), strict=True)))

    def parts(self, names: tuple[str, ...]) -> tuple:
        return tuple(getattr(self, name.removesuffix("_ptr")) for name in names)


def gdn_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             out: torch.Tensor, fused_gate: bool, z: torch.Tensor | None = None,
             norm_weight: torch.Tensor | None = None, a_log: torch.Tensor | None = None) -> GdnSpec:
    """The spec of a launch on these tensors (checking what the kernels assume of them); with z and
    norm_weight, the outputs are normed by the gated RMS norm; `a_log` (fused gates): its dtype is A_log's
    and dt_bias's in the kernel where it is not a's."""
    hk, dk = k.shape[1:]
    hv, dv = v.shape[1:]
    if dk not in KEY_DIMS or dv not in TILES:
        raise ValueError(f"head dims {dk}/{dv} have no tile choice (key: {KEY_DIMS}, value: {sorted(TILES)})")
    if q.shape[1:] != k.shape[1:] or hv % hk:
        raise ValueError(f"q {tuple(q.shape[1:])} and k {tuple(k.shape[1:])} heads cannot serve {hv} value "
                         "heads")
    if q.dtype != k.dtype or q.dtype != v.dtype or any(t.stride(2) != 1 for t in (q, k, v, out)):
        raise ValueError("q, k and v must share a dtype; q, k, v and out need a contiguous head dim")
    if g.dtype != beta.dtype or any(t.shape[1] != hv or t.stride(1) != 1 for t in (g, beta)):
        raise ValueError(f"g and beta must be [T, {hv}] of one dtype with contiguous heads")
    if not fused_gate and g.dtype != torch.float32:
        raise ValueError("g and beta are fp32 (pass a_log and dt_bias to fuse the gate on raw projections)")
    norm = None
    if (z is None) != (norm_weight is None):
        raise ValueError("to fuse the gated norm pass both z and its weight")
    if z is not None:
        if (z.shape != v.shape or z.stride(2) != 1 or norm_weight.shape != (dv,)
                or norm_weight.stride(0) != 1):
            raise ValueError(f"the gated norm needs z like v {tuple(v.shape)} with a contiguous head dim and "
                             f"a contiguous weight [{dv}], got z {tuple(z.shape)} and weight "
                             f"{tuple(norm_weight.shape)}")
        if dv // TILES[dv].block_o > 2:
            raise ValueError(f"head dim {dv}: the fused norm holds at most two output blocks a program")
        norm = GdnNorm(z.dtype, norm_weight.dtype, (z.stride(0), z.stride(1)))
    strides = tuple((t.stride(0), t.stride(1)) for t in (q, k, v, g, beta, out))
    return GdnSpec(dtype=q.dtype, gate_dtype=g.dtype, out_dtype=out.dtype, num_k_heads=hk, num_v_heads=hv,
                   key_dim=dk, value_dim=dv, fused_gate=fused_gate, strides=strides, norm=norm,
                   param_dtype=a_log.dtype if fused_gate and a_log is not None and a_log.dtype != g.dtype
                   else None)


def slot_buffer(num_slots: int, num_v_heads: int, key_dim: int, value_dim: int,
                device: torch.device | str) -> torch.Tensor:
    """A NaN-filled slot buffer: a level reading a slot no earlier level wrote gets NaN outputs, not zeros."""
    return torch.full((max(num_slots, 1), num_v_heads, key_dim, value_dim), float("nan"), device=device)


def launch_all(spec: GdnSpec, tables: GdnTables, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               g: torch.Tensor, beta: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
               out: torch.Tensor, work: ChunkWork, slots: torch.Tensor,
               norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> None:
    """A layer's launches (GdnSpec.calls), eagerly; `norm` = (z, weight, eps) of a spec with a norm."""
    device = q.device
    items, tails, chunks = (t.to(device) for t in (tables.items, tables.tails, tables.chunks))
    for call in spec.calls(tables.num_chunks, tables.num_levels, tables.per_level, q, k, v, g, beta, a_log,
                           dt_bias, items, tails, chunks, work, out, slots, *(norm or ())):
        eager.launch(call.kernel, call.grid, *call.args, device=device, num_warps=call.num_warps,
                     num_stages=call.num_stages, **call.constexprs)


def fork_gdn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             meta: StreamMeta, a_log: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, slots: torch.Tensor | None = None, levels: int | None = None,
             per_level: int | None = None, num_slots: int | None = None, num_chunks: int | None = None,
             norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor:
    """Run the kernels eagerly (JIT on CUDA, interpreter on CPU), tables padded to a bucket's sizes if given.

    With `a_log` and `dt_bias`, g and beta are the raw projections a and b and the prep kernel computes
    g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) itself. `out` defaults to a NaN-filled
    tensor, so rows the kernels do not write stay NaN; `slots` (see `slot_buffer`) receives the states at
    the chunk boundaries deeper segments start from, in the slots of tables.state_slots. With `norm` = (z,
    weight, eps) the output is gated_rms_norm(out, z, weight, eps), computed in the output kernel.
    """
    fused = a_log is not None
    if fused != (dt_bias is not None) or (fused and a_log.dtype != dt_bias.dtype):
        raise ValueError("to fuse the gate pass both a_log and dt_bias, in one dtype")
    if out is None:
        out = torch.full(v.shape, float("nan"), dtype=v.dtype, device=v.device)
    spec = gdn_spec(q, k, v, g, beta, out, fused, *(norm[:2] if norm else (None, None)), a_log)
    tables = gdn_tables(meta, levels, per_level, num_slots, num_chunks)
    if slots is None:
        slots = slot_buffer(tables.num_slots, spec.num_v_heads, spec.key_dim, spec.value_dim, q.device)
    work = ChunkWork.empty(tables.num_chunks, spec, q.device)
    if fused:
        launch_all(spec, tables, q, k, v, g, beta, a_log, dt_bias, out, work, slots, norm)
    else:
        launch_all(spec, tables, q, k, v, g, beta, g, g, out, work, slots, norm)  # a_log, dt_bias unread
    return out
