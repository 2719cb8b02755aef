"""nascli's optimizers and learning-rate schedules; importing this registers them in MG."""

# pylint: disable=unused-import
from tf_vision.optimization import optimizers as _optimizers
from tf_vision.optimization import schedules as _schedules
from tf_vision.optimization import thor as _thor
from tf_vision.optimization import thor_schedules as _thor_schedules
