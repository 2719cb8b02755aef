"""Data layer: data set sources, sharded TFRecord writing and verification."""
