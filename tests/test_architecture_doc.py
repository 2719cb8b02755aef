"""docs/architecture.md stays current: every module path it names exists, and it names every
module of nascli/search/ (the engine whose map it is)."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / 'docs' / 'architecture.md'


def _named() -> set[str]:
  return set(re.findall(r'`((?:nascli|tf_vision)/[\w/]*(?:\.py)?)`', DOC.read_text()))


def test_every_module_the_map_names_exists():
  named = _named()
  assert len(named) > 50  # the map is there, and read as paths
  missing = sorted(p for p in named if not (REPO / p).exists())
  assert not missing, f'docs/architecture.md names modules that do not exist: {missing}'


def test_the_map_names_every_module_of_the_search_engine():
  named = _named()
  modules = sorted(f'nascli/search/{p.name}' for p in (REPO / 'nascli' / 'search').glob('*.py')
                   if p.name != '__init__.py')
  unnamed = [m for m in modules if m not in named]
  assert not unnamed, f'docs/architecture.md does not name: {unnamed}'


def test_the_names_it_says_to_register_with_exist():
  text = DOC.read_text()
  for name, module in (('register_algorithm', 'nascli/search/algorithm_registry.py'),
                       ('register_scheduler', 'nascli/search/scheduler.py'),
                       ('register_target_device', 'nascli/latency_calculator.py'),
                       ('register_predictor', 'nascli/latency_model/predictors.py'),
                       ('register_search_space', 'tf_vision/search_spaces/registry.py'),
                       ('register', 'nascli/search/writers.py')):
    assert f'{name}' in text
    assert re.search(rf'^def {name}\(', (REPO / module).read_text(), re.M), (name, module)
