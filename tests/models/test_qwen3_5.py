"""flidec's Qwen35 traces with torch.fx into a graph whose fork-aware ops are leaf calls taking meta, the
traced graph computes the eager module's bits, and a forked stream through the whole model gives every row
and every read exactly the bits of the plain single-sequence pass of its path (E1, E3), fp32 and bf16."""

import operator

import pytest
import torch
import torch.fx

from flidec.runtime.reference import ops
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.testing.forests import pack_forest, path_stream

FOREST = [  # (parent, length): fork points on and off the chunk boundary, an empty root, two instances
    (-1, 70), (0, 1), (0, 58), (2, 65), (2, 3), (-1, 0), (5, 64), (6, 1), (6, 66),
]
LABELS = (11, 12, 13, 999)


def _nodes():
    g = torch.Generator().manual_seed(9)
    return [(p, torch.randint(1, 1000, (n,), generator=g).tolist()) for p, n in FOREST]


def test_trace_keeps_fork_ops_as_leaves(tiny_dir):
    model = Qwen35.from_pretrained(tiny_dir, torch.float32)
    gm = torch.fx.symbolic_trace(model)
    gm.graph.lint()
    meta_node = next(n for n in gm.graph.nodes if n.op == "placeholder" and n.target == "meta")
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    targets = [n.target for n in calls]
    for op, count in ((ops.fork_gdn, 3), (ops.fork_conv, 3), (ops.fork_attention, 1), (ops.label_logits, 1)):
        nodes = [n for n in calls if n.target is op]
        assert len(nodes) == count, op.__name__
        assert all(meta_node in n.args for n in nodes), op.__name__
    assert targets.count(ops.linear) == 3 * 5 + 4 + 4 * 3  # GDN: qkv, a, b, z, out; attention; MLP
    positions = [n for n in calls if n.target is getattr and n.args == (meta_node, "positions")]
    assert positions, "rotary reads the logical positions from meta"
    assert operator.getitem in targets  # slicing q / gate, split of qkv

    nodes = _nodes()
    stream = pack_forest(nodes, placement=[5, 0, 3, 8, 1, 7, 2, 6, 4], gap=2, reads={1: LABELS, 4: LABELS})
    with torch.no_grad():
        assert torch.equal(gm(stream.tokens, stream.meta), model(stream.tokens, stream.meta))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_forked_stream_is_exact(tiny_dir, dtype):
    model = Qwen35.from_pretrained(tiny_dir, dtype)
    nodes = _nodes()
    leaves = [i for i in range(len(nodes)) if nodes[i][1] and all(p != i for p, _ in nodes)]
    stream = pack_forest(nodes, placement=[6, 2, 8, 0, 5, 4, 1, 3, 7], gap=5,
                         reads={i: LABELS for i in leaves})
    with torch.no_grad():
        hidden = model.hidden_states(stream.tokens, stream.meta)
        logits = model(stream.tokens, stream.meta)
        for i, seg in enumerate(stream.meta.segments):
            plain = path_stream(nodes, i, LABELS if i in leaves else None)
            expected = model.hidden_states(plain.tokens, plain.meta)
            assert torch.equal(hidden[seg.start : seg.start + seg.length], expected[seg.pos0 : seg.end]), i
            if i in leaves:
                j = leaves.index(i)
                want = ops.label_logits(expected, model.lm_head.weight, plain.meta)[0]
                assert torch.equal(logits[j], want), i
    assert logits.isfinite().all()
