"""Model identifiers and per-layer model profiles (package data).

The six DNN models of the Dally paper's Table I are identified everywhere (traces, profiles,
the CLI, the environment) by the names in :data:`MODEL_NAMES`. Each has a per-layer profile
shipped under ``dallygym/data/models/`` (produced from torchvision / transformers models, see
``shared/reference/README.md``): one row per module that owns parameters, in forward order,
with its parameter count, fp32 gradient bytes and forward multiply-accumulates per sample.

The paper's "MobileNetV3" is torchvision's ``mobilenet_v3_small``; its identifier here is
``mobilenet_v3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

#: The paper's six models, in the order of its Table I.
MODEL_NAMES: tuple[str, ...] = (
    "vgg11",
    "alexnet",
    "mobilenet_v3",
    "resnet18",
    "resnet50",
    "bert_large",
)

#: Profile file (under ``dallygym/data/models``) of each model identifier.
_PROFILE_FILES: dict[str, str] = {
    "vgg11": "vgg11.csv",
    "alexnet": "alexnet.csv",
    "mobilenet_v3": "mobilenet_v3_small.csv",
    "resnet18": "resnet18.csv",
    "resnet50": "resnet50.csv",
    "bert_large": "bert_large.csv",
}

#: Layer kinds whose gradients are all-reduced as one collective each (the paper's preset:
#: one ring all-reduce per weight layer). Norm layers' few parameters are left out.
WEIGHT_LAYER_KINDS: frozenset[str] = frozenset({"Conv2d", "Linear", "Embedding"})

_PROFILE_COLUMNS = ("index", "module", "kind", "params", "grad_bytes_fp32", "fwd_macs_per_sample")


class UnknownModelError(KeyError):
    """A model identifier with no profile. The message names the known models."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a plain sentence.
        return str(self.args[0])


@dataclass(frozen=True)
class ModelProfile:
    """Per-layer profile of one DNN model.

    Attributes:
        name: model identifier.
        module: module name of each parameter-owning layer, forward order.
        kind: layer type (``Conv2d``, ``Linear``, ``BatchNorm2d``, ...).
        params: parameter count per layer.
        grad_bytes: fp32 gradient bytes per layer (4 x params).
        fwd_macs: forward multiply-accumulates per sample per layer (0 for norm layers).
    """

    name: str
    module: tuple[str, ...]
    kind: tuple[str, ...]
    params: np.ndarray
    grad_bytes: np.ndarray
    fwd_macs: np.ndarray

    @property
    def total_params(self) -> int:
        return int(self.params.sum())

    @property
    def skew(self) -> float:
        """Largest layer's parameters / total parameters (Tiresias's skew)."""
        return float(self.params.max() / self.params.sum())

    @property
    def weight_layers(self) -> np.ndarray:
        """Boolean mask of the layers whose gradients are all-reduced (Conv2d/Linear/Embedding)."""
        return np.array([k in WEIGHT_LAYER_KINDS for k in self.kind], dtype=bool)

    @classmethod
    def from_csv(cls, path: str | Path, name: str | None = None) -> ModelProfile:
        """Read a profile CSV with the columns of the shipped ones; errors name file and row."""
        path = Path(path)
        name = name or path.stem
        try:
            frame = pd.read_csv(path)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ValueError(f"{path}: cannot read model profile: {exc}") from None
        return cls.from_frame(frame, name=name, source=str(path))

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str, source: str = "<frame>") -> ModelProfile:
        missing = [c for c in _PROFILE_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{source}: model profile lacks column(s) {', '.join(missing)}")
        if len(frame) == 0:
            raise ValueError(f"{source}: model profile has no layers")
        numeric = {}
        for col in ("params", "grad_bytes_fp32", "fwd_macs_per_sample"):
            values = pd.to_numeric(frame[col], errors="coerce")
            bad = values.isna() | (values < 0)
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # +1 header, +1 one-based
                raise ValueError(
                    f"{source}: row {row}, column {col}: expected a non-negative number, "
                    f"got {frame[col].iloc[row - 2]!r}"
                )
            numeric[col] = values.to_numpy(dtype=np.float64)
        if numeric["params"].sum() <= 0:
            raise ValueError(f"{source}: model profile has no parameters")
        return cls(
            name=name,
            module=tuple(str(m) for m in frame["module"]),
            kind=tuple(str(k) for k in frame["kind"]),
            params=numeric["params"],
            grad_bytes=numeric["grad_bytes_fp32"],
            fwd_macs=numeric["fwd_macs_per_sample"],
        )


def check_model(name: str, known: tuple[str, ...] | frozenset[str] = MODEL_NAMES) -> str:
    """Return ``name`` if it is a known model identifier, else raise naming the known ones."""
    if name not in known:
        raise UnknownModelError(f"unknown model {name!r}; known models: {', '.join(sorted(known))}")
    return name


@cache
def shipped_profile(name: str) -> ModelProfile:
    """The shipped per-layer profile of one of :data:`MODEL_NAMES`."""
    check_model(name)
    ref = resources.files("dallygym") / "data" / "models" / _PROFILE_FILES[name]
    with resources.as_file(ref) as path:
        return ModelProfile.from_csv(path, name=name)
