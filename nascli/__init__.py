"""nascli: NAS, training and data tooling on TensorFlow Model Garden.

`TF_USE_LEGACY_KERAS=1` is set here, before any nascli module can import TensorFlow: nascli
and Model Garden build everything with tf_keras (Keras 2), and without it `import tensorflow`
also loads Keras 3 and scikit-learn, which nothing here uses, at about a third of the import's
time in every command, trial and worker (BENCHMARKS.md, "Start-up"). It also makes `tf.keras`
the tf_keras that Model Garden's models are. A value the user set is kept.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"
