"""The demo model's training loop: length-bucketed batches, fresh label noise, a time-based schedule.

Consumes a model (demo_model), an Encoded training set (demo_render) and a Schedule; trains in place and
returns a TrainLog. Batches hold examples of similar length up to `batch_tokens` padded tokens. Each step
redraws the label noise (the rules' answer, or with probability `noise` another option), so the model
learns the noise rate as probability instead of memorizing which examples were flipped. The option
pointer (demo_model.loss) is created and trained here and dropped afterwards. The learning rate
warms up, then follows a cosine to `min_lr_frac`, both over the fraction of the budget spent (time or
steps, whichever runs out first), so a run stopped by its deadline has already annealed.
Curriculum: while that fraction is below `curriculum_frac`, batches come from a second Encoded set, the
easy mix (demo_data's verbatim choices: 2-4 options, the answer written in the state), then from the
full set. Each log row holds the label loss per ask type averaged over the rows' interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from demo_data import KINDS
from demo_model import loss
from demo_render import Encoded


@dataclass(frozen=True, slots=True)
class Schedule:
    lr: float = 2e-3
    warmup_frac: float = 0.03
    min_lr_frac: float = 0.05
    weight_decay: float = 0.05
    batch_tokens: int = 32768
    lm_weight: float = 0.05
    pointer_weight: float = 1.0
    noise: float = 0.06
    deadline: float = math.inf  # time.monotonic() at which training stops
    max_steps: int = 1_000_000
    seed: int = 0
    curriculum_frac: float = 0.0  # the budget fraction trained on the easy set first; 0: none


def phase_at(progress: float, s: Schedule) -> str:
    """Which set a step at `progress` (fraction of the budget spent) draws from: "easy", then "full"."""
    return "easy" if progress < s.curriculum_frac else "full"


def chance_losses(enc: Encoded) -> dict[str, float]:
    """Per ask type, the label loss of a uniform guess (mean ln of the option count): where a type's logged
    loss starts and stays if it learns nothing."""
    options = (enc.label_ids >= 0).sum(1)
    return {k: float(np.log(options[enc.kinds == i]).mean()) if (enc.kinds == i).any() else math.nan
            for i, k in enumerate(KINDS)}


@dataclass(slots=True)
class TrainLog:
    steps: int = 0
    easy_steps: int = 0  # steps drawn from the curriculum's easy set
    examples: int = 0
    seconds: float = 0.0
    history: list[dict] = field(default_factory=list)  # one row per log interval


def batches(lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Endless index batches: shuffled windows, sorted by length, cut at `batch_tokens` padded tokens."""
    window = max(1, int(64 * batch_tokens / max(1.0, float(lengths.mean()))))
    while True:
        order = rng.permutation(len(lengths))
        for start in range(0, len(order), window):
            part = order[start:start + window]
            part = part[np.argsort(lengths[part], kind="stable")]
            cuts, first, longest = [], 0, 0
            for k, i in enumerate(part):
                longest = max(longest, int(lengths[i]))
                if longest * (k + 1 - first) > batch_tokens and k > first:
                    cuts.append((first, k))
                    first, longest = k, int(lengths[i])
            cuts.append((first, len(part)))
            for c in rng.permutation(len(cuts)):
                yield part[cuts[c][0]:cuts[c][1]]


def collate(enc: Encoded, index: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [B, T] and lengths [B]."""
    lengths = enc.lengths[index]
    ids = np.full((len(index), int(lengths.max())), pad_id, dtype=np.int64)
    for row, i in enumerate(index):
        ids[row, :lengths[row]] = enc.prompt(i)
    return ids, lengths


def noisy_targets(answers: np.ndarray, options: np.ndarray, noise: float, rng: np.random.Generator
                  ) -> np.ndarray:
    """Each answer kept with probability 1 - noise, else replaced by a uniformly drawn other option."""
    other = (rng.random(len(answers)) * (options - 1)).astype(np.int64)
    other += other >= answers
    return np.where(rng.random(len(answers)) < noise, other, answers)


def lr_at(progress: float, s: Schedule) -> float:
    if progress < s.warmup_frac:
        return s.lr * max(progress / s.warmup_frac, 0.01)
    t = min(1.0, (progress - s.warmup_frac) / (1 - s.warmup_frac))
    return s.lr * (s.min_lr_frac + (1 - s.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def train(model: torch.nn.Module, enc: Encoded, pad_id: int, s: Schedule, device: torch.device,
          log: Callable[[str], None] = print, log_every: int = 50, easy: Encoded | None = None) -> TrainLog:
    if s.curriculum_frac > 0 and easy is None:
        raise ValueError("a curriculum (curriculum_frac > 0) needs the easy set")
    rng = np.random.default_rng(s.seed)
    pointer = torch.nn.Linear(model.config.hidden_size, 1).to(device)  # training only, never saved
    named = [*model.named_parameters(), *pointer.named_parameters(prefix="pointer")]
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in named if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                             {"params": rest, "weight_decay": 0}],
                            lr=s.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    sets = {"full": enc, **({"easy": easy} if easy is not None else {})}
    streams = {name: batches(e.lengths, s.batch_tokens, rng) for name, e in sets.items()}
    options = {name: (e.label_ids >= 0).sum(1) for name, e in sets.items()}
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)
    # per-type label loss sums and counts since the last log row, kept on the device (no sync per step)
    sums, counts = torch.zeros(len(KINDS), device=device), torch.zeros(len(KINDS), device=device)
    start, out = time.monotonic(), TrainLog()
    budget = s.deadline - start
    model.train()
    while True:
        now = time.monotonic()
        if now >= s.deadline or out.steps >= s.max_steps:
            break
        progress = max((now - start) / budget if budget > 0 else 1.0, out.steps / s.max_steps)
        for group in opt.param_groups:
            group["lr"] = lr_at(progress, s)
        phase = phase_at(progress, s)
        data, index = sets[phase], next(streams[phase])
        ids, lengths = collate(data, index, pad_id)
        targets = noisy_targets(data.answers[index], options[phase][index], s.noise, rng)
        tensors = [torch.from_numpy(x).to(device, non_blocking=True)
                   for x in (ids, lengths, data.label_ids[index].astype(np.int64),
                             data.option_ends[index].astype(np.int64), targets)]
        kinds = torch.from_numpy(data.kinds[index]).to(device, non_blocking=True)
        with autocast:
            total, label_losses = loss(model, pointer, *tensors, lm_weight=s.lm_weight,
                                       pointer_weight=s.pointer_weight)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sums.index_add_(0, kinds, label_losses.float())
        counts.index_add_(0, kinds, torch.ones_like(label_losses, dtype=torch.float32))
        out.steps += 1
        out.easy_steps += phase == "easy"
        out.examples += len(index)
        if out.steps % log_every == 0:
            means = (sums / counts.clamp(min=1)).tolist()
            seen = counts.tolist()
            row = {"step": out.steps, "phase": phase, "seconds": round(time.monotonic() - start, 1),
                   "lr": lr_at(progress, s), "label_loss": round(float(label_losses.mean()), 4),
                   **{f"loss_{k}": round(m, 4) if c else None
                      for k, m, c in zip(KINDS, means, seen, strict=True)},
                   "loss": round(float(total.detach()), 4), "batch": len(index), "tokens": int(ids.size)}
            sums.zero_()
            counts.zero_()
            out.history.append(row)
            log(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    out.seconds = time.monotonic() - start
    model.eval()
    return out
