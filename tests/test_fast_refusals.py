"""Bad flags of `train`, `eval` and `export` are refused before TensorFlow is imported: one line
naming the flag, exit 1 (2 for a usage error), and `tensorflow` still absent from sys.modules."""

import json
import os
import sys

import pytest

from conftest import main_in_fresh_interpreter

from test_nas_params import MNASNET_NAS_PARAMS_STR, SPINENET_NAS_PARAMS_STR


def _cases(tmp):
  """(name, argv, exit code, the whole one-line message or its start ending in '...')."""
  job = tmp / "job"
  (job / "1").mkdir(parents=True)
  (job / "1" / "nas_params_str.json").write_text('{"blocks[0].kernel_size": "0/2 (3)"}')
  bad_trial = tmp / "job_bad"
  (bad_trial / "2").mkdir(parents=True)
  (bad_trial / "2" / "nas_params_str.json").write_text('{"blocks[0].kernel_size": "3/2 (3)"}')
  hparams = tmp / "hp.txt"
  hparams.write_text("optimizer=adamm\n")
  empty = tmp / "empty_model"
  empty.mkdir()
  (empty / "params.yaml").write_text("task: {}\n")
  # A model dir with a checkpoint index TensorFlow would find (TF-free: never read here).
  model = tmp / "model"
  model.mkdir()
  (model / "params.yaml").write_text("task: {}\n")
  (model / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
  (model / "ckpt-5.index").write_bytes(b"")
  (model / "export" / "image_tensor").mkdir(parents=True)
  (model / "export" / "image_tensor" / "saved_model").mkdir()
  missing = tmp / "missing"
  return [
      ("mode", ["train", "--mode", "bogus"], 2,
       "unknown --mode 'bogus'; known: train, train_and_eval, train_and_post_eval"),
      ("mode_typo", ["train", "--mode", "trian"], 2,
       "unknown --mode 'trian' (did you mean 'train'?); known: train, train_and_eval,"
       " train_and_post_eval"),
      ("model", ["train", "--model", "resnet"], 2,
       "unknown --model 'resnet' (did you mean 'retinanet'?); known: classification, retinanet"),
      ("strategy", ["train", "--strategy", "mirror"], 2,
       "unknown --strategy 'mirror' (did you mean 'mirrored'?); known: one_device, mirrored,"
       " multi_worker_mirrored"),
      ("search_space", ["train", "--search_space", "spinet"], 2,
       "unknown --search_space 'spinet' (did you mean 'spinenet'?); known: mnasnet, spinenet"),
      ("seed", ["train", "--seed", "-1"], 1,
       "--seed -1 is out of range; allowed: 0 to 2**32 - 1"),
      ("num_gpus", ["train", "--num_gpus", "0"], 1,
       "--num_gpus 0 is out of range; allowed: 1 or more (leave it out for every GPU of the"
       " machine)"),
      ("config_file", ["train", "--config_file", str(missing / "c.yaml")], 1,
       f"--config_file {missing}/c.yaml does not exist"),
      ("params_override", ["train", "--params_override", "{bad: ["], 1,
       "--params_override is neither a file nor valid YAML/JSON/a.b=c: ..."),
      ("hparams_file", ["train", "--hparams_file", str(hparams)], 1,
       f"{hparams}:1: key 'optimizer' must be one of ..."),
      ("dataset_dir", ["train", "--dataset_dir", str(missing)], 1,
       f"--dataset_dir {missing} does not exist"),
      ("dataset_dir_not_converted", ["train", "--dataset_dir", str(job)], 1,
       f"--dataset_dir {job} has no dataset_info.json (write it with `nascli convert-data`)"),
      ("training_data_path", ["train", "--training_data_path", str(missing / "train-*")], 1,
       f"--training_data_path {missing}/train-* matches no files"),
      ("nas_params_str", ["train", "--nas_params_str", '{"blocks[0].kernel_size": "zero"}'], 1,
       "--nas_params_str: key 'blocks[0].kernel_size': value 'zero' is not"
       " '<index>/<num_candidates> (<literal>)'"),
      ("nas_params_json", ["train", "--nas_params_str", '{"blocks[0].kernel_size": '], 1,
       "--nas_params_str: malformed JSON: Expecting value at line 1 column 27"),
      ("nas_params_file", ["train", "--nas_params_str", str(missing / "arch.json")], 1,
       f"{missing}/arch.json: cannot read nas_params file (No such file or directory)"),
      ("search_job_dir", ["train", "--search_job_dir", str(missing), "--train_nas_trial_numbers",
                          "3"], 1, f"--search_job_dir {missing} does not exist"),
      ("trial", ["train", "--search_job_dir", str(job), "--train_nas_trial_numbers", "1,3"], 1,
       f"search job {job} has no trial 3 ({job}/3/nas_params_str.json missing)"),
      ("trial_params", ["train", "--search_job_dir", str(bad_trial), "--train_nas_trial_numbers",
                        "2"], 1,
       f"{bad_trial}/2/nas_params_str.json: key 'blocks[0].kernel_size': index 3 is out of range"
       " for 2 candidates"),
      ("stage2_pair", ["train", "--search_job_dir", str(job)], 2, "...--train_nas_trial_numbers"),
      ("eval_model_dir", ["eval", "--model_dir", str(missing)], 1,
       f"--model_dir {missing} does not exist"),
      ("eval_no_checkpoint", ["eval", "--model_dir", str(empty)], 1, f"no checkpoint in {empty}"),
      ("eval_checkpoint", ["eval", "--checkpoint_path", str(model / "ckpt-7")], 1,
       f"checkpoint {model}/ckpt-7 does not exist (no {model}/ckpt-7.index)"),
      ("eval_steps", ["eval", "--model_dir", str(model), "--steps", "0"], 1,
       "--steps 0 is out of range; allowed: -1 (all batches) or 1 or more"),
      ("eval_override", ["eval", "--model_dir", str(model), "--params_override", "{bad: ["], 1,
       "--params_override is neither a file nor valid YAML/JSON/a.b=c: ..."),
      ("eval_output", ["eval", "--model_dir", str(model), "--output", str(missing / "m.json")], 1,
       f"--output {missing}/m.json: folder {missing} does not exist"),
      ("eval_split", ["eval", "--model_dir", str(model), "--split", "train"], 1,
       "--split 'train': choose test or validation"),
      ("eval_split_and_files", ["eval", "--model_dir", str(model), "--split", "test",
                                "--validation_data_path", str(model / "x-*")], 1,
       "--split names a split of a converted data set; --validation_data_path gives the files"
       " themselves: give one of them"),
      ("export_model_dir", ["export", "--model_dir", str(missing)], 1,
       f"--model_dir {missing} does not exist"),
      ("export_input_type", ["export", "--model_dir", str(model), "--input_type", "bytes"], 2,
       "unknown --input_type 'bytes' (did you mean 'image_bytes'?); known: image_tensor,"
       " image_bytes, tf_example"),
      ("export_size", ["export", "--model_dir", str(model), "--input_image_size", "32"], 1,
       "--input_image_size must be HEIGHT,WIDTH, got '32'"),
      ("export_dir", ["export", "--model_dir", str(model)], 1,
       f"export dir {model}/export/image_tensor already has files (saved_model); pass"
       " --overwrite"),
  ]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  cases = _cases(tmp_path_factory.mktemp("refusals"))
  results = main_in_fresh_interpreter([argv for _, argv, _, _ in cases])
  return {name: (code, message, result) for (name, _, code, message), result in
          zip(cases, results)}


CASE_NAMES = [  # test_every_case_is_checked keeps this equal to _cases
    "mode", "mode_typo", "model", "strategy", "search_space", "seed", "num_gpus", "config_file",
    "params_override", "hparams_file", "dataset_dir", "dataset_dir_not_converted",
    "training_data_path", "nas_params_str", "nas_params_json", "nas_params_file",
    "search_job_dir", "trial", "trial_params", "stage2_pair", "eval_model_dir",
    "eval_no_checkpoint", "eval_checkpoint", "eval_steps", "eval_override", "eval_output",
    "eval_split", "eval_split_and_files",
    "export_model_dir", "export_input_type", "export_size", "export_dir"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_refused_before_tensorflow_loads(refusals, name):
  code, message, (got_code, stderr, tensorflow_loaded) = refusals[name]
  assert not tensorflow_loaded, stderr
  assert got_code == code, stderr
  if message.startswith("...") and code == 2:  # Typer's usage error box names the flag
    assert message[3:] in stderr
    return
  assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
  line = stderr.rstrip("\n")
  if message.endswith("..."):
    assert line.startswith("Error: " + message[:-3]), line
  elif message.startswith("..."):
    assert message[3:] in line, line
  else:
    assert line == "Error: " + message


def test_every_case_is_checked(tmp_path):
  assert [name for name, _, _, _ in _cases(tmp_path)] == CASE_NAMES


def test_tensorflow_free_name_lists_match_the_registries():
  # pylint: disable=g-import-not-at-top
  from nascli.commands import export, train
  from tf_vision import distribute, params
  from tf_vision.serving import export_lib
  assert sorted(train.STRATEGIES) == distribute.known_strategies()
  assert list(train.MODELS) == list(params.DEFAULT_EXPERIMENTS)
  assert export.INPUT_TYPES == export_lib.INPUT_TYPES


def test_checkpoint_check_agrees_with_tensorflow(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from nascli import checks  # pylint: disable=g-import-not-at-top
  assert not checks.has_checkpoint(str(tmp_path))
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path),
                                       max_to_keep=2)
  manager.save(checkpoint_number=7)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-7")
  assert checks.has_checkpoint(str(tmp_path))
  os.remove(tmp_path / "ckpt-7.index")
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  assert not checks.has_checkpoint(str(tmp_path))


@pytest.mark.parametrize("text", [MNASNET_NAS_PARAMS_STR, SPINENET_NAS_PARAMS_STR])
def test_syntax_check_passes_what_vertex_writes(text):
  """The fast check must never refuse a string the search space accepts."""
  # pylint: disable=g-import-not-at-top
  from tf_vision import nas_params_syntax
  from tf_vision.search_spaces import from_nas_params
  assert nas_params_syntax.check(text) == json.loads(text)
  from_nas_params("mnasnet" if "blocks[0].kernel_size" in text else "spinenet", text)
