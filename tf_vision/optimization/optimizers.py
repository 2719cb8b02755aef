"""FastNN's optimizers that Model Garden lacks (Adadelta, Ftrl), registered in its factory.

OptimizerFactory calls `cls(**config.as_dict(), learning_rate=schedule)`, so the config fields
(`tf_vision.configs.optimization.AdadeltaConfig` / `FtrlConfig`, including `name` and the
clipnorm/clipvalue/global_clipnorm of BaseOptimizerConfig) are exactly the keyword arguments
of tf_keras' Adadelta and Ftrl. Both the legacy table (the default path, used by
`base_task.create_optimizer`) and the new-optimizer table are filled.
"""

import tf_keras

from official.modeling.optimization import optimizer_factory

# key -> (legacy class, new-style class); the config field of the same name carries the args.
OPTIMIZERS = {
    "adadelta": (tf_keras.optimizers.legacy.Adadelta, tf_keras.optimizers.experimental.Adadelta),
    "ftrl": (tf_keras.optimizers.legacy.Ftrl, tf_keras.optimizers.experimental.Ftrl),
}


def register_optimizer(key: str, cls: type, use_legacy_optimizer: bool) -> None:
  """register_optimizer_cls, except that registering the same class again (or a re-import of
  its module) is a no-op instead of an error."""
  table = (optimizer_factory.LEGACY_OPTIMIZERS_CLS if use_legacy_optimizer
           else optimizer_factory.NEW_OPTIMIZERS_CLS)
  existing = table.get(key)
  if existing is cls:
    return
  if existing is not None and existing.__qualname__ == cls.__qualname__:
    table[key] = cls
    return
  optimizer_factory.register_optimizer_cls(key, cls, use_legacy_optimizer=use_legacy_optimizer)


for _key, (_legacy_cls, _new_cls) in OPTIMIZERS.items():
  register_optimizer(_key, _legacy_cls, use_legacy_optimizer=True)
  register_optimizer(_key, _new_cls, use_legacy_optimizer=False)
