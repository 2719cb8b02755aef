"""The TF-vision trainer on Model Garden: configs, tunable backbones, search spaces, tasks."""
