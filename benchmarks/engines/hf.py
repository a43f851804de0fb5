"""hf and fp32-ref: transformers' Qwen3_5ForCausalLM, one sequence per question.

Consumes a model directory and a Work; produces each read's label logits from the model's logits at the
last prompt token (`logits_to_keep=1`), one forward pass per question with no cache and no padding.
hf runs in bf16 with whatever Gated DeltaNet kernel transformers picked at import (flash-linear-attention
when it is installed, as a plain transformers user gets). fp32-ref is the exactness reference: float32
weights and activations, TF32 off for matmuls and cuDNN, and the torch path of the delta rule: transformers
binds fla's kernel into the module function `torch_chunk_gated_delta_rule` when fla imports, and the GDN
layer looks that name up at call time, so the reference swaps in the wrapped torch function (its
`__wrapped__`) for the duration of its runs. Both report which implementation ran.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from benchmarks.engines.base import Logits, free_device_memory
from benchmarks.work import Work

_GDN_FUNCTIONS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def _modeling():
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return modeling_qwen3_5


def _implementation(fn) -> str:
    """Module of the function transformers calls behind a decorated delta-rule function."""
    try:
        impl = inspect.getclosurevars(fn).nonlocals.get("implementation", fn)
    except (TypeError, ValueError):
        impl = fn
    return f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__name__', '?')}"


@contextlib.contextmanager
def torch_delta_rule() -> Iterator[str]:
    """Run transformers' Qwen3.5 GDN layers on their plain torch delta rule; yields what now runs."""
    mod = _modeling()
    saved = {name: getattr(mod, name) for name in _GDN_FUNCTIONS}
    try:
        for name, fn in saved.items():
            while hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            setattr(mod, name, fn)
        yield _implementation(mod.torch_chunk_gated_delta_rule)
    finally:
        for name, fn in saved.items():
            setattr(mod, name, fn)


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off for cuBLAS and cuDNN (transformers' conv1d path goes through cuDNN)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    precision = torch.get_float32_matmul_precision()
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.set_float32_matmul_precision(precision)


class Transformers:
    def __init__(self, reference: bool = False):
        self.reference = reference
        self.name = "fp32-ref" if reference else "hf"
        self.computes = "solo"
        self.dtype = torch.float32 if reference else torch.bfloat16
        self.model = None

    def load(self, model_dir: Path, device: str) -> dict:
        import transformers
        from transformers import Qwen3_5ForCausalLM

        self.device = device
        self.model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=self.dtype).to(device).eval()
        with self._numerics() as gdn:
            facts = {
                "transformers": transformers.__version__,
                "dtype": str(self.dtype).removeprefix("torch."),
                "gdn": gdn,
                "attention": self.model.config._attn_implementation,
                "tf32": "off" if self.reference else "default",
            }
        return facts

    @contextlib.contextmanager
    def _numerics(self) -> Iterator[str]:
        if not self.reference:
            yield _implementation(_modeling().torch_chunk_gated_delta_rule)
            return
        with strict_fp32(), torch_delta_rule() as gdn:
            yield gdn

    def prepare(self, work: Work) -> Work:
        return work

    @torch.inference_mode()
    def run(self, work: Work, instances: Sequence[int], offline: bool) -> Logits:
        out = {}
        with self._numerics():
            for r in work.read_ids(instances):
                read = work.reads[r]
                ids = torch.tensor([read.path], device=self.device)
                logits = self.model(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1]
                out[r] = logits[list(read.labels)]
        return {r: v.float().cpu() for r, v in out.items()}

    def close(self) -> None:
        self.model = None
        free_device_memory()
