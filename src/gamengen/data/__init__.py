"""Trajectory store: format, writer, reader, windows, verify, export (docs/dataset.md)."""
