"""Saved points in and out of a GPU engine's staging buffers (region "saved" of its recordings).

Before a replay that resumes, each stored root's point is copied into the staging its recorded copies
restore from (codegen/saved_rows.py): keys and values of all its positions, roots one after another in
StreamMeta.stored order, extent by extent; conv window and GDN state at the root's index. After a replay
that saves, each capture is copied out of the capture staging into a new point's tensors, in
StreamMeta.captures order: the keys and values of the positions past the stored root it extends, if any
(the point it makes shares that root's extents, runtime/saved/resume.make_point).
Every copy is a device copy on the engine's stream, ordered with the replay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from flidec.runtime.meta import StreamMeta
from flidec.runtime.reference.executor import Captured
from flidec.runtime.saved.point import PointLayout, SavedPoint

COPY_KERNEL = "copy_rows_kernel"  # the recorded steps a stream without saved points skips


def staging_names(layout: PointLayout) -> list[str]:
    """Every staging buffer a recording that resumes and saves points of this layout has."""
    names = []
    for side in ("saved", "capture"):
        for i in range(layout.attention_layers):
            names += [f"{side}.attention.{i}.keys", f"{side}.attention.{i}.values"]
        for i in range(layout.gdn_layers):
            names += [f"{side}.gdn.{i}.window", f"{side}.gdn.{i}.state"]
    return names


def stage_held(staging: Mapping[str, torch.Tensor], held: Sequence[SavedPoint], layout: PointLayout) -> None:
    per, dv = layout.state[0] * layout.state[1], layout.state[2]
    window = layout.window[0]
    dst: list[torch.Tensor] = []
    src: list[torch.Tensor] = []
    row = 0
    for j, p in enumerate(held):
        for i in range(layout.attention_layers):  # one concatenation a layer and part, not a copy an extent
            for part in ("keys", "values"):
                out = staging[f"saved.attention.{i}.{part}"][row : row + p.length]
                torch.cat([getattr(e, part)[i].reshape(e.end - e.start, -1) for e in p.extents], out=out)
        for i in range(layout.gdn_layers):
            dst.append(staging[f"saved.gdn.{i}.window"][j * window : (j + 1) * window])
            src.append(p.windows[i])
            dst.append(staging[f"saved.gdn.{i}.state"][j * per : (j + 1) * per])
            src.append(p.states[i].reshape(per, dv))
        row += p.length
    torch._foreach_copy_(dst, src, non_blocking=True)  # a few launches for all of them, not one a tensor


def captured_points(staging: Mapping[str, torch.Tensor], meta: StreamMeta, layout: PointLayout
                    ) -> list[Captured]:
    per = layout.state[0] * layout.state[1]
    window = layout.window[0]
    out, row = [], 0
    for j, (segment, n) in enumerate(meta.captures):
        stored = [a for a in meta.ancestors[segment] if a in meta.stored]
        start = meta.segments[stored[0]].length if stored else 0  # a stored root's positions: its point's
        c = Captured(segment, n, start)
        for i in range(layout.attention_layers):
            c.keys.append(staging[f"capture.attention.{i}.keys"][row + start : row + n]
                          .reshape(n - start, *layout.kv).clone())
            c.values.append(staging[f"capture.attention.{i}.values"][row + start : row + n]
                            .reshape(n - start, *layout.kv).clone())
        for i in range(layout.gdn_layers):
            c.windows.append(staging[f"capture.gdn.{i}.window"][j * window : (j + 1) * window].clone())
            c.states.append(staging[f"capture.gdn.{i}.state"][j * per : (j + 1) * per]
                            .reshape(layout.state).clone())
        out.append(c)
        row += n
    return out
