"""SavedModel export through Model Garden's exporter: served outputs equal the trained model's."""

import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from nascli.errors import NascliError, OutputError
from official.core import exp_factory, task_factory
from official.modeling import hyperparams
from official.vision import registry_imports  # noqa: F401  pylint: disable=unused-import
from official.vision.configs import image_classification as ic_config
from official.vision.ops import preprocess_ops
from tf_vision.configs import experiment_configs
from tf_vision.serving import export_lib

INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example")
SIZE = 32


def tiny_classifier_params():
  params = exp_factory.get_exp_config("resnet_imagenet")
  params.task.model.backbone.resnet.model_id = 10
  params.task.model.input_size = [SIZE, SIZE, 3]
  params.task.model.num_classes = 10
  return params


def perturb(model, stddev=0.05, bn_stats=True, seed=0):
  """Random weights (and batch-norm statistics), so outputs are far from uniform and a model that
  did not load the checkpoint cannot match."""
  rng = tf.random.Generator.from_seed(seed)
  for v in model.variables:
    if "moving_variance" in v.name:
      if bn_stats:
        v.assign(rng.uniform(v.shape, 0.5, 2.0))
    elif "moving_mean" in v.name:
      if bn_stats:
        v.assign(rng.normal(v.shape, stddev=0.2))
    else:
      v.assign_add(rng.normal(v.shape, stddev=stddev))


