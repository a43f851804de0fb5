"""Models: configs, weights and tokenizers from Hugging Face layouts, and the embedded demo model.

The compact Qwen3.5 is runtime/reference/qwen3_5.py: the runtime imports this package, never the reverse.
"""

from pathlib import Path

# The demo decision model shipped in the package (issue 7): a 7.6M-parameter Qwen3.5 trained by
# tools/train_demo.py on synthetic System One requests; `flidec compile` and `flidec run` default to it.
# What it knows and how well: demo/MODEL_CARD.md.
DEMO_MODEL = Path(__file__).with_name("demo")
