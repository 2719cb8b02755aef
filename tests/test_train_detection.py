"""RetinaNet + SpineNet-Mobile on the synthetic `shapes` set: trains, and eval gives COCO AP."""

import json
import math

import pytest

from nascli.data.convert import ShardingOptions, convert
from nascli.data.source import ConvertOptions


# Slow tier: the default tier runs Model Garden's RetinaNet pipeline on the shards
# (tests/test_shapes_source.py), exports RetinaNet (tests/test_export_lib.py) and builds searched
# SpineNets (tests/test_tunable_backbones.py).
@pytest.mark.slow
def test_retinanet_on_shapes_trains_and_evaluates_with_coco_metrics(cli, tmp_path):
  data = tmp_path / "shapes"
  convert("shapes", data, ConvertOptions(num_samples=32, validation_size=8, progress=False),
          ShardingOptions(num_shards=2, processes=1))
  model_dir = tmp_path / "det"
  code, out, err = cli("train", "--model", "retinanet", "--dataset_dir", data,
                       "--model_dir", model_dir, "--json", "--params_override",
                       "trainer.train_steps=10,trainer.steps_per_loop=5")
  assert code == 0, err
  result = json.loads(out)
  assert result["step"] == 10
  metrics = result["eval_metrics"]
  for key in ("AP", "AP50", "AP75", "ARmax100", "cls_loss", "box_loss"):
    assert key in metrics, key
  assert all(math.isfinite(v) for v in metrics.values())
  assert 0.0 <= metrics["AP50"] <= 1.0
  # Ground truth for COCO came from the validation records: 8 images, classes 1..3.
  gt = json.loads((model_dir / "validation_annotations.json").read_text())
  assert len(gt["images"]) == 8
  assert {c["id"] for c in gt["categories"]} == {1, 2, 3}
  assert {c["name"] for c in gt["categories"]} == {"rectangle", "ellipse", "triangle"}
  assert len(gt["annotations"]) >= 8

  code, out, err = cli("eval", "--model_dir", model_dir)
  assert code == 0, err
  line = out.strip()
  assert line.startswith("result: {'AP': ") and "'AP50': " in line and "'AP75': " in line
  assert line.endswith(f"ckpt={model_dir}/ckpt-10")
  ap50 = float(line.split("'AP50': ")[1].split(",")[0])
  assert abs(ap50 - metrics["AP50"]) < 1e-9
