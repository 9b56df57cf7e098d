"""One environment as a value: a registered id and the options it is built with.

:class:`EnvConfig` is checked by the environment's own constructor checks
(:meth:`~dallygym.envs.base.EnvBase.check_options`) before anything is built, so that a
training or evaluation refuses a bad option at once, naming it, rather than after minutes of
work. :class:`dallygym.learning.trainer.TrainConfig` hands its environment settings over as one
(:meth:`~dallygym.learning.trainer.TrainConfig.env_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from .base import EnvBase


def registered_ids() -> tuple[str, ...]:
    """The Gymnasium ids that dallygym registers (the only ones an :class:`EnvConfig`, or an
    agent's config, may name)."""
    from .. import _register_envs

    _register_envs()
    return tuple(
        sorted(
            env_id
            for env_id, spec in gym.registry.items()
            if isinstance(spec.entry_point, str) and spec.entry_point.startswith("dallygym.") and spec.namespace is None
        )
    )


@dataclass(frozen=True)
class EnvConfig:
    """A registered id (``"Dally-v0"``, ``"DallyQueue-v0"``, ...) and the keyword options the
    environment is built with; options left out take the id's registered values, then the
    constructor's defaults.

    >>> EnvConfig("DallyQueue-v0", {"racks": 2, "guard_leases": 0.5}).check()["guard_leases"]
    0.5
    """

    env_id: str = "Dally-v0"
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or self.env_id.removeprefix("dallygym:") not in registered_ids():
            raise ValueError(
                f"env_id {self.env_id!r} is not one of dallygym's environments ({', '.join(registered_ids())})"
            )
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise TypeError(f"options must map option names to values, got {type(self.options).__name__}")
        object.__setattr__(self, "env_id", self.env_id.removeprefix("dallygym:"))
        object.__setattr__(self, "options", dict(self.options))  # (its own copy)

    @property
    def env_class(self) -> type[EnvBase]:
        """The environment class the id is registered with."""
        return gym.envs.registration.load_env_creator(gym.spec(self.env_id).entry_point)

    def check(self) -> dict[str, Any]:
        """Every option the environment would be built with (the defaults filled in), checked by
        the environment's own constructor checks: a ValueError or TypeError naming the option
        (an option the environment does not have is named with the id and its options)."""
        cls = self.env_class
        known = cls.option_defaults()
        unknown = [name for name in self.options if name not in known]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} {'is not an option' if len(unknown) == 1 else 'are not options'} "
                f"of {self.env_id} ({cls.__name__}); its options are {', '.join(known)}"
            )
        return cls.check_options(**{**gym.spec(self.env_id).kwargs, **self.options})

    def replace(self, **options: Any) -> EnvConfig:
        """The same id with ``options`` changed or added."""
        return EnvConfig(self.env_id, {**self.options, **options})

    def make(self, **options: Any) -> gym.Env:
        """The environment, after :meth:`check` (``options`` as in :meth:`replace`)."""
        config = self.replace(**options) if options else self
        config.check()
        return gym.make(config.env_id, **config.options)
