"""Imported by every entry point: Model Garden's vision registrations plus nascli's own."""

# pylint: disable=unused-import
from official.vision import registry_imports as _mg_registry_imports
from tf_vision.configs import experiment_configs as _experiment_configs
from tf_vision.modeling import backbones as _backbones
from tf_vision.optimization import optimizers as _optimizers
from tf_vision.optimization import schedules as _schedules
