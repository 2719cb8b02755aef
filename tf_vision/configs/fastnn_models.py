"""FastNN's `model_name` values as Model Garden backbones.

FastNN named TF-slim networks; the ones with a Model Garden counterpart map onto its backbone
config, the others are refused with the list of names that work.
"""

from typing import Any

from nascli.errors import NascliError


def _resnet(depth: int) -> dict[str, Any]:
  return {"type": "resnet", "resnet": {"model_id": depth}}


def _mobilenet(model_id: str, scale: float) -> dict[str, Any]:
  return {"type": "mobilenet", "mobilenet": {"model_id": model_id, "filter_size_scale": scale}}


# FastNN (slim) name -> task.model.backbone override.
MODELS: dict[str, dict[str, Any]] = {
    **{f"resnet_v1_{d}": _resnet(d) for d in (50, 101, 152, 200)},
    # Model Garden's ResNet is v1.5; slim's v2 (pre-activation) has no counterpart, the
    # same-depth v1.5 is the closest.
    **{f"resnet_v2_{d}": _resnet(d) for d in (50, 101, 152, 200)},
    "mobilenet_v1": _mobilenet("MobileNetV1", 1.0),
    "mobilenet_v1_075": _mobilenet("MobileNetV1", 0.75),
    "mobilenet_v1_050": _mobilenet("MobileNetV1", 0.5),
    "mobilenet_v1_025": _mobilenet("MobileNetV1", 0.25),
    "mobilenet_v2": _mobilenet("MobileNetV2", 1.0),
    "mobilenet_v2_140": _mobilenet("MobileNetV2", 1.4),
    "mobilenet_v2_035": _mobilenet("MobileNetV2", 0.35),
    "mnasnet_a1": {"type": "mnasnet", "mnasnet": {"model_id": "MnasNetA1"}},
}


def backbone_override(model_name: str) -> dict[str, Any]:
  """The `task.model.backbone` override for a FastNN model name."""
  if model_name not in MODELS:
    raise NascliError(f"FastNN model_name {model_name!r} has no Model Garden counterpart;"
                      f" known: {', '.join(sorted(MODELS))} (or choose any backbone with"
                      " --params_override task.model.backbone.type=...)")
  return MODELS[model_name]
