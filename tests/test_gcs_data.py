"""gs:// for data and training commands, on the GCS emulator: convert-data to a bucket, train
reading a bucket (TensorFlow's own GCS filesystem, and the staged local copy), a gs:// model dir,
and one-line errors for bad URLs and missing buckets."""

import json
import math
import random
import os

import pytest

from conftest import nascli_subprocess, read_examples
from nascli import storage

SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.checkpoint_interval=5"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
  """Staging and cache folders of this test (NASCLI_CACHE_DIR), never the user's."""
  path = tmp_path / "cache"
  monkeypatch.setenv("NASCLI_CACHE_DIR", str(path))
  return path


@pytest.fixture(scope="module")
def gcs_digits(gcs_emulator, tmp_path_factory):
  """The embedded digits at 32x32, 2 shards per split, converted straight into a gs:// prefix."""
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  url = f"gs://{gcs_emulator.bucket}/module-digits32"
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("NASCLI_CACHE_DIR", str(tmp_path_factory.mktemp("digits-cache")))
    convert("digits", url, ConvertOptions(image_size=32, progress=False),
            ShardingOptions(num_shards=2, processes=1))
  return url


def test_convert_to_gcs_writes_what_a_local_conversion_writes(cli, gcs_prefix, tmp_path,
                                                              cache_dir):
  url = storage.join(gcs_prefix, "digits")
  common = ["convert-data", "digits", "--num_shards", "2", "--processes", "1", "--json"]
  code, out, err = cli(*common, "--output_dir", url)
  assert code == 0, err
  assert json.loads(out)["status"] == "written" and json.loads(out)["output_dir"] == url
  code, _, err = cli(*common, "--output_dir", tmp_path / "local")
  assert code == 0, err
  local_names = sorted(os.listdir(tmp_path / "local"))
  assert storage.list_names(url) == local_names == [
      "dataset_info.json", "labels.txt", "test-00000-of-00002.tfrecord",
      "test-00001-of-00002.tfrecord", "train-00000-of-00002.tfrecord",
      "train-00001-of-00002.tfrecord", "validation-00000-of-00002.tfrecord",
      "validation-00001-of-00002.tfrecord"]
  for name in local_names:  # the same bytes, dataset_info.json included
    assert storage.read_bytes(storage.join(url, name)) == (tmp_path / "local" / name).read_bytes()
  shard = "train-00001-of-00002.tfrecord"
  storage.download_file(storage.join(url, shard), tmp_path / "back" / shard)
  records = read_examples(tmp_path / "back" / shard)
  assert len(records) == 539 and records == read_examples(tmp_path / "local" / shard)
  assert not any((cache_dir / "convert-staging").rglob("*.tfrecord"))  # removed after upload

  # Again: the finished conversion in the bucket is recognised, not rewritten.
  code, out, err = cli(*common, "--output_dir", url)
  assert code == 0 and json.loads(out)["status"] == "verified", err
  assert not [p for p in (cache_dir / "convert-staging").rglob("*") if p.is_file()]
  # Other settings: refused, as locally, naming the prefix; nothing in the bucket changes.
  before = storage.list_sizes(url)
  code, out, err = cli("convert-data", "digits", "--num_shards", "4", "--output_dir", url)
  assert code == 1 and out == ""
  assert err.startswith(f"Error: {url} already holds a different conversion") and (
      err.count("\n") == 1)
  assert storage.list_sizes(url) == before


def test_convert_refuses_a_prefix_with_foreign_shards(cli, gcs_prefix):
  storage.write_bytes(storage.join(gcs_prefix, "train-00000-of-00001.tfrecord"), b"not ours")
  code, _, err = cli("convert-data", "digits", "--output_dir", gcs_prefix, "--processes", "1")
  assert code == 1
  assert err == (f"Error: {gcs_prefix} already contains train-00000-of-00001.tfrecord not"
                 " written by this conversion; pass --overwrite or choose another --output_dir\n")
  assert storage.read_bytes(storage.join(gcs_prefix, "train-00000-of-00001.tfrecord")) == (
      b"not ours")


