"""The three splits of the sources that ship an official test set (issue 47: the search must not
select on the test set), one test per property run on cifar10 and mnist: `test` is the official
test set whole; `validation` is carved from the official training set, stratified by class and
seeded; `train` is the rest of it."""

import hashlib
import json
import types

import pytest

import test_cifar10 as cifar  # pylint: disable=g-bad-import-order
import test_mnist as mnist
from nascli.errors import NascliError, OutputError
from convert_helpers import assert_failed_cleanly, pixel_digests, shard_digests

CIFAR10 = types.SimpleNamespace(
    name="cifar10", make_data=cifar._make_data, num_train=cifar.NUM_TRAIN,
    num_test=cifar.NUM_TEST, num_validation=cifar.NUM_VALIDATION,
    write=lambda tmp_path, data: cifar._make_tar(tmp_path / "cifar-10-python.tar.gz", cifar.PY,
                                                 cifar._python_files(data)),
    # The origin test reads the binary layout, so both layouts name their splits.
    write_for_origins=lambda tmp_path, data: cifar._make_tar(
        tmp_path / "cifar-10-binary.tar.gz", cifar.BIN, cifar._binary_files(data)),
    assert_matches=lambda out, data, **kw: cifar._assert_matches(out, data, filenames=True, **kw),
    whole=lambda data: {hashlib.sha256(pixels.tobytes()).hexdigest() for pixels, _, _ in
                        cifar._items(data, cifar.TRAIN_STEMS + ["test_batch"]).values()},
    train_labels=lambda data: [label for stem in cifar.TRAIN_STEMS
                               for label in data[stem]["labels"]],
    stratified=(0.3, 15),
    sizes=[({}, 5), ({"validation_fraction": 0.2}, 10), ({"validation_size": 1}, 1),
           ({"validation_size": 49}, 49)],
    bad_fraction=1.5,
    origins={"train": "the official training set (data_batch_1..5) less the validation split",
             "validation": "carved from the official training set (data_batch_1..5): stratified"
                           " by class, seed 7",
             "test": "the official test set (test_batch)"})

MNIST = types.SimpleNamespace(
    name="mnist", make_data=mnist._make_data, num_train=mnist.NUM_TRAIN,
    num_test=mnist.NUM_TEST, num_validation=mnist.NUM_VALIDATION,
    write=lambda tmp_path, data: mnist._write(tmp_path / "mnist", data),
    write_for_origins=lambda tmp_path, data: mnist._write(tmp_path / "mnist", data),
    assert_matches=lambda out, data, **kw: mnist._assert_matches(out, data, channels=1, **kw),
    whole=lambda data: {hashlib.sha256(image[:, :, None].tobytes()).hexdigest()
                        for official in ("train", "test") for image in data[official][0]},
    train_labels=lambda data: data["train"][1].tolist(),
    stratified=(0.25, 10),
    sizes=[({}, 4), ({"validation_fraction": 0.5}, 20), ({"validation_size": 1}, 1),
           ({"validation_size": 39}, 39)],
    bad_fraction=0.0,
    origins={"train": "the official training set (train-images-idx3-ubyte) less the validation"
                      " split",
             "validation": "carved from the official training set (train-images-idx3-ubyte):"
                           " stratified by class, seed 7",
             "test": "the official test set (t10k-images-idx3-ubyte)"})

KITS = [CIFAR10, MNIST]
each_set = pytest.mark.parametrize("kit", KITS, ids=lambda kit: kit.name)


@each_set
def test_splits_are_disjoint_and_whole(tmp_path, run_convert, kit):
  data = kit.make_data(seed=3)
  info, _, out = run_convert(kit.name, source=kit.write(tmp_path, data), num_shards=2)
  by_split = kit.assert_matches(out, data)
  digests = {split: pixel_digests(records) for split, records in by_split.items()}
  sizes = {"train": kit.num_train - kit.num_validation, "validation": kit.num_validation,
           "test": kit.num_test}
  assert {split: len(d) for split, d in digests.items()} == sizes
  for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
    assert not digests[a] & digests[b], (a, b)
  assert set().union(*digests.values()) == kit.whole(data)
  assert {s: info["splits"][s]["num_records"] for s in sizes} == sizes


