"""SavedModel export on Model Garden's exporter, and serving latency measurement."""
