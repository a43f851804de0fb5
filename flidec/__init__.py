"""flidec: an ahead-of-time compiler for decision trees run on decision models (see docs/DESIGN.md)."""

__version__ = "0.1.0"
