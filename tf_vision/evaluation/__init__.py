"""Evaluation helpers Model Garden lacks."""
