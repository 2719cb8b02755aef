"""Per-device latency models: an architecture's latency in ms, predicted before it trains.

A latency model is fitted once on architectures of a search space measured on one target
(runtime, its version, device, input size, threads) and saved as one JSON file that the search
loads (`--latency_model`). The predictors are the anchors' cost models: TuNAS's linear model over
one-hot decisions, ProxylessNAS/OFA's per-block lookup table, linear models with the channel
interactions of consecutive blocks or the pairs within a block, and the per-device cost of the
space's own arithmetic (`cost_features`, where the space registers it); a kind other than the
linear one is kept only where cross-validation says it predicts clearly better.

Pure Python with numpy (scipy when fitting and evaluating): neither TensorFlow nor pyglove is
imported, so flag checks and the search driver can load a model and predict in milliseconds.
"""

from nascli.latency_model.encoding import Decisions
from nascli.latency_model.encoding import decisions_from_rows
from nascli.latency_model.encoding import decisions_of_space
from nascli.latency_model.encoding import encode
from nascli.latency_model.encoding import parse
from nascli.latency_model.model_file import build
from nascli.latency_model.model_file import check_matches
from nascli.latency_model.model_file import evaluate
from nascli.latency_model.model_file import FORMAT_VERSION
from nascli.latency_model.model_file import LatencyModel
from nascli.latency_model.model_file import load
from nascli.latency_model.predictors import BestFit
from nascli.latency_model.predictors import fit_best
from nascli.latency_model.predictors import MARGIN
from nascli.latency_model.predictors import PREDICTORS
from nascli.latency_model.predictors import register_predictor

__all__ = [
    'BestFit', 'Decisions', 'FORMAT_VERSION', 'LatencyModel', 'MARGIN', 'PREDICTORS', 'build',
    'check_matches', 'decisions_from_rows', 'decisions_of_space', 'encode', 'evaluate',
    'fit_best', 'load', 'parse', 'register_predictor',
]
