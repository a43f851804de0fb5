"""The op table is the one list of ops: the model's leaf calls, the passes' ops and the emitters follow it."""

from __future__ import annotations

import pytest
import torch

from flidec.codegen import recording
from flidec.runtime.reference import op_table, qwen3_5

# Ops the recorder never meets: the model's fork ops are lowered (lower_forks, label_head), and the plain
# fork attention is always fused with its output gate (fuse_pointwise).
NOT_RECORDED = {"fork_conv", "fork_attention", "fork_gdn", "label_logits", "fork_attention_static"}


def test_every_recorded_op_has_an_emitter_and_nothing_else_does() -> None:
    without = {op.name for op in op_table.OPS if op not in recording.EMITTERS}
    assert without == NOT_RECORDED
    assert set(recording.EMITTERS) <= set(op_table.OPS)


def test_names_and_functions_name_one_entry_each() -> None:
    assert len(op_table.BY_NAME) == len(op_table.BY_FN) == len(op_table.OPS)
    assert all(op_table.BY_NAME[op.name] is op_table.BY_FN[op.fn] is op for op in op_table.OPS)


def test_the_models_leaf_calls_are_the_tables_model_ops() -> None:
    assert tuple(op.name for op in op_table.OPS if op.stage == op_table.MODEL) == qwen3_5.LEAF_OPS
    assert {op.name for op in op_table.OPS if op.reads_meta} == op_table.META_OPS
    assert set(qwen3_5.LEAF_OPS) > op_table.META_OPS


def test_an_emitter_for_an_op_outside_the_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^register_emitter: neg has no entry in runtime/reference/op_t"):
        recording.register_emitter(torch.neg, lambda ctx, out, x: [], ())
    assert all(op.fn is not torch.neg for op in recording.EMITTERS)


def test_output_rules_match_the_references_shapes_and_dtypes() -> None:
    x, w = torch.randn(5, 8), torch.randn(3, 8)
    cases = ((op_table.linear_silu_mul, (x, w, w)), (op_table.rms_norm_f32, (x.bfloat16(), x[0], 1e-6)),
             (op_table.gather_rows, (x, torch.tensor([4, 1]))))
    for fn, args in cases:
        want = fn(*args)
        meta = op_table.BY_FN[fn].outputs(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args))
        assert (meta.shape, meta.dtype) == (want.shape, want.dtype)
