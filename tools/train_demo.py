"""Train flidec's embedded demo model in one command: data, tokenizer, training, held-out eval, model dir.

    python tools/train_demo.py --out /tmp/demo --device cuda --time-budget-s 480

Steps: train a byte-level BPE on synthetic requests (demo_data) and write it with its chat template into
--out; encode the training set through flidec's next_token format in worker processes; train a Qwen3.5
(Qwen3_5ForCausalLM, transformers' torch Gated DeltaNet path) until --time-budget-s seconds after the
script started (or --max-steps), the first --curriculum-frac of it on a separately encoded easy mix
(verbatim choices with 2-4 options; demo_data.verbatim_choice); round the weights to bf16, save the HF
directory (config.json, model.safetensors, generation_config.json, tokenizer files), evaluate on a held-out
set, then write eval.json and MODEL_CARD.md there and print a summary. The budget covers everything up to
the end of training; evaluation and saving come after it (a few seconds on an H200).
Diagnostics (issue 7): --asks restricts every training request (and the easy mix) to some ask types,
--verbatim-only makes every choice of the training set a verbatim one for the whole run, --layer-pattern
sets which layers are Gated DeltaNet (l) and which full attention (f). eval.json's `eval` is always the
normal all-types held-out mix; a run whose training mix differs adds `eval_mix`, held-out requests drawn
like its training set.
Run from anywhere; flidec need not be installed (the repo's package mapping is set up by hand then).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

START = time.monotonic()
TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
sys.path.insert(0, str(TOOLS))


def ensure_flidec() -> None:
    """Make `flidec` and its mapped subpackages importable from the checkout when it is not installed."""
    try:
        import flidec.runtime.next_token  # noqa: F401
        return
    except ImportError:
        for name in [m for m in sys.modules if m == "flidec" or m.startswith("flidec.")]:
            del sys.modules[name]
    # pyproject.toml's package-dir: flidec.ir lives in ir/, and so on
    for name, folder in (("flidec", "flidec"), ("flidec.ir", "ir"), ("flidec.passes", "passes"),
                         ("flidec.codegen", "codegen"), ("flidec.runtime", "runtime")):
        spec = importlib.util.spec_from_file_location(name, REPO / folder / "__init__.py",
                                                      submodule_search_locations=[str(REPO / folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="model directory to write")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--time-budget-s", type=float, default=480.0,
                   help="seconds from start to the end of training")
    p.add_argument("--max-steps", type=int, default=1_000_000)
    p.add_argument("--size", default="demo", help="demo (the shipped shape) or micro (tests)")
    p.add_argument("--train-examples", type=int, default=400_000)
    p.add_argument("--eval-examples", type=int, default=3000)
    p.add_argument("--tokenizer-examples", type=int, default=30_000)
    p.add_argument("--vocab-size", type=int, default=4096, help="BPE target (the data may reach fewer)")
    p.add_argument("--batch-tokens", type=int, default=32768, help="padded tokens per training batch")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lm-weight", type=float, default=0.05, help="weight of the next-token loss on prompts")
    p.add_argument("--pointer-weight", type=float, default=1.0,
                   help="weight of the training-only option pointer")
    p.add_argument("--noise", type=float, default=0.06, help="training label noise")
    p.add_argument("--workers", type=int, default=max(1, min(16, os.cpu_count() or 1) - 1))
    p.add_argument("--curriculum-frac", type=float, default=0.3,
                   help="fraction of the training budget spent on the easy mix first (0: no curriculum)")
    p.add_argument("--easy-examples", type=int, default=100_000, help="distinct requests in the easy mix")
    p.add_argument("--asks", type=parse_asks, default="all",
                   help="ask types of the training requests: all, or a comma list of noul, choice, score")
    p.add_argument("--verbatim-only", action="store_true",
                   help="every training choice is a verbatim one (the easy mix's kind) for the whole run; "
                        "no curriculum then")
    p.add_argument("--layer-pattern", type=parse_layer_pattern, default=LAYER_PATTERN,
                   help="l (Gated DeltaNet) / f (full attention) letters repeated over the layers: "
                        f"{LAYER_PATTERN} (default, 3:1), f (all attention), llf, ...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=50)
    args = p.parse_args(argv)
    if args.verbatim_only:
        args.curriculum_frac = 0.0  # the whole run already draws the easy kind of choice
    return args


LAYER_PATTERN = "lllf"  # demo_model.LAYER_PATTERN (not imported here: that module imports torch)


def parse_asks(text: str) -> tuple[str, ...]:
    from demo_data import parse_kinds

    try:
        return parse_kinds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_layer_pattern(text: str) -> str:
    if not text or set(text) - {"l", "f"}:
        raise argparse.ArgumentTypeError(f"letters l (Gated DeltaNet) and f (full attention) only; got "
                                         f"{text!r}")
    return text


def train_mix(args: argparse.Namespace) -> dict:
    """How the training set is drawn (demo_render.encode_set / set_examples keywords): --asks,
    --verbatim-only."""
    return {"verbatim": args.verbatim_only, "kinds": tuple(args.asks)}


def mixed(args: argparse.Namespace) -> bool:
    """Whether the run's training requests differ from the normal mix (so eval.json gets `eval_mix`)."""
    from demo_data import KINDS

    return tuple(args.asks) != KINDS or args.verbatim_only


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_flidec()
    import demo_model

    demo_model.use_torch_gdn()
    import demo_card
    import demo_eval
    import demo_loop
    import demo_render
    import demo_tokenizer
    import numpy as np
    import torch
    from transformers import GenerationConfig

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - START:6.1f}s] {msg}", flush=True)

    device = torch.device(args.device)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    train_seed, eval_seed, tok_seed, easy_seed = seeds(args).values()

    texts = [demo_render.corpus_text(ex)
             for ex in demo_render.set_examples(tok_seed, args.tokenizer_examples)]
    tokenizer = demo_tokenizer.save_tokenizer(demo_tokenizer.train_tokenizer(texts, args.vocab_size), out)
    render = demo_render.renderer(tokenizer)
    demo_tokenizer.check_labels(render.fmt)
    pad_id, eos_id = tokenizer.pad_id, tokenizer.eos_id
    log(f"tokenizer: {tokenizer.vocab_size} tokens; every label is one token")

    train_set = demo_render.encode_set(out, train_seed, args.train_examples, args.workers, args.noise,
                                       **train_mix(args))
    lengths = train_set.lengths
    log(f"train set: {len(train_set)} requests (asks {','.join(args.asks)}"
        f"{', every choice verbatim, no curriculum' if args.verbatim_only else ''}), "
        f"prompt tokens mean {lengths.mean():.0f} max {lengths.max()}")
    easy_set = None
    if args.curriculum_frac > 0:
        easy_set = demo_render.encode_set(out, easy_seed, args.easy_examples, args.workers, args.noise,
                                          verbatim=True, kinds=args.asks)
        log(f"easy set (first {100 * args.curriculum_frac:.0f}% of training): {len(easy_set)} requests, "
            f"prompt tokens mean {easy_set.lengths.mean():.0f}")
    chance = {"full": demo_loop.chance_losses(train_set),
              **({"easy": demo_loop.chance_losses(easy_set)} if easy_set is not None else {})}
    log("chance label loss per type: " + "; ".join(
        f"{name} " + " ".join(f"{k}={v:.2f}" for k, v in c.items()) for name, c in chance.items()))

    size = demo_model.SIZES[args.size]
    vocab = -(-tokenizer.vocab_size // 64) * 64
    config = demo_model.text_config(size, vocab, pad_id, eos_id, args.layer_pattern)
    model = demo_model.build_model(config, args.seed).to(device)
    params = demo_model.parameter_count(model)
    log(f"model: {params / 1e6:.2f}M parameters, layer pattern {args.layer_pattern}: "
        + "".join("f" if t == "full_attention" else "l" for t in config.layer_types))

    schedule = demo_loop.Schedule(lr=args.lr, batch_tokens=args.batch_tokens, lm_weight=args.lm_weight,
                                   pointer_weight=args.pointer_weight, noise=args.noise,
                                   deadline=START + args.time_budget_s, max_steps=args.max_steps,
                                   seed=args.seed, curriculum_frac=args.curriculum_frac)
    trained = demo_loop.train(model, train_set, pad_id, schedule, device, log, args.log_every, easy_set)
    log(f"trained: {trained.steps} steps ({trained.easy_steps} on the easy mix), {trained.examples} requests "
        f"in {trained.seconds:.0f} s")

    model = model.to(torch.bfloat16)  # the shipped weights; evaluated below as flidec reads them, in float32
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out)
    GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False).save_pretrained(out)
    model = model.float()

    eval_examples = held_out_examples(args)
    results_eval = demo_eval.evaluate(model, render, eval_examples, pad_id, device)
    results_mix = (demo_eval.evaluate(model, render, held_out_mix(args), pad_id, device) if mixed(args)
                   else None)
    shipped = sorted(f.name for f in out.iterdir() if f.is_file())
    megabytes = sum((out / f).stat().st_size for f in shipped) / 1e6
    run = {
        "command": " ".join(["python", "tools/train_demo.py", *(argv if argv is not None else sys.argv[1:])]),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "size": dataclasses.asdict(size), "layer_pattern": args.layer_pattern,
        "layer_types": list(model.config.layer_types), "asks": list(args.asks),
        "verbatim_only": args.verbatim_only,
        "parameters": params, "vocab_size": tokenizer.vocab_size, "config_vocab_size": vocab,
        "train_examples": len(train_set), "train_seed": train_seed, "eval_seed": eval_seed,
        "curriculum_frac": args.curriculum_frac,
        "easy_examples": len(easy_set) if easy_set is not None else 0,
        "easy_seed": easy_seed, "easy_steps": trained.easy_steps, "chance_label_loss": chance,
        "noise": args.noise, "lm_weight": args.lm_weight, "pointer_weight": args.pointer_weight,
        "lr": args.lr, "batch_tokens": args.batch_tokens,
        "steps": trained.steps, "examples_seen": trained.examples, "train_seconds": trained.seconds,
        "total_seconds": time.monotonic() - START, "model_dir_megabytes": megabytes,
        "prompt_tokens_mean": float(np.mean(lengths)), "history": trained.history,
    }
    results = {"eval": results_eval, **({"eval_mix": results_mix} if results_mix else {}), "run": run}
    (out / "eval.json").write_text(json.dumps(json_safe(results), indent=2) + "\n", encoding="utf-8")
    demo_card.write_card(out, results)
    log(summary(results))
    return results


