"""THOR, MindSpore's second-order optimizer (K-FAC with block-diagonal factors), for tf_keras.

Algorithm: shared/reference/fastnn_thor.md Part B. An optimizer sees only gradients, so the
Kronecker factors are captured by the layers: `attach_thor(model, optimizer)` hooks every
tf_keras Conv2D and Dense (the Fisher blocks): a Conv2D's `convolution_op` gets a custom
gradient, and a Dense's (or a Conv2D subclass's own) `call` an identity with one on its
pre-activation output (a fused `activation` is applied after it). On refresh steps only, the
hook's backward records

  A = X^T X / M   X: the layer input as rows, im2col patches for a convolution
                  (tf.image.extract_patches, same strides/padding/dilation, rows in the kernel's
                  [kh, kw, C_in] order), M = N * T rows, T = output positions per example
                  (H_out * W_out for a conv, 1 for a Dense on [N, C] inputs);
  G = D^T D / M   D: the gradient of the pre-activation output as rows, multiplied by the
                  global batch size N_g and divided by the loss scale, i.e. the gradient of
                  each example's own loss when the training loss is the mean over the global
                  batch (Model Garden and Keras divide each replica's mean by the replica
                  count).

These are K-FAC's per-example-and-position averages, MindSpore's Ascend variant (§B.2); the GPU
variant's batch-mean estimate is cruder. Both are computed in the backward pass, so a forward
pass that computes no gradient (evaluation) never touches them. Only the diagonal blocks of
size `block_size` are ever formed: THOR's hardware-driven splitting drops the rest (§B.3).

At a refresh step (`iterations % frequency == 0`, the first step included; retried at the next
step when a LossScaleOptimizer skipped its update) the optimizer averages the factors over
replicas, damps and inverts each diagonal block by Cholesky (the blocks of one size from all
layers in one batched call):

  A_inv = (A + sqrt(lambda / T) I)^-1 * sqrt(1 / T),  G_inv likewise,

which is MindSpore's conv damping and its `feature_map` factor 1/T split over both inverses
(§B.3); for a Dense T = 1, i.e. A + sqrt(lambda) I. With these factors the conv Fisher block
is T * (A kron G), so this is (sqrt(T) A + sqrt(lambda) I)^-1 grad (sqrt(T) G + sqrt(lambda) I)^-1:
Tikhonov damping lambda split evenly over the factors. lambda is `damping`, a float or a
schedule of the step (THOR's: `thor_schedules.ThorDamping`), read at refresh steps only.
The last block of a factor whose size is not a multiple of the block size is padded with an
identity (its gradient rows are zero), which gives exactly the unpadded block's inverse.

Every step, for each hooked kernel W ([kh, kw, C_in, C_out] or [C_in, C_out]), the gradient is
reshaped to [d_A, C_out] and replaced by A_inv grad G_inv (MindSpore's G^-1 grad A^-1 in its
[C_out, d_A] layout), using the inverses of the last refresh; then weight decay is added
(`weight_decay * w`, after preconditioning, to every trainable variable not matched by
`exclude_from_weight_decay`, as MindSpore does), and MindSpore's non-Nesterov momentum runs:
v <- momentum * v + g; w <- w - lr * v. Every other variable (BatchNorm, biases, depthwise
convolutions) is first-order: momentum SGD with the same weight decay. The preconditioning
matmuls are the ordinary step's cost over SGD (about 2 * d_A * C_out * (block_A + block_G)
flops per kernel); `precondition_dtype` runs them in bfloat16 or float16 (MindSpore's Ascend
THOR uses float16 there) while factors, inverses and updates stay float32.

Low-rank path (`low_rank`, "auto" by default): a convolution's kernel gradient is X^T D (X its
M im2col rows, D its output-gradient rows), so A_inv grad G_inv = (X A_inv^T)^T (D G_inv). For
deep layers at low resolution M is far below d_A (32 rows for a batch of 32 at 1x1 against
d_A = 4,608 for a 3x3x512 kernel), and preconditioning the rows costs a small fraction of the
kernel-sized product, whose final matmul replaces the kernel gradient's own. So between
refreshes the hooked `convolution_op` of such a layer returns its kernel gradient already
preconditioned with the standing inverses, and the update leaves it as is; at a refresh step
it returns the plain gradient (the factors are recorded in the same `tf.cond`), and the
refresh's cond preconditions it with the new inverses, as above (a mirrored gradient in its
own update). "auto" takes the path per layer when its flops are under half (`low_rank_pays`, from
the static shapes seen while tracing). The result is the same up to float rounding. Between
refreshes a tape's gradient of such a kernel is therefore the preconditioned one; a kernel
regularizer or gradient clipping (which need the plain one) turns the path off.

Hooked layers: tf_keras Conv2D (groups 1, channels_last; not Conv2DTranspose) and Dense.
DepthwiseConv2D, SeparableConv2D and the rest stay first-order (a depthwise kernel has no
input-channel mixing for A to describe). Biases are first-order too (MindSpore's layers have
none). A layer called several times in one step records the call whose backward ran last.
A hooked dilated Conv2D's input and kernel gradients go through space-to-batch, as
tf.nn.convolution's forward pass does off TPU (TensorFlow's CPU kernels without oneDNN have no
dilated Conv2DBackpropInput/Filter): op for op the gradient TensorFlow takes, on every device.

When: the backward hooks of the layers that precondition in the update hand their (inputs, dy)
to apply_gradients, which records them all in one `tf.cond` on the refresh step (ResNet-10's
graph: 7 conds instead of 15, 16 functions instead of 32; its trace time did not measurably
change, BENCHMARKS.md). A backward pass
apply_gradients cannot see (eager, or a nested tf.function's gradient function) records in its
own cond instead; one that ran in a loop or branch the update is outside of (gradient
accumulation) is an error at tracing, not a silent stale factor, unless `defer_recording` is
False: then every layer records in its own backward pass, as before 2026-11-30.

Distribution: factors are SyncOnRead(MEAN) variables, so at a refresh the cross-replica read
averages them over replicas (an all-reduce in replica context when the strategy runs without
merge_call) and every replica builds the same inverses. Gradients are aggregated as usual
before preconditioning (a linear map, identical on all replicas). Factors and inverses are in
the optimizer's checkpoint (inverses as slots of the kernels), so a restore resumes exactly.

Loss scaling: a wrapping LossScaleOptimizer already unscales the gradients; its current scale
is divided out of the captured output gradients. `loss_scale` (a fixed factor, for a loss
scaled by hand) is divided out of both.
"""

