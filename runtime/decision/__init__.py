"""Decision formats: how a released decision model is asked and read (docs/FORMATS.md).

format.py is the typed description an artifact stores (format.json); render.py renders one request's prompts
from it; reading.py plans a request's segments and turns label logits into answers. The compiler resolves a
description from a checkpoint's decision_config.json (flidec/formats/template_v1.py); the runtime needs
nothing but the artifact.
"""