def seeds(args: argparse.Namespace) -> dict[str, int]:
    """Each set's seed (train, eval, tokenizer, easy): no two sets share one."""
    return {"train": 1000 + args.seed, "eval": 2000 + args.seed, "tokenizer": 3000 + args.seed,
            "easy": 4000 + args.seed}


def held_out_examples(args: argparse.Namespace) -> list:
    """The evaluation set: the normal mix only, whatever the curriculum, --asks or --verbatim-only, so runs
    stay comparable."""
    import demo_render

    return demo_render.set_examples(seeds(args)["eval"], args.eval_examples, args.noise)


def held_out_mix(args: argparse.Namespace) -> list:
    """The second evaluation set of a run whose training mix differs from the normal one: held-out requests
    (the eval seed, --eval-examples of them) drawn like its training set (--asks types, verbatim choices
    under --verbatim-only)."""
    import demo_render

    return demo_render.set_examples(seeds(args)["eval"], args.eval_examples, args.noise, **train_mix(args))


def json_safe(value):
    """NaN (a type with no example: its chance loss, an empty set's accuracy) as null, so eval.json is
    JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def summary(results: dict) -> str:
    ev, run = results["eval"], results["run"]
    kinds = " ".join(f"{k}={100 * ev[f'accuracy_{k}']:.1f}%" for k in ("noul", "choice", "score"))
    line = (f"SUMMARY accuracy={100 * ev['accuracy']:.1f}% ({kinds}) ece={ev['ece']:.3f} "
            f"order={ev['order_points']:.2f}pt flips={100 * ev['order_flips']:.1f}% "
            f"passed={ev['passed']} | steps={run['steps']} seen={run['examples_seen']} "
            f"params={run['parameters'] / 1e6:.2f}M dir={run['model_dir_megabytes']:.1f}MB "
            f"total={run['total_seconds']:.0f}s layers={run['layer_pattern']}")
    if "eval_mix" in results:
        mix = results["eval_mix"]
        per = " ".join(f"{k}={100 * mix[f'accuracy_{k}']:.1f}%" for k in run["asks"])
        line += (f" | mix[asks={','.join(run['asks'])}{' verbatim' if run['verbatim_only'] else ''}] "
                 f"accuracy={100 * mix['accuracy']:.1f}% ({per})")
    return line


if __name__ == "__main__":
    main()