import contextlib
import dataclasses
import functools
import math
import re
import threading
from typing import Any, Callable, Sequence

import tensorflow as tf
import tf_keras
from tf_keras.src.optimizers.legacy import optimizer_v2

from tf_vision.optimization import optimizers
from tf_vision.optimization import thor_schedules
from tf_vision.optimization import wrappers

_var_key = optimizer_v2._var_key  # pylint: disable=protected-access
# Plain Python around explicit tf.cond: autograph converting it only adds tracing time.
_not_converted = tf.autograph.experimental.do_not_convert

PRECONDITION_DTYPES = ("float32", "bfloat16", "float16")
LOW_RANK_MODES = ("auto", "always", "never")


@dataclasses.dataclass(frozen=True)
class Allowed:
  """What a setting accepts: a test of its value and the words an error shows for it."""
  test: Callable[[Any], bool]
  words: str

  def accepts(self, value: Any) -> bool:
    try:
      return bool(self.test(value))
    except (TypeError, ValueError):  # e.g. a string where a number belongs
      return False


def _one_of(choices: Sequence[str]) -> Allowed:
  return Allowed(lambda value: value in choices, ", ".join(choices))


# The settings Thor refuses out of range; its config (tf_vision.configs.optimization) checks
# the same table at planning, before a run writes anything.
SETTINGS = {
    "momentum": Allowed(lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "frequency": Allowed(lambda v: v >= 1, "an integer >= 1"),
    "block_size": Allowed(lambda v: v >= 1, "an integer >= 1"),
    "loss_scale": Allowed(lambda v: v > 0, "a number > 0"),
    "precondition_dtype": _one_of(PRECONDITION_DTYPES),
    "low_rank": _one_of(LOW_RANK_MODES),
}
A_INV_SLOT = "thor_a_inv"
G_INV_SLOT = "thor_g_inv"


@dataclasses.dataclass(frozen=True)
class BlockLayout:
  """How a factor of size `dim` is split into `num_blocks` diagonal blocks of size `block`."""
  dim: int
  block: int

  @property
  def num_blocks(self) -> int:
    return -(-self.dim // self.block)

  @property
  def padded(self) -> int:
    return self.num_blocks * self.block

  @property
  def shape(self) -> list[int]:
    return [self.num_blocks, self.block, self.block]

  @classmethod
  def of(cls, dim: int, block_size: int) -> "BlockLayout":
    return cls(dim=dim, block=max(1, min(block_size, dim)))


@dataclasses.dataclass
class ThorLayer:
  """One hooked layer: its kernel, factor layouts and the factor variables (block-diagonal)."""
  layer: tf_keras.layers.Layer
  kind: str  # "conv" or "dense"
  kernel: tf.Variable
  a_layout: BlockLayout
  g_layout: BlockLayout
  a: tf.Variable  # [num_blocks, block, block] diagonal blocks of A
  g: tf.Variable  # same for G
  positions: tf.Variable  # T, output positions per example
  # Set while tracing the backward pass: this step's kernel gradient arrives preconditioned
  # (low-rank path) except at refresh steps. Read by the update traced after it.
  preconditioned_in_backward: bool = False


def gram_blocks(rows: tf.Tensor, layout: BlockLayout) -> tf.Tensor:
  """The diagonal blocks of rows^T rows, [num_blocks, block, block] (last block zero-padded)."""
  pad = layout.padded - layout.dim
  if pad:
    rows = tf.pad(rows, [[0, 0], [0, pad]])
  rows = tf.reshape(rows, [-1, layout.num_blocks, layout.block])
  return tf.einsum("mni,mnj->nij", rows, rows)


def damped_block_inverse(blocks: tf.Tensor, damping: tf.Tensor) -> tf.Tensor:
  """(B + damping I)^-1 for each block of [n, b, b], by Cholesky."""
  eye = tf.eye(blocks.shape[-1], batch_shape=[blocks.shape[0]], dtype=blocks.dtype)
  chol = tf.linalg.cholesky(blocks + damping * eye)
  return tf.linalg.cholesky_solve(chol, eye)


def precondition(grad: tf.Tensor, a_inv: tf.Tensor, g_inv: tf.Tensor,
                 a_layout: BlockLayout, g_layout: BlockLayout) -> tf.Tensor:
  """blockdiag(A_inv) @ grad2d @ blockdiag(G_inv), grad2d = grad as [d_A, C_out]."""
  shape = grad.shape
  x = tf.reshape(grad, [a_layout.dim, g_layout.dim])
  pad_a, pad_g = a_layout.padded - a_layout.dim, g_layout.padded - g_layout.dim
  if pad_a or pad_g:
    x = tf.pad(x, [[0, pad_a], [0, pad_g]])
  x = tf.reshape(x, [a_layout.num_blocks, a_layout.block, g_layout.padded])
  if g_layout.num_blocks == 1:  # one G block: a plain matmul on the right
    x = tf.matmul(a_inv, tf.matmul(x, g_inv[0]))
  else:  # [n_G, d_A, b_G] @ [n_G, b_G, b_G], as batched matmuls rather than an einsum
    x = tf.transpose(tf.reshape(tf.matmul(a_inv, x),
                                [a_layout.padded, g_layout.num_blocks, g_layout.block]), [1, 0, 2])
    x = tf.transpose(tf.matmul(x, g_inv), [1, 0, 2])
  x = tf.reshape(x, [a_layout.padded, g_layout.padded])
  if pad_a or pad_g:
    x = x[:a_layout.dim, :g_layout.dim]
  return tf.reshape(x, shape)


def _times_blocks(rows: tf.Tensor, inverse: tf.Tensor, layout: BlockLayout,
                  transpose: bool) -> tf.Tensor:
  """rows [M, dim] @ blockdiag(inverse) (each block transposed if asked), as [n, M, block]."""
  pad = layout.padded - layout.dim
  if pad:
    rows = tf.pad(rows, [[0, 0], [0, pad]])
  rows = tf.transpose(tf.reshape(rows, [-1, layout.num_blocks, layout.block]), [1, 0, 2])
  return tf.matmul(rows, inverse, transpose_b=transpose)


def low_rank_precondition(x_rows: tf.Tensor, d_rows: tf.Tensor, a_inv: tf.Tensor,
                          g_inv: tf.Tensor, a_layout: BlockLayout,
                          g_layout: BlockLayout) -> tf.Tensor:
  """A_inv (X^T D) G_inv as (X A_inv^T)^T (D G_inv), [d_A, C_out].

  X^T D is a convolution's kernel gradient (X: its im2col rows, D: its output gradient rows),
  of rank at most M, the rows. When M is small next to d_A (deep layers at low resolution:
  32 rows for a batch of 32 at 1x1), preconditioning the M rows costs far less than the
  kernel-sized gradient, and the final product replaces the kernel gradient's own matmul.
  """
  xa = _times_blocks(x_rows, a_inv, a_layout, transpose=True)  # [n_A, M, b_A]
  dg = _times_blocks(d_rows, g_inv, g_layout, transpose=False)  # [n_G, M, b_G]
  dg = tf.reshape(tf.transpose(dg, [1, 0, 2]), [-1, g_layout.padded])[:, :g_layout.dim]
  out = tf.matmul(xa, dg, transpose_a=True)  # [n_A, b_A, C_out], dg broadcast over blocks
  return tf.reshape(out, [a_layout.padded, g_layout.dim])[:a_layout.dim]


def low_rank_pays(rows: int, a_layout: BlockLayout, g_layout: BlockLayout) -> bool:
  """Whether the low-rank path's flops are under half the kernel-sized preconditioning's."""
  kernel_sized = a_layout.dim * g_layout.dim * (a_layout.block + g_layout.block)
  low_rank = rows * (a_layout.padded * a_layout.block + g_layout.padded * g_layout.block)
  return 2 * low_rank < kernel_sized


def _space_to_batch(layer) -> bool:
  """Whether a Conv2D's backward pass goes through space-to-batch: when it is dilated (Keras
  then requires stride 1).

  TensorFlow's CPU kernels without oneDNN (AVX2 without AVX-512, TF_ENABLE_ONEDNN_OPTS=0) have
  no dilated Conv2DBackpropInput/Filter. Off TPU tf.nn.convolution runs a dilated forward pass
  as space_to_batch, an undilated VALID conv and batch_to_space, so this is op for op the
  gradient TensorFlow itself takes of it: one code path on every device, exact everywhere.
  """
  return (any(r != 1 for r in layer.dilation_rate)
          and all(s == 1 for s in layer.strides))


def _space_to_batch_paddings(layer, inputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """(paddings, crops) of tf.nn.convolution's space-to-batch lowering of `layer` on `inputs`:
  SAME's padding made explicit (more at the end, as conv2d), then up to multiples of the rate."""
  base = []
  for size, rate in zip(layer.kernel_size, layer.dilation_rate):
    extra = (size - 1) * rate if layer.padding == "same" else 0
    base.append([extra // 2, extra - extra // 2])
  spatial = inputs.shape[1:3].as_list()
  if None in spatial:
    spatial = tf.shape(inputs)[1:3]
  return tf.required_space_to_batch_paddings(
      input_shape=spatial, block_shape=layer.dilation_rate, base_paddings=base)


def conv_backprop_input(layer, inputs: tf.Tensor, kernel: tf.Tensor,
                        dy: tf.Tensor) -> tf.Tensor:
  """dL/d`inputs` of a channels-last Conv2D from its output's gradient `dy`."""
  if not _space_to_batch(layer):
    return tf.raw_ops.Conv2DBackpropInput(
        input_sizes=tf.shape(inputs), filter=kernel, out_backprop=dy,
        strides=[1, *layer.strides, 1], padding=layer.padding.upper(),
        dilations=[1, *layer.dilation_rate, 1])
  rate = list(layer.dilation_rate)
  paddings, crops = _space_to_batch_paddings(layer, inputs)
  shape = tf.shape(inputs)
  padded = shape[1:3] + tf.reduce_sum(paddings, 1)
  sizes = tf.concat([shape[:1] * math.prod(rate), padded // rate, shape[3:]], 0)
  dx = tf.raw_ops.Conv2DBackpropInput(
      input_sizes=sizes, filter=kernel, out_backprop=tf.space_to_batch_nd(dy, rate, crops),
      strides=[1, 1, 1, 1], padding="VALID")
  return tf.batch_to_space(dx, rate, paddings)


def conv_backprop_filter(layer, inputs: tf.Tensor, kernel: tf.Tensor,
                         dy: tf.Tensor) -> tf.Tensor:
  """dL/d`kernel` of a channels-last Conv2D from its output's gradient `dy`."""
  if not _space_to_batch(layer):
    return tf.raw_ops.Conv2DBackpropFilter(
        input=inputs, filter_sizes=tf.shape(kernel), out_backprop=dy,
        strides=[1, *layer.strides, 1], padding=layer.padding.upper(),
        dilations=[1, *layer.dilation_rate, 1])
  rate = list(layer.dilation_rate)
  paddings, crops = _space_to_batch_paddings(layer, inputs)
  return tf.raw_ops.Conv2DBackpropFilter(
      input=tf.space_to_batch_nd(inputs, rate, paddings), filter_sizes=tf.shape(kernel),
      out_backprop=tf.space_to_batch_nd(dy, rate, crops), strides=[1, 1, 1, 1], padding="VALID")


def _im2col(layer, inputs: tf.Tensor, dim: int) -> tf.Tensor:
  """A Conv2D's input as [M, kh * kw * C_in] rows in the kernel's order."""
  kh, kw = layer.kernel_size
  patches = tf.image.extract_patches(
      inputs, sizes=[1, kh, kw, 1], strides=[1, *layer.strides, 1],
      rates=[1, *layer.dilation_rate, 1], padding=layer.padding.upper())
  return tf.reshape(patches, [-1, dim])


def _eye_initializer(layout: BlockLayout) -> Callable[..., tf.Tensor]:
  """Identity blocks: before its first refresh a kernel is updated like plain SGD."""
  def init(shape=None, dtype=tf.float32, **kwargs):
    del shape, kwargs
    return tf.eye(layout.block, batch_shape=[layout.num_blocks], dtype=dtype)
  return init


@tf_keras.utils.register_keras_serializable(package="nascli")
class Thor(tf_keras.optimizers.legacy.Optimizer):
  """THOR: momentum SGD on Kronecker-factored, block-diagonal natural gradients.

  Call `attach_thor(model, optimizer)` once both exist and before the first training step;
  without it every variable is trained first-order. See the module docstring for the math.
  """

  _HAS_AGGREGATE_GRAD = True

  def __init__(self,
               learning_rate=0.1,
               momentum: float = 0.9,
               frequency: int = 100,
               damping_init: float = 0.03,
               damping_decay: float = 1.0,
               steps_per_epoch: int = 0,
               damping=None,
               block_size: int = 128,
               weight_decay: float = 0.0,
               exclude_from_weight_decay: Sequence[str] | None = None,
               loss_scale: float = 1.0,
               precondition_dtype: str = "float32",
               low_rank: str = "auto",
               defer_recording: bool = True,
               name: str = "Thor",
               **kwargs):
    """Sets the hyperparameters.

    Args:
      learning_rate: a float or a schedule of the step (THOR's: `thor_schedules.ThorPolynomial`).
      momentum: momentum of v <- momentum * v + g; 0 for plain SGD.
      frequency: factors and inverses are refreshed every `frequency` steps, from step 0.
      damping_init: THOR damping at the start (used when `damping` is None).
      damping_decay: damping factor per 10 epochs; with steps_per_epoch > 0 the damping is
        `ThorDamping(damping_init, damping_decay, steps_per_epoch)`, else damping_init.
      steps_per_epoch: steps per epoch for the damping schedule (0: constant damping).
      damping: overrides the three above: a float, a schedule of the step or its config.
      block_size: size of the diagonal blocks the factors are split into (THOR: 128).
      weight_decay: coefficient of w added to each gradient after preconditioning.
      exclude_from_weight_decay: regexes; variables whose name matches one get no decay.
      loss_scale: fixed factor the loss was multiplied by (not a LossScaleOptimizer's).
      precondition_dtype: dtype the gradient and the inverses are cast to for the per-step
        preconditioning matmuls, the ordinary step's main cost (float32, bfloat16, float16;
        MindSpore's Ascend THOR uses float16). Factors, inverses and updates stay float32.
      low_rank: where a Conv2D's gradient is preconditioned between refreshes: "auto" in its
        backward pass from its input and output-gradient rows (`low_rank_precondition`, the
        same result) when that is cheaper, "always" there, "never" on the kernel-sized
        gradient. Never for a layer with a kernel regularizer or under gradient clipping
        (both need the raw gradient).
      defer_recording: record the factors of the layers preconditioned in the update in one
        cond at apply_gradients (a smaller graph); False records them in each
        backward pass, for a backward pass in a loop that apply_gradients is outside of
        (gradient accumulation).
      name: name of the optimizer.
      **kwargs: clipnorm, clipvalue, global_clipnorm, decay, as for any legacy optimizer.

    Raises:
      ValueError: a setting out of range.
    """
    super().__init__(name, **kwargs)
    settings = {"frequency": frequency, "block_size": block_size, "loss_scale": loss_scale,
                "precondition_dtype": precondition_dtype, "low_rank": low_rank}
    if isinstance(momentum, (int, float)):  # else a schedule or tensor
      settings["momentum"] = momentum
    for setting, value in settings.items():
      if not SETTINGS[setting].accepts(value):
        raise ValueError(f"{setting} must be {SETTINGS[setting].words}, got {value!r}")
    self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
    self._set_hyper("decay", self._initial_decay)
    self._set_hyper("momentum", momentum)
    self._momentum = not isinstance(momentum, (int, float)) or momentum > 0
    self.frequency = int(frequency)
    if damping is None:
      damping = (thor_schedules.ThorDamping(damping_init, damping_decay, steps_per_epoch)
                 if steps_per_epoch > 0 and damping_decay != 1.0 else float(damping_init))
    elif isinstance(damping, dict):
      damping = tf_keras.optimizers.schedules.deserialize(damping)
    self.damping = damping
    self.block_size = int(block_size)
    self.weight_decay = float(weight_decay)
    self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])
    self.loss_scale_factor = float(loss_scale)
    self.precondition_dtype = precondition_dtype
    self.low_rank = low_rank
    self.defer_recording = bool(defer_recording)
    self._refreshed_now: tf.Tensor | None = None
    self._preconditioned_at_refresh: set[Any] = set()
    self._thor_layers: dict[Any, ThorLayer] = {}
    # Recordings deferred from backward passes to their apply_gradients (`record_factors`):
    # (graph id, thread) -> (that graph, {kernel key: (state, inputs, dy)}).
    self._deferred: dict[tuple[int, int], tuple[Any, dict[Any, tuple]]] = {}
    self._dynamic_loss_scale: Callable[[], tf.Tensor] | None = None
    self._refreshed_at = None

  # --- layers -----------------------------------------------------------------------------

  @property
  def thor_layers(self) -> list[ThorLayer]:
    return list(self._thor_layers.values())

  def thor_layer(self, kernel: tf.Variable) -> ThorLayer | None:
    return self._thor_layers.get(_var_key(kernel))

  def register_layer(self, layer: tf_keras.layers.Layer, kind: str) -> ThorLayer:
    """Creates the factor variables of `layer` (idempotent); attach_thor hooks its call."""
    key = _var_key(layer.kernel)
    if key in self._thor_layers:
      return self._thor_layers[key]
    index = len(self._thor_layers)
    shape = layer.kernel.shape
    a_layout = BlockLayout.of(math.prod(shape[:-1]), self.block_size)
    g_layout = BlockLayout.of(shape[-1], self.block_size)

    def factor(name, fshape):
      # Named by hook order, which is the model's layer order: a rebuilt model restores them.
      return self.add_weight(f"thor_{index}_{name}", shape=fshape, dtype=tf.float32,
                             initializer="zeros", trainable=False,
                             synchronization=tf.VariableSynchronization.ON_READ,
                             aggregation=tf.VariableAggregation.MEAN)

    with self._distribution_strategy_scope():
      state = ThorLayer(layer=layer, kind=kind, kernel=layer.kernel, a_layout=a_layout,
                        g_layout=g_layout, a=factor("a", a_layout.shape),
                        g=factor("g", g_layout.shape), positions=factor("positions", []))
    self._weights.extend([state.a, state.g, state.positions])
    self._thor_layers[key] = state
    return state

  def set_dynamic_loss_scale(self, fn: Callable[[], tf.Tensor] | None) -> None:
    """The wrapping LossScaleOptimizer's current scale, divided out of output gradients."""
    self._dynamic_loss_scale = fn

  @property
  def refreshed_at(self) -> tf.Variable:
    """The step of the last refresh (-1: none yet); checkpointed with the optimizer."""
    if self._refreshed_at is None:
      with self._distribution_strategy_scope():
        self._refreshed_at = self.add_weight(
            "thor_refreshed_at", shape=[], dtype=tf.int64,
            initializer=tf_keras.initializers.Constant(-1), trainable=False,
            aggregation=tf.VariableAggregation.NONE)
      self._weights.append(self._refreshed_at)
    return self._refreshed_at

  def is_refresh_step(self) -> tf.Tensor:
    """True at steps 0, frequency, 2 * frequency, ..., and after one whose update was skipped.

    A LossScaleOptimizer skips the update of a step with non-finite gradients but still counts
    it; a refresh step skipped so is retried at the next step rather than `frequency` later.
    """
    scheduled = self.iterations - tf.math.floormod(self.iterations, self.frequency)
    return self.refreshed_at < scheduled

  def damping_at(self, step) -> tf.Tensor:
    if callable(self.damping):
      return tf.cast(self.damping(step), tf.float32)
    return tf.constant(float(self.damping), tf.float32)

  def _record(self, state: ThorLayer, inputs: tf.Tensor, dy: tf.Tensor) -> list[tf.Operation]:
    """A and G of `state` from a layer input and the gradient of its pre-activation output."""
    x = tf.cast(inputs, tf.float32)
    d = tf.cast(dy, tf.float32)
    layer = state.layer
    x = (_im2col(layer, x, state.a_layout.dim) if state.kind == "conv"
         else tf.reshape(x, [-1, state.a_layout.dim]))
    d = tf.reshape(d, [-1, state.g_layout.dim])
    batch = tf.cast(tf.shape(inputs)[0], tf.float32)
    rows = tf.cast(tf.shape(x)[0], tf.float32)
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    scale = batch * replicas / self.loss_scale_factor
    if self._dynamic_loss_scale is not None:
      scale = scale / tf.cast(self._dynamic_loss_scale(), tf.float32)
    return [state.a.assign(gram_blocks(x, state.a_layout) / rows, read_value=False),
            state.g.assign(gram_blocks(d * scale, state.g_layout) / rows, read_value=False),
            state.positions.assign(rows / batch, read_value=False)]

  @_not_converted
  def record_factors(self, state: ThorLayer, inputs: tf.Tensor,
                     dy: tf.Tensor) -> tf.Tensor | None:
    """`_record` on a refresh step, for a backward pass (replica context).

    Deferred to this graph's apply_gradients, which records every layer in one `tf.cond`
    (`_record_deferred`), which halves ResNet-10's conds. Returns None then. With
    `defer_recording` False, eagerly, or when the layer's input or output gradient belongs to
    another graph (a nested tf.function's gradient function; a loop body fed from outside it)
    it records here, in a cond of its own, and returns that cond's output for the gradient to
    depend on.
    """
    graph = tf.compat.v1.get_default_graph()
    if (not self.defer_recording or tf.executing_eagerly()
        or any(getattr(t, "graph", None) is not graph for t in (inputs, dy))):
      return self._record_in_cond([(state, inputs, dy)])
    key = (id(graph), threading.get_ident())
    if key not in self._deferred or self._deferred[key][0] is not graph:
      self._deferred[key] = (graph, {})
    self._deferred[key][1][_var_key(state.kernel)] = (state, inputs, dy)
    return None

  def _record_in_cond(self, records: Sequence[tuple[ThorLayer, tf.Tensor, tf.Tensor]]
                      ) -> tf.Tensor:
    def record():
      ops = [op for state, inputs, dy in records for op in self._record(state, inputs, dy)]
      with tf.control_dependencies(ops):
        return tf.constant(True)
    return tf.cond(self.is_refresh_step(), record, lambda: tf.constant(False))

  @_not_converted
  def _record_deferred(self) -> None:
    """The recordings this thread deferred in the graph being built or one enclosing it.

    Called from apply_gradients (replica context) before the update: the refresh, later in
    the same graph, reads the factors after these writes (automatic control dependencies).
    """
    records, thread = {}, threading.get_ident()
    for graph in _graph_chain(tf.compat.v1.get_default_graph()):
      entry = self._deferred.get((id(graph), thread))
      if entry is not None and entry[0] is graph:
        del self._deferred[(id(graph), thread)]
        records.update(entry[1])
    if records:
      self._record_in_cond(list(records.values()))

  def _check_deferred(self) -> None:
    """Fails on recordings that no apply_gradients can make any more (else the step would
    silently precondition with stale or identity inverses); drops unrelated leftovers."""
    chain = _graph_chain(tf.compat.v1.get_default_graph())
    # An update in replica context (MirroredStrategy without merge_call) checks its own
    # thread's: another replica's are its own apply_gradients' to make.
    mine_only = not tf.distribute.in_cross_replica_context()
    for key, (graph, records) in list(self._deferred.items()):
      if mine_only and key[1] != threading.get_ident():
        continue
      del self._deferred[key]
      related = (any(graph is g for g in chain)
                 or any(chain[0] is g for g in _graph_chain(graph)))
      if related:  # the step's backward in a nested loop or branch, or in another replica
        names = ", ".join(sorted(state.layer.name for state, _, _ in records.values()))
        raise ValueError(
            f"THOR cannot record the Kronecker factors of {names}: their backward pass ran in"
            " a loop or branch that apply_gradients is outside of, or in a replica that did"
            " not call apply_gradients itself; call apply_gradients in the same replica"
            " function and graph as the backward pass, or build Thor with"
            " defer_recording=False")
      # else another function's gradient with no update (e.g. a gradient norm): nothing to do

  @_not_converted
  def _transform_unaggregated_gradients(self, grads_and_vars):
    # A wrapping LossScaleOptimizer calls this in replica context instead of apply_gradients.
    self._record_deferred()
    return super()._transform_unaggregated_gradients(grads_and_vars)

  @_not_converted
  def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
    self._record_deferred()
    return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)

  def uses_low_rank(self, state: ThorLayer, rows: int | None) -> bool:
    """Whether `state`'s conv (M = `rows` per replica, None: unknown) takes the low-rank path."""
    if self.low_rank == "never" or rows is None:
      return False
    return self.low_rank == "always" or low_rank_pays(rows, state.a_layout, state.g_layout)

  @_not_converted
  def conv_kernel_gradient(self, state: ThorLayer, inputs: tf.Tensor, kernel: tf.Tensor,
                           dy: tf.Tensor, low_rank: bool) -> tf.Tensor:
    """A hooked Conv2D's kernel gradient; its factors recorded on a refresh step.

    With `low_rank`, between refreshes the gradient is already preconditioned:
    `low_rank_precondition` of this batch's rows with the standing inverses, the value the
    update would otherwise compute from the kernel-sized gradient. At a refresh step it is the
    plain gradient (the inverses are rebuilt after the backward pass and the update
    preconditions with the new ones). Recording and the gradient share one `tf.cond`: each
    cond is graph-building and start-up time.
    """
    layer = state.layer

    def plain():
      return conv_backprop_filter(layer, inputs, kernel, dy)

    if not low_rank:
      recorded = self.record_factors(state, inputs, dy)
      with tf.control_dependencies([] if recorded is None else [recorded]):
        return plain()

    def record_and_plain():
      with tf.control_dependencies(self._record(state, inputs, dy)):
        return plain()

    def preconditioned():
      low = tf.as_dtype(self.precondition_dtype)
      x = tf.cast(_im2col(layer, inputs, state.a_layout.dim), low)
      d = tf.cast(tf.reshape(dy, [-1, state.g_layout.dim]), low)
      a_inv = tf.cast(self.get_slot(state.kernel, A_INV_SLOT), low)
      g_inv = tf.cast(self.get_slot(state.kernel, G_INV_SLOT), low)
      grad = low_rank_precondition(x, d, a_inv, g_inv, state.a_layout, state.g_layout)
      return tf.cast(tf.reshape(grad, tf.shape(kernel)), kernel.dtype)

    return tf.cond(self.is_refresh_step(), record_and_plain, preconditioned)

  # --- refresh ------------------------------------------------------------------------------

  @staticmethod
  def _replica_means(variables: Sequence[tf.Variable]) -> list[tf.Tensor]:
    """SyncOnRead(MEAN) variables averaged over the replicas (one all-reduce for all)."""
    if tf.distribute.in_cross_replica_context():
      return [tf.convert_to_tensor(v) for v in variables]  # the read reduces with MEAN
    ctx = tf.distribute.get_replica_context()
    values = [tf.convert_to_tensor(v) for v in variables]
    if ctx.num_replicas_in_sync > 1:
      values = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, values)
    return list(values)

  @_not_converted
  def _refresh(self, states: Sequence[ThorLayer],
               plain: Sequence[tuple[tf.Tensor, tf.Variable]] = ()
               ) -> tuple[tf.Tensor, list[tf.Tensor]]:
    """On a refresh step, the damped block inverses of every layer into its kernel's slots.

    `plain` are low-rank kernels' gradients, plain only at a refresh step: they come back
    preconditioned with the new inverses then, unchanged otherwise (one cond for all).

    Blocks of one size from all layers and both factors go through one batched Cholesky,
    and each block's damping and scale are gathered from one vector over the layers: a few
    large ops instead of several per factor, which is most of a refresh step's cost and of
    the optimizer's share of graph building.
    """
    def refresh():
      lam = self.damping_at(self.iterations)
      means = self._replica_means([v for s in states for v in (s.positions, s.a, s.g)])
      positions = tf.maximum(tf.stack(means[0::3]), 1.0)  # [layers]
      per_layer = tf.stack([tf.sqrt(lam / positions), tf.sqrt(1.0 / positions)])
      groups: dict[int, list[tuple[tf.Tensor, int, tf.Variable]]] = {}
      for i, state in enumerate(states):
        for factor, layout, slot in ((means[3 * i + 1], state.a_layout, A_INV_SLOT),
                                     (means[3 * i + 2], state.g_layout, G_INV_SLOT)):
          groups.setdefault(layout.block, []).append(
              (factor, i, self.get_slot(state.kernel, slot)))
      ops, inverse_of = [], {}
      for members in groups.values():
        counts = [int(blocks.shape[0]) for blocks, _, _ in members]
        layer_of_block = [i for (_, i, _), n in zip(members, counts) for _ in range(n)]
        damping, scale = tf.unstack(
            tf.gather(per_layer, layer_of_block, axis=1)[:, :, None, None])
        blocks = tf.concat([m[0] for m in members], axis=0)
        inverses = damped_block_inverse(blocks, damping) * scale
        for inverse, (_, _, slot) in zip(tf.split(inverses, counts), members):
          ops.append(slot.assign(inverse, read_value=False))
          inverse_of[id(slot)] = inverse
      ops.append(self.refreshed_at.assign(self.iterations, read_value=False))
      grads = [self._kernel_sized(grad, var, inverse_of[id(self.get_slot(var, A_INV_SLOT))],
                                  inverse_of[id(self.get_slot(var, G_INV_SLOT))])
               for grad, var in plain]
      with tf.control_dependencies(ops):
        return tf.constant(True), [tf.identity(g) for g in grads]
    return tf.cond(self.is_refresh_step(), refresh,
                   lambda: (tf.constant(False), [tf.identity(g) for g, _ in plain]))

  @_not_converted
  def _distributed_apply(self, distribution, grads_and_vars, apply_state, name):
    self._check_deferred()
    grads_and_vars = list(grads_and_vars)
    states = [s for s in (self.thor_layer(v) for _, v in grads_and_vars) if s is not None]
    if not states:
      return super()._distributed_apply(distribution, grads_and_vars, apply_state, name)
    # Low-rank kernels' gradients (plain at a refresh step) are preconditioned inside the
    # refresh's cond where they are one tensor each; mirrored ones in their own updates.
    pending = [i for i, (g, v) in enumerate(grads_and_vars)
               if self.thor_layer(v) is not None
               and self.thor_layer(v).preconditioned_in_backward
               and not isinstance(g, tf.distribute.DistributedValues)]
    refreshed, grads = self._refresh(states, [grads_and_vars[i] for i in pending])
    for i, grad in zip(pending, grads):
      grads_and_vars[i] = (grad, grads_and_vars[i][1])
    self._refreshed_now = refreshed  # read by the updates of the other low-rank kernels
    self._preconditioned_at_refresh = {_var_key(grads_and_vars[i][1]) for i in pending}
    with tf.control_dependencies([refreshed]):
      return super()._distributed_apply(distribution, grads_and_vars, apply_state, name)

  # --- update -------------------------------------------------------------------------------

  def _create_slots(self, var_list):
    for var in var_list:
      if self._momentum:
        self.add_slot(var, "momentum")
      state = self.thor_layer(var)
      if state is not None:
        self.add_slot(var, A_INV_SLOT, _eye_initializer(state.a_layout),
                      shape=state.a_layout.shape)
        self.add_slot(var, G_INV_SLOT, _eye_initializer(state.g_layout),
                      shape=state.g_layout.shape)

  def _prepare_local(self, var_device, var_dtype, apply_state):
    super()._prepare_local(var_device, var_dtype, apply_state)
    apply_state[(var_device, var_dtype)]["momentum"] = tf.identity(
        self._get_hyper("momentum", var_dtype))

  def _decays(self, var) -> bool:
    if not self.weight_decay:
      return False
    return not any(re.search(pattern, var.name) for pattern in self.exclude_from_weight_decay)

  def _kernel_sized(self, grad: tf.Tensor, var: tf.Variable, a_inv: tf.Tensor | None = None,
                    g_inv: tf.Tensor | None = None) -> tf.Tensor:
    """`precondition` of a kernel's gradient by its inverses (the slots unless given)."""
    state = self.thor_layer(var)
    low = tf.as_dtype(self.precondition_dtype)
    a_inv = self.get_slot(var, A_INV_SLOT) if a_inv is None else a_inv
    g_inv = self.get_slot(var, G_INV_SLOT) if g_inv is None else g_inv
    return tf.cast(precondition(tf.cast(grad, low), tf.cast(a_inv, low), tf.cast(g_inv, low),
                                state.a_layout, state.g_layout), grad.dtype)

  def _resource_apply_dense(self, grad, var, apply_state=None):
    var_device, var_dtype = var.device, var.dtype.base_dtype
    coefficients = ((apply_state or {}).get((var_device, var_dtype))
                    or self._fallback_apply_state(var_device, var_dtype))
    if self.loss_scale_factor != 1.0:
      grad = grad / self.loss_scale_factor
    state = self.thor_layer(var)
    if state is not None and not state.preconditioned_in_backward:
      grad = self._kernel_sized(grad, var)
    elif state is not None and _var_key(var) not in self._preconditioned_at_refresh:
      # a low-rank kernel's mirrored gradient: plain only at a refresh step
      grad = tf.cond(self._refreshed_now, lambda grad=grad: self._kernel_sized(grad, var),
                     lambda grad=grad: grad)
    if self._decays(var):
      grad = grad + tf.cast(self.weight_decay, var_dtype) * var
    if self._momentum:
      accum = self.get_slot(var, "momentum")
      return tf.raw_ops.ResourceApplyMomentum(
          var=var.handle, accum=accum.handle, lr=coefficients["lr_t"], grad=grad,
          momentum=coefficients["momentum"], use_locking=self._use_locking,
          use_nesterov=False)
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=var.handle, alpha=coefficients["lr_t"], delta=grad, use_locking=self._use_locking)

  def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
    # Dense update of the touched rows' gradient (an embedding would be first-order anyway).
    dense = tf.math.unsorted_segment_sum(grad, indices, tf.shape(var)[0])
    return self._resource_apply_dense(dense, var, apply_state)

  def get_config(self):
    config = super().get_config()
    damping = self.damping
    if isinstance(damping, tf_keras.optimizers.schedules.LearningRateSchedule):
      damping = tf_keras.optimizers.schedules.serialize(damping)
    config.update({
        "learning_rate": self._serialize_hyperparameter("learning_rate"),
        "decay": self._initial_decay,
        "momentum": self._serialize_hyperparameter("momentum"),
        "frequency": self.frequency,
        "damping": damping,
        "block_size": self.block_size,
        "weight_decay": self.weight_decay,
        "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
        "loss_scale": self.loss_scale_factor,
        "precondition_dtype": self.precondition_dtype,
        "low_rank": self.low_rank,
        "defer_recording": self.defer_recording,
    })
    return config


# --- layer hooks ----------------------------------------------------------------------------


def _kind(layer) -> str | None:
  """'conv' / 'dense' for the layers THOR preconditions, else None (first-order)."""
  if not getattr(layer, "built", False) or getattr(layer, "kernel", None) is None:
    return None
  if not layer.kernel.trainable:
    return None
  if isinstance(layer, tf_keras.layers.Conv2D):
    if isinstance(layer, tf_keras.layers.Conv2DTranspose):
      return None
    if layer.groups != 1 or layer.data_format != "channels_last":
      return None
    return "conv"
  if isinstance(layer, tf_keras.layers.Dense):
    return "dense"
  return None


def _hook(layer: tf_keras.layers.Layer, state: ThorLayer, thor: Thor) -> None:
  """Hooks `layer` so its backward pass records its factors on refresh steps.

  G comes from the gradient of the layer's pre-activation output (its matmul or convolution,
  bias added), as in K-FAC and MindSpore's THOR cells; a fused activation is applied after.
  """
  if state.kind == "conv" and _convolves_by_op(layer):
    _hook_convolution(layer, state, thor)
  else:
    _hook_output(layer, state, thor)
  layer._thor_hooked = True  # pylint: disable=protected-access


def _convolves_by_op(layer) -> bool:
  """Whether the layer's call is Keras' own, which runs `convolution_op` once on its input."""
  return (type(layer).call is tf_keras.layers.Conv2D.call
          and isinstance(layer.padding, str) and layer.padding in ("same", "valid")
          and layer.rank == 2)


def _hook_output(layer: tf_keras.layers.Layer, state: ThorLayer, thor: Thor) -> None:
  """Wraps `layer.call`: its pre-activation output's gradient records the factors."""
  original = layer.call

  @tf.custom_gradient
  def capture(inputs, outputs):
    def grad(dy):
      recorded = thor.record_factors(state, inputs, dy)
      if recorded is None:
        return None, dy
      with tf.control_dependencies([recorded]):
        return None, tf.identity(dy)
    return tf.identity(outputs), grad

  @functools.wraps(original)
  def call(inputs, *args, **kwargs):
    activation = getattr(layer, "activation", None)
    if activation is None or activation is tf_keras.activations.linear:
      return capture(inputs, original(inputs, *args, **kwargs))
    # Keras' Dense/Conv apply `self.activation` last when it is set; switched off for the
    # call (traced one replica at a time), then applied to the captured output.
    layer.activation = None
    try:
      outputs = original(inputs, *args, **kwargs)
    finally:
      layer.activation = activation
    return activation(capture(inputs, outputs))

  layer.call = tf.autograph.experimental.do_not_convert(call)


def _low_rank_allowed(layer, thor: Thor) -> bool:
  """The low-rank path replaces the kernel gradient: not when anything else must see it raw."""
  clipping = any(getattr(thor, name, None) for name in ("clipnorm", "clipvalue",
                                                         "global_clipnorm"))
  return thor.low_rank != "never" and not clipping and layer.kernel_regularizer is None


def _hook_convolution(layer: tf_keras.layers.Layer, state: ThorLayer, thor: Thor) -> None:
  """Wraps `layer.convolution_op`: its backward pass records the factors and, where the
  low-rank path pays, returns the kernel gradient already preconditioned."""
  original = layer.convolution_op
  allowed = _low_rank_allowed(layer, thor)

  @tf.custom_gradient
  def convolution(inputs, kernel):
    outputs = original(inputs, kernel)

    def grad(dy):
      dx = conv_backprop_input(layer, inputs, kernel, dy)
      rows = None
      if inputs.shape[0] is not None and None not in dy.shape[1:3]:
        rows = int(inputs.shape[0]) * int(dy.shape[1]) * int(dy.shape[2])
      state.preconditioned_in_backward = allowed and thor.uses_low_rank(state, rows)
      return dx, thor.conv_kernel_gradient(state, inputs, kernel, dy,
                                           state.preconditioned_in_backward)
    return outputs, grad

  layer.convolution_op = tf.autograph.experimental.do_not_convert(convolution)


def _graph_chain(graph) -> list:
  """`graph` and the graphs enclosing it (a loop body's or branch's function, then its
  tf.function's), innermost first."""
  chain = []
  while graph is not None:
    chain.append(graph)
    graph = getattr(graph, "outer_graph", None)
  return chain


def find_thor(optimizer) -> tuple[Thor | None, Any]:
  """(the Thor inside `optimizer`'s wrappers or None, the LossScaleOptimizer around it or None)."""
  inner, loss_scaler = wrappers.unwrap(optimizer)
  return (inner if isinstance(inner, Thor) else None), loss_scaler


def attach_thor(model: tf_keras.layers.Layer, optimizer) -> list[str]:
  """Hooks every built Conv2D / Dense of `model` (nested models included) into THOR.

  Call it once the model is built and the optimizer exists, before the first training step
  is traced, under the strategy that built both (entered here from the model when none is).

  Args:
    model: a built tf_keras model or layer.
    optimizer: a Thor, possibly wrapped (LossScaleOptimizer, Model Garden's EMA).

  Returns:
    The names of the hooked layers, in hook order.

  Raises:
    TypeError: `optimizer` holds no Thor.
  """
  thor, loss_scaler = find_thor(optimizer)
  if thor is None:
    raise TypeError(f"attach_thor needs a Thor optimizer, got {type(optimizer).__name__}")
  if loss_scaler is not None:
    thor.set_dynamic_loss_scale(lambda: loss_scaler.loss_scale)
  strategy = getattr(model, "distribute_strategy", None)
  scope = (strategy.scope() if strategy is not None and not tf.distribute.has_strategy()
           else contextlib.nullcontext())
  # pylint: disable=protected-access
  if hasattr(model, "_flatten_layers"):  # Keras' own order: the model's layer order
    candidates = model._flatten_layers(include_self=True, recursive=True)
  else:
    candidates = [model, *model.submodules]
  layers, seen = [], set()
  for layer in candidates:
    if id(layer) not in seen and _kind(layer):
      seen.add(id(layer))
      layers.append(layer)
  hooked = []
  with scope:
    _ = thor.iterations, thor.refreshed_at  # created now, not inside a traced gradient
    for layer in layers:
      state = thor.register_layer(layer, _kind(layer))
      thor._create_slots([state.kernel])  # the backward pass may read the inverses first
      if not getattr(layer, "_thor_hooked", False):
        _hook(layer, state, thor)
      hooked.append(layer.name)
  return hooked


def maybe_attach_thor(model, optimizer) -> list[str]:
  """attach_thor when `optimizer` is (or wraps) Thor; a no-op returning [] otherwise."""
  if model is None or find_thor(optimizer)[0] is None:
    return []
  return attach_thor(model, optimizer)


# Thor is a legacy (OptimizerV2) optimizer; it is returned whichever table the factory uses.
optimizers.register_optimizer("thor", Thor, use_legacy_optimizer=True)
optimizers.register_optimizer("thor", Thor, use_legacy_optimizer=False)
