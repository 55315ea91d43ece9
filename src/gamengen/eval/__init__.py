"""Evaluation of world models (paper §5, docs/evaluation.md)."""