def test_interrupted_upload_resumes(cli, gcs_prefix, cache_dir, monkeypatch):
  """Killed after two shards went up (no dataset_info.json yet): the rerun accepts its own
  shards, uploads the rest and the marker last."""
  real_upload = storage.upload_file
  calls = []

  def dying_upload(src, dest):
    if len(calls) == 2:
      raise KeyboardInterrupt
    calls.append(dest)
    real_upload(src, dest)

  monkeypatch.setattr(storage, "upload_file", dying_upload)
  args = ("convert-data", "digits", "--num_shards", "2", "--processes", "1", "--output_dir",
          gcs_prefix)
  code, _, _ = cli(*args)
  assert code == 130 and len(storage.list_names(gcs_prefix)) == 2
  assert "dataset_info.json" not in storage.list_names(gcs_prefix)
  monkeypatch.setattr(storage, "upload_file", real_upload)
  code, out, err = cli(*args)
  assert code == 0, err
  assert len(storage.list_names(gcs_prefix)) == 8
  info = json.loads(storage.read_text(storage.join(gcs_prefix, "dataset_info.json")))
  assert info["splits"]["train"]["num_records"] == 1079


def test_train_streams_gcs_data_through_tensorflows_filesystem(gcs_emulator, gcs_digits,
                                                               tmp_path, cache_dir):
  """TF's own gs:// reader (pointed at the emulator through tf_env) reads the shards."""
  gcs_emulator.proxy.hosts.clear()
  model_dir = tmp_path / "run"
  r = nascli_subprocess("train", "--dataset_dir", gcs_digits, "--model_dir", model_dir,
                        "--params_override", SHORT, "--json",
                        env={**gcs_emulator.tf_env(), "NASCLI_CACHE_DIR": str(cache_dir)})
  assert r.returncode == 0, r.stderr[-3000:]
  result = json.loads(r.stdout)
  assert result["step"] == 10 and math.isfinite(result["eval_metrics"]["accuracy"])
  assert (model_dir / "checkpoint").exists() and (model_dir / "ckpt-10.index").exists()
  params = (model_dir / "params.yaml").read_text()
  assert f"{gcs_digits}/train-*-of-00002.tfrecord" in params  # TF was given the gs:// pattern
  assert b"storage.googleapis.com:443" in gcs_emulator.proxy.hosts  # and read objects itself
  assert not (cache_dir / "gcs").exists()  # nothing staged
  assert "local copy" not in r.stderr


def test_train_stages_gcs_data_and_uploads_gcs_model_dir(cli, gcs_digits, gcs_prefix,
                                                         cache_dir):
  """With STORAGE_EMULATOR_HOST alone TF's reader would go to the real GCS: nascli stages the
  data, says so, trains in a local work dir and uploads the finished model dir."""
  model_url = storage.join(gcs_prefix, "model")
  code, out, err = cli("train", "--dataset_dir", gcs_digits, "--model_dir", model_url,
                       "--params_override", SHORT, "--json")
  assert code == 0, err
  assert "TensorFlow's gs:// reader ignores STORAGE_EMULATOR_HOST" in err
  result = json.loads(out)
  assert result["model_dir"] == model_url and result["step"] == 10
  assert math.isfinite(result["eval_metrics"]["accuracy"])
  names = storage.list_names(model_url)
  for name in ("checkpoint", "ckpt-10.index", "params.yaml", "job_status.json",
               "nascli_run.json"):
    assert name in names, names
  assert any(n.startswith("train/") for n in names)
  assert json.loads(storage.read_text(storage.join(model_url, "job_status.json")))[
      "status"] == "completed"
  staged = cache_dir / "gcs" / storage.parse_gcs(gcs_digits).bucket / "module-digits32"
  assert (staged / "train-00000-of-00002.tfrecord").exists()
  assert not any((cache_dir / "model-staging").rglob("ckpt-*"))  # work dir removed

  # The validation split the training evaluated on gives its number again (the default, the
  # test split of the staged data, is test_train_run's).
  code, out, err = cli("eval", "--model_dir", model_url, "--split", "validation")
  assert code == 0, err
  claim, line = out.strip().splitlines()
  assert claim.startswith("evaluated on: the validation split of ") and "(359 images" in claim
  assert line.startswith("result: {'top_5_accuracy': ") and line.endswith(
      f"ckpt={model_url}/ckpt-10")
  saved = json.loads(storage.read_text(storage.join(model_url, "eval_metrics.json")))
  assert saved["metrics"]["accuracy"] == pytest.approx(result["eval_metrics"]["accuracy"],
                                                       abs=1e-6)

  # Export reads the staged model dir and uploads the SavedModel, saved_model.pb last.
  code, out, err = cli("export", "--model_dir", model_url, "--json")
  assert code == 0, err
  export_url = storage.join(model_url, "export", "image_tensor")
  assert json.loads(out)["saved_model"] == storage.join(export_url, "saved_model")
  exported = storage.list_names(export_url)
  assert "saved_model/saved_model.pb" in exported and any(
      n.startswith("saved_model/variables/variables.data") for n in exported)
  code, _, err = cli("export", "--model_dir", model_url)
  assert code == 1 and err.startswith(f"Error: export dir {export_url} already has files")