def save_checkpoint(model, folder):
  return tf.train.Checkpoint(model=model).save(str(Path(folder) / "ckpt"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  """A trained-looking ResNet-10, its checkpoint, and one export per input type."""
  root = tmp_path_factory.mktemp("export")
  params = tiny_classifier_params()
  tf_keras.utils.set_random_seed(0)
  model = task_factory.get_task(params.task).build_model()
  perturb(model)
  ckpt = save_checkpoint(model, root / "ckpt")
  # The image_tensor export replaces a stale folder: overwrite is exercised here, not re-exported.
  (root / "image_tensor").mkdir()
  (root / "image_tensor" / "stale.txt").write_text("old export")
  saved = {t: export_lib.export(params, ckpt, root / t, input_type=t, overwrite=True)
           for t in INPUT_TYPES}
  return {"root": root, "params": params, "model": model, "ckpt": ckpt, "saved": saved}


def reference_probs(model, images, quantize):
  """MG's ClassificationModule preprocessing by hand: center crop, bilinear resize, normalize.

  For image_bytes and tf_example MG resizes inside the decoder and casts back to uint8 before
  normalizing (`quantize`).
  """
  batch = []
  for image in images:
    x = tf.cast(image, tf.float32)
    x = preprocess_ops.center_crop_image(x)  # train_data.aug_crop defaults to True.
    x = tf.image.resize(x, [SIZE, SIZE], method=tf.image.ResizeMethod.BILINEAR)
    if quantize:
      x = tf.cast(tf.cast(x, tf.uint8), tf.float32)
    batch.append(preprocess_ops.normalize_image(
        x, offset=preprocess_ops.MEAN_RGB, scale=preprocess_ops.STDDEV_RGB))
  return tf.nn.softmax(model(tf.stack(batch), training=False)).numpy()


def served_input(input_type, images):
  if input_type == "image_tensor":
    return tf.constant(images)
  pngs = [tf.io.encode_png(image).numpy() for image in images]
  if input_type == "image_bytes":
    return tf.constant(pngs)
  examples = [tf.train.Example(features=tf.train.Features(feature={
      "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}))
              .SerializeToString() for png in pngs]
  return tf.constant(examples)


@pytest.mark.parametrize("input_type", INPUT_TYPES)
def test_served_probs_equal_model_probs(classifier, input_type):
  # Not the model size: the served graph crops and resizes.
  images = np.random.default_rng(1).integers(0, 256, (4, 40, 48, 3), np.uint8)
  fn = tf.saved_model.load(classifier["saved"][input_type]).signatures["serving_default"]
  out = fn(inputs=served_input(input_type, images))
  expected = reference_probs(classifier["model"], images, quantize=input_type != "image_tensor")
  assert set(out) == {"logits", "probs"}
  assert out["probs"].shape == (4, 10)
  assert expected.max(axis=1).min() > 0.2  # Far from uniform (0.1): a real comparison.
  np.testing.assert_allclose(out["probs"].numpy(), expected, atol=1e-5)
  np.testing.assert_allclose(tf.nn.softmax(out["logits"]).numpy(), expected, atol=1e-5)


def test_signature_dtypes_and_dynamic_batch(classifier):
  for input_type, dtype in [("image_tensor", tf.uint8), ("image_bytes", tf.string),
                            ("tf_example", tf.string)]:
    fn = tf.saved_model.load(classifier["saved"][input_type]).signatures["serving_default"]
    spec = fn.structured_input_signature[1]["inputs"]
    assert spec.dtype == dtype
    assert spec.shape[0] is None


def test_export_layout_and_params_yaml(classifier):
  root = classifier["root"]
  for input_type in INPUT_TYPES:
    export_dir = root / input_type
    assert classifier["saved"][input_type] == str(export_dir / "saved_model")
    assert tf.saved_model.contains_saved_model(str(export_dir / "saved_model"))
    assert sorted(os.listdir(export_dir)) == ["checkpoint", "params.yaml", "saved_model"]
    # Checkpoint state written in staging must still resolve after the rename.
    latest = tf.train.latest_checkpoint(str(export_dir / "checkpoint"))
    assert latest is not None and latest.startswith(str(export_dir))
    reloaded = hyperparams.override_params_dict(
        exp_factory.get_exp_config("resnet_imagenet"), str(export_dir / "params.yaml"),
        is_strict=True)
    assert reloaded.task.model.as_dict() == classifier["params"].task.model.as_dict()
    assert reloaded.task.model.backbone.resnet.model_id == 10
  # Overwrite replaced the stale folder; no staging or backup folders are left beside it.
  assert not (root / "image_tensor" / "stale.txt").exists()
  assert sorted(p.name for p in root.iterdir()) == ["ckpt", *sorted(INPUT_TYPES)]


def one_line_error(excinfo):
  message = str(excinfo.value)
  assert "\n" not in message
  return message


def test_bad_input_type(classifier, tmp_path):
  with pytest.raises(NascliError) as excinfo:
    export_lib.export(classifier["params"], classifier["ckpt"], tmp_path / "x",
                      input_type="tflite")
  message = one_line_error(excinfo)
  assert "'tflite'" in message
  assert all(t in message for t in INPUT_TYPES)
  assert not (tmp_path / "x").exists()


def test_missing_checkpoint(classifier, tmp_path):
  missing = tmp_path / "nowhere" / "ckpt-7"
  with pytest.raises(NascliError) as excinfo:
    export_lib.export(classifier["params"], str(missing), tmp_path / "x")
  assert str(missing) in one_line_error(excinfo)
  (tmp_path / "empty").mkdir()
  with pytest.raises(NascliError) as excinfo:
    export_lib.export(classifier["params"], tmp_path / "empty", tmp_path / "x")
  assert str(tmp_path / "empty") in one_line_error(excinfo)
  assert os.listdir(tmp_path) == ["empty"]


def test_checkpoint_folder_and_index_file_resolve(classifier):
  ckpt = classifier["ckpt"]
  assert export_lib._resolve_checkpoint(str(Path(ckpt).parent)) == ckpt  # pylint: disable=protected-access
  assert export_lib._resolve_checkpoint(ckpt + ".index") == ckpt  # pylint: disable=protected-access


def test_existing_export_dir_is_refused(classifier, tmp_path):
  target = tmp_path / "taken"
  target.mkdir()
  (target / "keep.txt").write_text("mine")
  with pytest.raises(OutputError) as excinfo:
    export_lib.export(classifier["params"], classifier["ckpt"], target)
  assert str(target) in one_line_error(excinfo)
  assert (target / "keep.txt").read_text() == "mine"
  assert sorted(os.listdir(tmp_path)) == ["taken"]


def test_checkpoint_of_another_architecture(classifier, tmp_path):
  params = tiny_classifier_params()
  params.task.model.backbone.resnet.model_id = 18
  with pytest.raises(NascliError) as excinfo:
    export_lib.export(params, classifier["ckpt"], tmp_path / "x")
  message = one_line_error(excinfo)
  assert classifier["ckpt"] in message and "does not fit" in message
  assert os.listdir(tmp_path) == []


def test_task_without_export_module(classifier, tmp_path):
  params = exp_factory.get_exp_config("seg_deeplabv3_pascal")
  with pytest.raises(NascliError) as excinfo:
    export_lib.export(params, classifier["ckpt"], tmp_path / "x")
  message = one_line_error(excinfo)
  assert "SemanticSegmentationTask" in message and "ImageClassificationTask" in message


def test_failed_export_leaves_nothing(classifier, tmp_path, monkeypatch):
  def broken(**kwargs):
    Path(kwargs["export_dir"], "saved_model").mkdir(parents=True)
    raise RuntimeError("disk gone")

  monkeypatch.setattr(export_lib.export_saved_model_lib, "export_inference_graph", broken)
  with pytest.raises(RuntimeError):
    export_lib.export(classifier["params"], classifier["ckpt"], tmp_path / "x")
  assert os.listdir(tmp_path) == []


def test_nascli_experiment_exports(tmp_path):
  """nascli's own task config (a subclass of MG's) finds MG's ClassificationModule."""
  params = experiment_configs.get_experiment("nascli_classification")
  assert type(params.task) is not ic_config.ImageClassificationTask
  tf_keras.utils.set_random_seed(0)
  model = task_factory.get_task(params.task).build_model()
  perturb(model)
  ckpt = save_checkpoint(model, tmp_path / "ckpt")
  saved = export_lib.export(params, ckpt, tmp_path / "export")
  images = np.random.default_rng(3).integers(0, 256, (2, SIZE, SIZE, 3), np.uint8)
  out = tf.saved_model.load(saved).signatures["serving_default"](inputs=tf.constant(images))
  # aug_crop is off in this experiment and the images have the model's size: normalize only.
  normalized = preprocess_ops.normalize_image(
      tf.cast(images, tf.float32), offset=preprocess_ops.MEAN_RGB,
      scale=preprocess_ops.STDDEV_RGB)
  expected = tf.nn.softmax(model(normalized, training=False)).numpy()
  np.testing.assert_allclose(out["probs"].numpy(), expected, atol=1e-5)


def tiny_retinanet_params():
  params = exp_factory.get_exp_config("retinanet_resnetfpn_coco")
  model = params.task.model
  model.backbone.resnet.model_id = 10
  model.input_size = [128, 128, 3]  # A multiple of 2**max_level (7).
  model.num_classes = 3
  model.decoder.fpn.num_filters = 16
  model.head.num_filters = 16
  model.head.num_convs = 1
  model.norm_activation.use_sync_bn = False
  model.detection_generator.max_num_detections = 10
  model.detection_generator.pre_nms_score_threshold = 0.0  # Untrained scores are low.
  params.task.train_data.dtype = "float32"
  params.task.validation_data.dtype = "float32"
  params.runtime.mixed_precision_dtype = "float32"
  return params


def test_retinanet_export_matches_model(tmp_path):
  params = tiny_retinanet_params()
  tf_keras.utils.set_random_seed(0)
  model = task_factory.get_task(params.task).build_model()
  perturb(model, stddev=0.03, bn_stats=False)  # Spread scores without saturating them.
  ckpt = save_checkpoint(model, tmp_path / "ckpt")
  saved = export_lib.export(params, ckpt, tmp_path / "export")
  assert (tmp_path / "export" / "params.yaml").is_file()

  images = np.random.default_rng(2).integers(0, 256, (2, 128, 128, 3), np.uint8)
  out = tf.saved_model.load(saved).signatures["serving_default"](inputs=tf.constant(images))
  assert out["detection_boxes"].shape == (2, 10, 4)
  assert out["detection_scores"].shape == (2, 10)
  assert out["detection_classes"].shape == (2, 10)
  assert out["num_detections"].numpy().tolist() == [10, 10]
  np.testing.assert_array_equal(out["image_info"].numpy()[0],
                                [[128, 128], [128, 128], [1, 1], [0, 0]])

  # The model itself on MG's DetectionModule preprocessing: normalize; 128x128 needs no resize.
  normalized = preprocess_ops.normalize_image(
      tf.cast(images, tf.float32), offset=preprocess_ops.MEAN_RGB,
      scale=preprocess_ops.STDDEV_RGB)
  expected = model(normalized, image_shape=tf.constant([[128.0, 128.0]] * 2), training=False)
  scores = expected["detection_scores"].numpy()
  assert np.all(np.diff(scores, axis=1) <= 0) and np.ptp(scores) > 1e-3  # Ordered, not tied.
  np.testing.assert_allclose(out["detection_scores"].numpy(), scores, atol=1e-5)
  # Pixel coordinates up to 128: float32 decoding differs by ~1e-3 px between graph and eager.
  np.testing.assert_allclose(out["detection_boxes"].numpy(),
                             expected["detection_boxes"].numpy(), atol=5e-3)
  np.testing.assert_array_equal(out["detection_classes"].numpy(),
                                expected["detection_classes"].numpy())
