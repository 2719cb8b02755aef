"""nascli: NAS, training and data tooling on TensorFlow Model Garden."""

__version__ = "0.1.0"
