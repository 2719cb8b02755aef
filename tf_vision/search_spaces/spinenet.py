"""The `spinenet` search space of Vertex AI NAS (scale-permuted backbone), in pyglove.

Same structure, candidate lists and order as Vertex's `tunable_spinenet_search_space.py`
(`spinenet_search_space(3, 7, {2: 1, 3: 3, 4: 5, 5: 2}, [-1, 0, 1, 2], ['residual',
'bottleneck'], 4)`), so the 75 decision keys and `nas_params_str` values are interchangeable with
Vertex's; about 4.84e38 points (pyglove counts the level permutation by candidate index: 11!).

Block specs (`block_specs`) list the 11 intermediate then the 5 output blocks, Vertex's
`TunableBlockSpec` fields. The 2 stem (initial) blocks, both at level 2, are not listed: as in
Model Garden's SpineNet they are built by the backbone, and `input_offsets` index the running
list [stem0, stem1, intermediate0, ..., intermediate10, output0, ...].
pyglove is imported when the space is built: the registration is read by flag checks that must
not load it.
"""

from typing import Any, Mapping, Sequence

from tf_vision.search_spaces import registry

NUM_INIT_BLOCKS = 2
MIN_LEVEL = 3
MAX_LEVEL = 7
# Insertion order matters: it is the order of the level-permutation candidates.
INTERMEDIATE_BLOCKS_ALLOC = {2: 1, 3: 3, 4: 5, 5: 2}
INTERMEDIATE_LEVEL_OFFSETS = (-1, 0, 1, 2)
BLOCK_FN_CANDIDATES = ('residual', 'bottleneck')
NUM_BLOCKS_SEARCH_WINDOW = 4

BLOCK_SPEC_FIELDS = ('level_base', 'level_offset', 'block_fn', 'input_offsets', 'is_output')


def _input_pair(candidates: Sequence[int]) -> Any:
  """Two distinct inputs, sorted by candidate index (two decisions: `[0]` and `[1]`)."""
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  return pg.sublist_of(2, list(candidates), choices_distinct=True, choices_sorted=True)


def build_spinenet_search_space(min_level: int = MIN_LEVEL,
                                max_level: int = MAX_LEVEL,
                                intermediate_blocks_alloc: Mapping[int, int] | None = None,
                                intermediate_level_offsets: Sequence[int] = (
                                    INTERMEDIATE_LEVEL_OFFSETS),
                                block_fn_candidates: Sequence[str] = BLOCK_FN_CANDIDATES,
                                num_blocks_search_window: int = NUM_BLOCKS_SEARCH_WINDOW
                               ) -> Any:
  """A SpineNet space with Vertex's parameters (its `spinenet_v2`/`_mbconv` differ only in them).

  Args:
    min_level: Lowest output level.
    max_level: Highest output level; there are max - min + 1 output blocks.
    intermediate_blocks_alloc: {base level: number of intermediate blocks}, in candidate order.
    intermediate_level_offsets: Level offsets an intermediate block may take.
    block_fn_candidates: Block functions to choose from.
    num_blocks_search_window: How many preceding blocks an intermediate block may take inputs
      from; -1 for all.

  Returns:
    `pg.Dict(intermediate_blocks, intermediate_block_levels, output_blocks,
    output_block_levels)`, the argument order of Vertex's functor, which fixes the key order.
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  alloc = dict(INTERMEDIATE_BLOCKS_ALLOC if intermediate_blocks_alloc is None
               else intermediate_blocks_alloc)
  base_levels = [level for level, count in alloc.items() for _ in range(count)]
  num_intermediate = len(base_levels)
  num_outputs = max_level - min_level + 1

  def _window(i: int) -> range:
    end = NUM_INIT_BLOCKS + i
    if num_blocks_search_window == -1:
      return range(end)
    return range(max(end - num_blocks_search_window, 0), end)

  intermediate_blocks = [
      pg.Dict(level_base=None,
              level_offset=pg.oneof(list(intermediate_level_offsets)),
              block_fn=pg.oneof(list(block_fn_candidates)),
              input_offsets=_input_pair(_window(i)))
      for i in range(num_intermediate)]
  output_blocks = [
      pg.Dict(level_base=None,
              level_offset=0,
              block_fn=pg.oneof(list(block_fn_candidates)),
              input_offsets=_input_pair(range(NUM_INIT_BLOCKS + num_intermediate + j)))
      for j in range(num_outputs)]
  return pg.Dict(
      intermediate_blocks=pg.List(intermediate_blocks),
      # A permutation of the base-level multiset: distinct by candidate index, unsorted.
      intermediate_block_levels=pg.sublist_of(num_intermediate, base_levels,
                                              choices_distinct=True, choices_sorted=False),
      output_blocks=pg.List(output_blocks),
      output_block_levels=pg.sublist_of(num_outputs, list(range(min_level, max_level + 1)),
                                        choices_distinct=True, choices_sorted=False))


def block_specs(point: Any) -> list[dict[str, Any]]:
  """The blocks of a chosen point as plain dicts, Vertex's `TunableBlockSpec` fields.

  Args:
    point: A DNA of the `spinenet` space, or a SpineNet space materialized with one.

  Returns:
    11 intermediate blocks (`level_base` from `intermediate_block_levels[i]`, `is_output`
    False) then 5 output blocks (`level_base` from `output_block_levels[j]`, `level_offset` 0,
    `is_output` True), each `{level_base, level_offset, block_fn, input_offsets: [a, b],
    is_output}`. The block's level is level_base + level_offset; stems are not included.
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  if isinstance(point, pg.DNA):
    point = pg.materialize(spinenet_search_space(), point)

  def _spec(block: Any, level_base: int, is_output: bool) -> dict[str, Any]:
    return {'level_base': int(level_base),
            'level_offset': int(block['level_offset']),
            'block_fn': str(block['block_fn']),
            'input_offsets': [int(x) for x in block['input_offsets']],
            'is_output': is_output}

  return ([_spec(b, level, False) for b, level in zip(point['intermediate_blocks'],
                                                      point['intermediate_block_levels'])]
          + [_spec(b, level, True) for b, level in zip(point['output_blocks'],
                                                       point['output_block_levels'])])


@registry.register_search_space(
    'spinenet', block_specs=block_specs,
    binding=registry.ModelBinding(model='retinanet', experiment='nas_retinanet_tunable_spinenet',
                                  backbone_type='tunable_spinenet', metric='AP'),
    defaults=registry.EmbeddedDefault('shapes', {'image_size': 128, 'num_samples': 256},
                                      'fast_nas_detection_spinenet_search_for_testing.yaml'))
def spinenet_search_space() -> Any:
  """Vertex's prebuilt `spinenet` space: 11 intermediate blocks, 75 decisions."""
  return build_spinenet_search_space()
