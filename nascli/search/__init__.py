"""The local NAS engine: a journaled, resumable search driven by pyglove (no TensorFlow here)."""