def test_config_file_and_nas_params_from_gcs(gcs_digits, gcs_prefix, cache_dir):
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  from nascli import training  # pylint: disable=g-import-not-at-top
  from nascli.run_spec import DataSpec, RunSpec  # pylint: disable=g-import-not-at-top
  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import from_nas_params, get_dna_spec, to_nas_params_str
  config = storage.join(gcs_prefix, "short.yaml")
  storage.write_text(config, "trainer:\n  train_steps: 7\n")
  run_plan = training.plan(training.TrainArgs(run=RunSpec(
      config_files=[config], data=DataSpec(dataset_dir=gcs_digits))))
  assert run_plan.params.trainer.train_steps == 7
  assert run_plan.params.task.model.num_classes == 10  # from the bucket's dataset_info.json
  assert run_plan.params.task.train_data.input_path.startswith(str(cache_dir))  # staged

  dna = pg.random_dna(get_dna_spec("mnasnet"), random.Random(3))
  arch = storage.join(gcs_prefix, "nas_params_str.json")
  storage.write_text(arch, to_nas_params_str("mnasnet", dna))
  assert from_nas_params("mnasnet", arch).to_numbers() == dna.to_numbers()


@pytest.mark.parametrize("args, message", [
    (["train", "--dataset_dir", "gs://no-such-bucket/digits"],
     "Error: gs://no-such-bucket/digits: bucket no-such-bucket does not exist"),
    (["train", "--dataset_dir", "gs://Bad_Bucket/digits"],
     "Error: bad gs:// URL 'gs://Bad_Bucket/digits': 'Bad_Bucket' is not a valid bucket name"),
    (["train", "--dataset_dir", "gs://nascli-test/nothing-here"],
     "Error: --dataset_dir gs://nascli-test/nothing-here: no objects there"),
    (["train", "--training_data_path", "gs://nascli-test/nothing/train-*",
      "--validation_data_path", "gs://nascli-test/nothing/valid-*"],
     "Error: --training_data_path gs://nascli-test/nothing/train-* matches no files"),
    (["convert-data", "digits", "--output_dir", "gs://no-such-bucket/x"],
     "Error: gs://no-such-bucket/x: bucket no-such-bucket does not exist"),
    (["convert-data", "digits", "--output_dir", "gs:/nascli-test/x"],
     "Error: bad gs:// URL 'gs:/nascli-test/x': expected gs://BUCKET/PATH"),
    (["eval", "--model_dir", "gs://nascli-test/no-model"],
     "Error: gs://nascli-test/no-model: no such object"),
])
def test_bad_gcs_paths_are_one_line_errors(cli, gcs_emulator, args, message):
  code, out, err = cli(*args)
  assert code == 1 and out == ""
  assert err.startswith(message) and err.count("\n") == 1, err
