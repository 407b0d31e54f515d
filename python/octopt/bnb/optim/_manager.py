"""GlobalOptimManager: per-parameter configuration overrides, with bitsandbytes' semantics.

A parameter's configuration is its param group's values and the optimizer's ``args``, updated by what
``override_config`` set for it: first by its (group, position) index as ``register_parameters`` recorded it,
then by the parameter's identity. The layout keys (``optim_bits``, ``min_8bit_size``) take effect when the
optimizer lays out its state (its first step, or the first read of its state); the hyper-parameters
(``lr``, ``betas``, ``eps``, ``weight_decay``, ``max_unorm``, ...) at every step.
"""

from __future__ import annotations

from typing import Any

import torch


class GlobalOptimManager:
    """The one manager of per-parameter overrides (``GlobalOptimManager.get_instance()``)."""

    _instance: GlobalOptimManager | None = None

    def __init__(self):
        raise RuntimeError("Call get_instance() instead")

    def initialize(self) -> None:
        self.pid2config: dict[int, dict] = {}  # id(param) -> overrides
        self.index2config: dict[tuple[int, int], dict] = {}  # (group index, position) -> overrides
        self.optimizer = None
        self.uses_config_override = False
        self.module_weight_config_triple: list[tuple[Any, str, dict]] = []
        self.version = 0  # bumped by every change, so optimizers re-read the overrides only then

    @classmethod
    def get_instance(cls) -> GlobalOptimManager:
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def register_parameters(self, params: Any) -> None:
        """Records the (group, position) index of every parameter that has an override, so that the
        override survives the parameter being replaced (e.g. by ``model.cuda()``)."""
        param_groups = list(params)
        if not param_groups:
            raise ValueError("register_parameters: argument 'params' is empty")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group_index, group in enumerate(param_groups):
            for p_index, p in enumerate(group["params"]):
                if id(p) in self.pid2config:
                    self.index2config[(group_index, p_index)] = self.pid2config[id(p)]
        self.version += 1

    def override_config(
        self, parameters: Any, key: str | None = None, value: Any = None, key_value_dict: dict | None = None
    ) -> None:
        """Overrides the optimizer configuration of ``parameters`` (a tensor or a list of tensors): one
        ``key``/``value`` pair, or several in ``key_value_dict`` (e.g. ``{"optim_bits": 32}``, ``lr``,
        ``betas``)."""
        self.uses_config_override = True
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        if key is not None and value is not None:
            if key_value_dict is not None:
                raise ValueError("override_config: give either 'key' and 'value' or 'key_value_dict', not both")
            key_value_dict = {key: value}
        if key_value_dict is not None:
            for p in parameters:
                if id(p) in self.pid2config:
                    self.pid2config[id(p)].update(key_value_dict)
                else:
                    self.pid2config[id(p)] = key_value_dict
        self.version += 1

    def register_module_override(self, module: torch.nn.Module, param_name: str, config: dict) -> None:
        """Overrides the configuration of ``getattr(module, param_name)`` for the optimizers that hold it
        (resolved at their first step, as bitsandbytes does): how StableEmbedding keeps 32-bit state."""
        self.module_weight_config_triple.append((module, param_name, config))
        self.version += 1
