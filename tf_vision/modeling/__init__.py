"""Models of the TF-vision trainer: backbones registered in Model Garden's backbone factory."""