@each_set
def test_validation_is_stratified_and_seeded(tmp_path, run_convert, kit):
  data = kit.make_data(seed=4)
  source = kit.write(tmp_path, data)
  labels = kit.train_labels(data)
  fraction, held_out = kit.stratified
  chosen = {}
  for seed in (0, 1):
    info, _, out = run_convert(kit.name, output_dir=tmp_path / f"s{seed}", source=source,
                               num_shards=1, seed=seed, validation_fraction=fraction)
    by_split = kit.assert_matches(out, data, num_validation=held_out)
    counts = info["splits"]["validation"]["class_counts"]
    for c in set(labels):
      share = held_out * labels.count(c) / kit.num_train
      assert abs(counts.get(str(c), 0) - share) <= 1, (c, counts, share)
    chosen[seed] = set(by_split["validation"])
  assert chosen[0] != chosen[1]
  # The same seed gives the same shards.
  again, _, _ = run_convert(kit.name, output_dir=tmp_path / "again", source=source,
                            num_shards=1, seed=1, validation_fraction=fraction)
  assert shard_digests(again) == shard_digests(info)


@each_set
def test_dataset_info_records_origins_seed_and_sizes(tmp_path, run_convert, kit):
  source = kit.write_for_origins(tmp_path, kit.make_data())
  info, _, out = run_convert(kit.name, source=source, num_shards=1, seed=7, validation_size=12)
  splits = info["splits"]
  assert {s: splits[s]["num_records"] for s in splits} == {
      "train": kit.num_train - 12, "validation": 12, "test": kit.num_test}
  assert {s: splits[s]["origin"] for s in splits} == kit.origins
  assert "eval" in splits["test"]["role"] and "search" in splits["validation"]["role"]
  assert {k: info["settings"][k] for k in ("seed", "validation_fraction", "validation_size")} == {
      "seed": 7, "validation_fraction": None, "validation_size": 12}
  assert json.loads((out / "dataset_info.json").read_text())["splits"]["test"]["origin"] == (
      kit.origins["test"])
  # Another seed or another validation size is another conversion: its shards are not taken
  # for these.
  for other in ({"seed": 8, "validation_size": 12}, {"seed": 7, "validation_size": 11}):
    with pytest.raises(OutputError, match="different conversion"):
      run_convert(kit.name, output_dir=out, source=source, num_shards=1, **other)


@each_set
def test_validation_options_change_sizes(tmp_path, run_convert, kit):
  data = kit.make_data()
  source = kit.write(tmp_path, data)
  for i, (options, held_out) in enumerate(kit.sizes):
    info, _, out = run_convert(kit.name, output_dir=tmp_path / f"o{i}", source=source,
                               num_shards=1, **options)
    sizes = {s: info["splits"][s]["num_records"] for s in info["splits"]}
    assert sizes == {"train": kit.num_train - held_out, "validation": held_out,
                     "test": kit.num_test}
  kit.assert_matches(out, data, num_validation=kit.num_train - 1)


def _bad_split_options():
  for kit in KITS:
    n = kit.num_train
    for options, flag in [
        ({"validation_size": n}, f"--validation_size {n} must be between 1 and {n - 1}"),
        ({"validation_fraction": kit.bad_fraction},
         f"--validation_fraction {kit.bad_fraction} must be between 0 and 1"),
        ({"validation_fraction": 0.1, "validation_size": 3}, "--validation_size or"),
        ({"test_fraction": 0.1}, f"--test_fraction does not apply to {kit.name}"),
        ({"test_size": 5}, f"--test_size does not apply to {kit.name}")]:
      yield pytest.param(kit, options, flag, id=f"{kit.name}-{'-'.join(options)}")


@pytest.mark.parametrize("kit,options,flag", _bad_split_options())
def test_bad_split_options(tmp_path, run_convert, kit, options, flag):
  source = kit.write(tmp_path, kit.make_data())
  out = tmp_path / "out"
  with pytest.raises(NascliError) as e:
    run_convert(kit.name, output_dir=out, source=source, **options)
  assert "\n" not in str(e.value) and flag in str(e.value)
  assert_failed_cleanly(out)


@each_set
def test_command_refuses_test_flags(tmp_path, cli, kit):
  source = kit.write(tmp_path, kit.make_data())
  for flag, value in [("--test_fraction", "0.1"), ("--test_size", "5"),
                      ("--test_source", source)]:
    code, stdout, stderr = cli("convert-data", kit.name, "--source", source, flag, value,
                               "--output_dir", tmp_path / "out")
    assert (code, stdout) == (1, ""), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert f"{flag} does not apply to {kit.name}" in stderr
    assert not (tmp_path / "out").exists()
