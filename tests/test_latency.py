"""Serving latency of exported SavedModels: every input type, batch sizes, refusals."""

import numpy as np
import pytest
import tensorflow as tf

from nascli.errors import NascliError
from official.core import exp_factory, task_factory
from official.vision import registry_imports  # noqa: F401  pylint: disable=unused-import
from tf_vision.serving import export_lib, latency

INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example")


def _resnet10():
  params = exp_factory.get_exp_config("resnet_imagenet")
  params.task.model.backbone.resnet.model_id = 10
  params.task.model.input_size = [32, 32, 3]
  params.task.model.num_classes = 10
  return params, task_factory.get_task(params.task).build_model()


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
  """A ResNet-10 32x32 classifier exported once per input type, plus a fixed-batch export."""
  root = tmp_path_factory.mktemp("latency")
  params, model = _resnet10()
  ckpt = tf.train.Checkpoint(model=model).save(str(root / "ckpt" / "ckpt"))
  out = {t: export_lib.export(params, ckpt, root / t, input_type=t) for t in INPUT_TYPES}
  # No checkpoint: initialized weights are enough to time an architecture.
  out["fixed_batch_2"] = export_lib.export(params, None, root / "fixed", batch_size=2)
  out["params"], out["model"] = params, model
  return out


@pytest.mark.parametrize("input_type", ["image_tensor", "tf_example"])
def test_in_memory_serving_function_is_the_saved_models(exports, input_type):
  """What a search trial times without exporting computes what the SavedModel serves, for the
  same model and inputs; and its report has the SavedModel report's form."""
  function = latency.serving_function(exports["params"], exports["model"], input_type)
  saved = tf.saved_model.load(exports[input_type]).signatures["serving_default"]
  (name,) = saved.structured_input_signature[1]
  inputs = latency.make_inputs(input_type, 3, [32, 32])
  ours, theirs = function(inputs), saved(**{name: inputs})
  assert sorted(ours) == sorted(theirs) and "logits" in ours
  for key in ours:
    assert ours[key].shape[0] == 3
    np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), rtol=1e-5, atol=1e-5)
  report = latency.measure_model_latency(exports["params"], exports["model"],
                                         input_type=input_type, batch_sizes=(1, 2), runs=5)
  on_disk = latency.measure_latency(exports[input_type], input_type=input_type,
                                    batch_sizes=(1, 2), runs=5)
  assert sorted(report) == sorted(on_disk) and sorted(report["batch"]) == ["1", "2"]
  assert report["image_size"] == on_disk["image_size"] == [32, 32]
  assert all(s["runs"] == 5 and s["median_ms"] > 0 for s in report["batch"].values())


@pytest.mark.parametrize("input_type", INPUT_TYPES)
def test_latency_per_input_type(exports, input_type):
  result = latency.measure_latency(exports[input_type], input_type=input_type,
                                   batch_sizes=(1, 8), warmup=3, runs=15)
  assert result["device"] == latency.device_name()
  assert result["input_type"] == input_type
  assert result["image_size"] == [32, 32]  # From params.yaml beside the SavedModel.
  assert sorted(result["batch"]) == ["1", "8"]
  for stats in result["batch"].values():
    assert stats["runs"] == 15
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"]
  one, eight = result["batch"]["1"]["median_ms"], result["batch"]["8"]["median_ms"]
  assert result["per_image_ms_at_largest_batch"] == pytest.approx(eight / 8, abs=2e-4)
  # Batching pays: an image costs less at batch 8 than alone (~3x less on 2 CPU cores).
  assert result["per_image_ms_at_largest_batch"] < one


def test_device_is_cpu_without_gpu():
  if tf.config.list_physical_devices("GPU"):
    assert latency.device_name() not in ("", "CPU")
  else:
    assert latency.device_name() == "CPU"


def test_inputs_match_model_garden_decoders():
  """Bytes decode back to the images; Examples carry them in image/encoded."""
  images = latency.make_inputs("image_tensor", 2, [5, 7]).numpy()
  assert images.shape == (2, 5, 7, 3) and images.dtype == np.uint8
  pngs = latency.make_inputs("image_bytes", 2, [5, 7], image_format="png").numpy()
  np.testing.assert_array_equal([tf.io.decode_png(p).numpy() for p in pngs], images)
  jpegs = latency.make_inputs("image_bytes", 2, [5, 7]).numpy()
  assert all(tf.io.decode_image(j).shape == (5, 7, 3) for j in jpegs)
  examples = latency.make_inputs("tf_example", 2, [5, 7], image_format="png").numpy()
  parsed = tf.io.parse_example(examples, {
      "image/encoded": tf.io.FixedLenFeature((), tf.string),
      "image/height": tf.io.FixedLenFeature((), tf.int64),
      "image/width": tf.io.FixedLenFeature((), tf.int64)})
  assert parsed["image/height"].numpy().tolist() == [5, 5]
  assert parsed["image/width"].numpy().tolist() == [7, 7]
  np.testing.assert_array_equal(
      [tf.io.decode_png(p).numpy() for p in parsed["image/encoded"].numpy()], images)


def test_export_folder_and_explicit_size(exports):
  export_dir = exports["image_tensor"].removesuffix("/saved_model")
  result = latency.measure_latency(export_dir, batch_sizes=(2,), warmup=0, runs=2,
                                   image_size=[48, 40])
  assert result["image_size"] == [48, 40]
  assert list(result["batch"]) == ["2"] and result["batch"]["2"]["runs"] == 2
  assert result["per_image_ms_at_largest_batch"] > 0


def test_fixed_batch_export(exports):
  result = latency.measure_latency(exports["fixed_batch_2"], batch_sizes=(2,), warmup=1, runs=3)
  assert result["batch"]["2"]["median_ms"] > 0
  with pytest.raises(NascliError, match="batch size 2 only"):
    latency.measure_latency(exports["fixed_batch_2"], batch_sizes=(1, 8), runs=1)


@pytest.mark.parametrize("kwargs, match", [
    ({"input_type": "tflite"}, "image_tensor, image_bytes, tf_example"),
    ({"batch_sizes": ()}, "batch_sizes"),
    ({"batch_sizes": (0, 8)}, "batch_sizes"),
    ({"runs": 0}, "runs"),
    ({"warmup": -1}, "warmup"),
    ({"image_size": [32]}, "image_size"),
    ({"image_format": "gif"}, "jpeg, png"),
])
def test_bad_arguments(exports, kwargs, match):
  with pytest.raises(NascliError, match=match) as excinfo:
    latency.measure_latency(exports["image_tensor"], **kwargs)
  assert "\n" not in str(excinfo.value)


def test_not_a_saved_model(tmp_path):
  with pytest.raises(NascliError, match="not a SavedModel folder"):
    latency.measure_latency(tmp_path)


def test_input_type_mismatch(exports):
  with pytest.raises(NascliError, match="takes string inputs"):
    latency.measure_latency(exports["image_bytes"], input_type="image_tensor", runs=1)
  # Both take strings: the first call reveals an Example is not an image.
  with pytest.raises(NascliError, match="rejected tf_example inputs") as excinfo:
    latency.measure_latency(exports["image_bytes"], input_type="tf_example", warmup=0, runs=1)
  assert "\n" not in str(excinfo.value)
