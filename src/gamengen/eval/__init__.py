"""Evaluation of world models (paper §5, DESIGN §7)."""
