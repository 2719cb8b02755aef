"""Experiment and model configs of the TF-vision trainer (Model Garden hyperparams dataclasses)."""
