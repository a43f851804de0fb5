"""The training pieces on CPU: the torch Gated DeltaNet path, batching, noise, schedule, a micro run that
learns, and a saved model directory that flidec loads."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from demo_loop import Schedule, batches, collate, lr_at, noisy_targets, train
from demo_model import SIZES, build_model, check_torch_gdn, label_logits, loss, text_config
from demo_render import encode_examples, set_examples

from flidec.models.config import TextConfig
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import load_weights


def test_transformers_runs_its_torch_gdn_path():
    check_torch_gdn()


def test_batches_respect_the_token_budget_and_cover_every_example():
    lengths = np.random.default_rng(0).integers(20, 200, size=500)
    seen = []
    gen = batches(lengths, 1000, np.random.default_rng(1))
    while len(seen) < 500:
        b = next(gen)
        assert len(b) == 1 or lengths[b].max() * len(b) <= 1000
        seen += b.tolist()
    assert sorted(seen) == list(range(500))


def test_noisy_targets_rate_and_range():
    rng = np.random.default_rng(0)
    answers = rng.integers(0, 5, size=20000)
    options = np.full(20000, 5)
    t = noisy_targets(answers, options, 0.1, rng)
    assert 0.09 < (t != answers).mean() < 0.11
    assert t.min() >= 0 and t.max() <= 4
    assert (noisy_targets(answers, options, 0.0, rng) == answers).all()


def test_lr_warms_up_then_anneals():
    s = Schedule(lr=1.0, warmup_frac=0.1, min_lr_frac=0.05)
    assert lr_at(0.05, s) == pytest.approx(0.5)
    assert lr_at(0.1, s) == pytest.approx(1.0)
    assert lr_at(1.0, s) == pytest.approx(0.05)
    assert lr_at(0.55, s) == pytest.approx(0.05 + 0.95 * 0.5)




@pytest.fixture(scope="module")
def micro(demo_dir, render):
    tok = load_tokenizer(demo_dir)
    config = text_config(SIZES["micro"], -(-tok.vocab_size // 64) * 64, tok.pad_id, tok.eos_id)
    # the 12 shortest of 200 requests: a set a micro model can fit in a few dozen CPU steps
    examples = set_examples(11, 200, noise=0.0)
    enc = encode_examples(render, examples)
    keep = np.argsort(enc.lengths, kind="stable")[:12]
    return tok, config, encode_examples(render, [examples[i] for i in keep])


def _set_loss(model, enc, pad_id) -> float:
    ids, lengths = collate(enc, np.arange(len(enc)), pad_id)
    with torch.no_grad():
        _, label_loss = loss(model, None, torch.from_numpy(ids), torch.from_numpy(lengths),
                                 torch.from_numpy(enc.label_ids.astype(np.int64)),
                                 torch.from_numpy(enc.option_ends.astype(np.int64)),
                                 torch.from_numpy(enc.answers), lm_weight=0.0, pointer_weight=0.0)
    return float(label_loss.mean())


def test_micro_run_reduces_the_loss(micro):
    tok, config, enc = micro
    model = build_model(config, seed=0)
    before = _set_loss(model, enc, tok.pad_id)
    s = Schedule(lr=5e-3, warmup_frac=0.0, noise=0.0, batch_tokens=100_000, max_steps=40, lm_weight=0.0)
    start = time.monotonic()
    log = train(model, enc, tok.pad_id, s, torch.device("cpu"), log=lambda _: None, log_every=10)
    assert log.steps == 40 and log.examples == 40 * len(enc) and len(log.history) == 4
    after = _set_loss(model, enc, tok.pad_id)
    assert after < 0.5 * before, (before, after, time.monotonic() - start)


def test_label_logits_read_the_last_prompt_token():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(6, 2)
            self.emb.weight.data = torch.tensor([[0., 0], [1, 0], [0, 1], [1, 1], [2, 0], [0, 2]])

        def get_output_embeddings(self):
            return self.emb

    hidden = torch.zeros(2, 3, 2)
    hidden[0, 1] = torch.tensor([1.0, 2.0])  # example 0 has length 2
    hidden[1, 2] = torch.tensor([3.0, -1.0])  # example 1 has length 3
    label_ids = torch.tensor([[1, 2, -1], [3, 4, 5]])
    got = label_logits(Tied(), hidden, torch.tensor([2, 3]), label_ids)
    want = torch.tensor([[1.0, 2.0, -math.inf], [2.0, 6.0, -2.0]])
    assert torch.equal(got, want)


def test_saved_model_loads_in_flidec(micro, tmp_path):
    _, config, _ = micro
    model = build_model(config, seed=0).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    cfg = TextConfig.from_dir(tmp_path)
    assert cfg.layer_types == ("linear_attention",) * 3 + ("full_attention",) and cfg.tie_word_embeddings
    weights = load_weights(tmp_path, torch.bfloat16)
    assert torch.equal(weights["embed_tokens.weight"], model.model.embed_tokens.weight)
