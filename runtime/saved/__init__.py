"""Saved states: what resuming a growing state needs, kept at chunk-aligned points of its token prefix.

point.py holds one saved point and the layout that fixes its tensors' shapes; keys.py addresses points by
their token prefix; tiers.py keeps points in memory within budgets; checkpoints.py writes and verifies them
on disk; store.py puts the tiers together; resume.py turns a plan into one that starts from a point.
"""
