"""A learned agent's files: read without trusting them, written so that a kill cannot mix two runs.

A saved agent is a run directory holding two files:

* ``policy.pth``: the policy network's parameters, a state dict of tensors written by
  ``torch.save``;
* ``config.json``: the settings the agent was trained with (the fields of
  :class:`dallygym.learning.trainer.TrainConfig`) and ``policy_sha256``, the SHA-256 of the
  ``policy.pth`` it belongs to.

What a reader may assume of those files is nothing, so everything here is checked before it is
used and nothing in them is ever executed or followed:

* **No code.** ``config.json`` is parsed by :mod:`json` and checked against a schema; its
  ``env_id`` must be one of dallygym's registered ids, so ``gym.make`` can never be asked to
  import a module named by the file ("``evilmod:Dally-v0``"). ``policy.pth`` goes through
  torch's tensors-only unpickler (``weights_only=True``). A stable-baselines3 ``model.zip`` is
  never unpickled: :func:`convert_agent` reads only its ``policy.pth`` entry.
* **Bounded sizes, checked before anything is allocated.** ``config.json`` is at most
  :data:`MAX_CONFIG_BYTES`; ``net_arch`` at most :data:`MAX_LAYERS` layers of at most
  :data:`MAX_WIDTH` units and :data:`MAX_PARAMETERS` parameters in all; ``max_candidates`` at
  most :data:`MAX_CANDIDATES`; ``policy.pth`` no larger than the network it must fill (plus
  torch's container overhead), and a zip entry at most :data:`MAX_POLICY_BYTES` however large
  its header says it is.
* **Nothing outside the run directory.** Both files are opened with ``O_NOFOLLOW`` and must be
  regular files: a symbolic link (to ``/etc/shadow``, say), a FIFO or a device is refused.
* **No mixed runs.** :func:`commit_agent` writes the parameters first and the config (with their
  hash) last, each by an atomic rename; a reader refuses a ``policy.pth`` whose hash is not the
  one its ``config.json`` records. A ``dallygym train`` killed at any point leaves the old
  agent (or, in the instant between the two renames, a pair that is refused) -- never a new
  config beside old parameters.

Every refusal is an :class:`AgentLoadError` (a ``ValueError``): one line naming the file and
what is wrong, which the command line prints as ``dallygym: error: ...`` with exit status 2.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import math
import os
import re
import stat
from pathlib import Path

from ..envs.config import registered_ids

#: The parameters' file name inside a run directory.
POLICY_FILE = "policy.pth"
#: The settings' file name inside a run directory.
CONFIG_FILE = "config.json"
#: The key of ``config.json`` that binds it to its ``policy.pth``.
HASH_KEY = "policy_sha256"

#: ``config.json`` is a few hundred bytes; anything much larger is not one of ours.
MAX_CONFIG_BYTES = 64 * 1024
#: Hidden layers of an MLP policy (``net_arch``).
MAX_LAYERS = 8
#: Units of one hidden layer.
MAX_WIDTH = 4096
#: Parameters of a whole policy network: 16 MB of float32 (the shipped agents have 10-70 k).
MAX_PARAMETERS = 4_000_000
#: Candidate slots of a ``DallyQueue`` agent (the registered ids use 64 and 512); the value
#: network's input grows with them.
MAX_CANDIDATES = 4096
#: Largest ``policy.pth`` read from a zip whose network is not known yet (``agent convert``).
MAX_POLICY_BYTES = 64 * 1024 * 1024
#: Room for torch's zip container around the tensors' bytes (names, pickle, alignment).
_CONTAINER_BYTES = 1024 * 1024
#: Largest integer a config may hold (well past any step count; keeps arithmetic exact).
_MAX_INT = 2**53
#: Longest string a config may hold (a trace path, an output directory).
_MAX_STRING = 4096


class AgentLoadError(ValueError):
    """A saved agent that cannot be loaded safely or does not match the environment."""


def _short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so a hostile value cannot flood a message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# --- reading one file, safely -------------------------------------------------------------------


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, which must be a regular file (not a symbolic link, FIFO or device)
    of at most ``limit`` bytes; its size is checked before it is read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise AgentLoadError(f"{path}: no such file ({what})") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise AgentLoadError(
                f"{path}: a symbolic link; an agent's files are read only from its own "
                f"run directory, never through a link"
            ) from None
        raise AgentLoadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AgentLoadError(f"{path}: not a regular file ({what})")
        if info.st_size > limit:
            raise AgentLoadError(
                f"{path}: {info.st_size:,} bytes, more than the {limit:,} that {what} can take; refused before reading"
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while we read it
        raise AgentLoadError(f"{path}: more than the {limit:,} bytes that {what} can take")
    return data


def _check_unpacked_size(data: bytes, limit: int, where: str) -> None:
    """Refuse a ``torch.save`` archive whose entries unpack to more than ``limit`` bytes.

    torch's files are zip archives; an entry may be compressed, so a small file could inflate
    to gigabytes of tensor storage. The central directory states each entry's size, and torch
    refuses an entry whose real size differs from what its tensors need."""
    import zipfile

    if not zipfile.is_zipfile(io.BytesIO(data)):
        return  # torch's legacy format: its size is the file's, already bounded
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise AgentLoadError(f"{where}: not a readable torch file ({str(exc)[:160]})") from None
    if total > limit:
        raise AgentLoadError(
            f"{where}: its entries unpack to {total:,} bytes, more than the {limit:,} its network "
            f"can hold; refused before reading"
        )


def read_state_dict(data: bytes, where: str, limit: int = MAX_POLICY_BYTES) -> dict:
    """Parameters from ``torch.save`` bytes, through torch's tensors-only unpickler.

    ``weights_only=True`` admits tensors, plain containers and numbers and refuses every other
    object before building it, so a crafted file cannot run code here; the archive's entries
    may unpack to at most ``limit`` bytes.
    """
    import pickle

    import torch

    _check_unpacked_size(data, limit, where)
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
        OverflowError,
        MemoryError,
    ) as exc:
        raise AgentLoadError(f"{where}: not a file of plain tensors, refused ({_why(exc)})") from None
    if (
        not isinstance(state, dict)
        or not state
        or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
    ):
        raise AgentLoadError(f"{where}: expected a state dict (parameter name -> tensor)")
    return state


def _why(exc: BaseException) -> str:
    """torch's reason for refusing a file, in one short printable phrase (its messages run to
    paragraphs with terminal colour codes)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"Unsupported global: GLOBAL [\w.]+", text) or re.search(r"Unsupported operand \d+", text)
    line = found.group(0) if found else next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return "".join(c for c in line if c.isprintable())[:160]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the config's schema ------------------------------------------------------------------------


def env_id_of(value: object, where: str) -> str:
    """The registered id ``value`` names (``"Dally-v0"`` or ``"dallygym:Dally-v0"``), or a refusal.

    Never a module path: Gymnasium imports whatever module is named before a colon, so an id is
    only accepted as one of dallygym's own, compared as a string before anything is imported.
    """
    ids = registered_ids()
    if isinstance(value, str):
        name = value[len("dallygym:") :] if value.startswith("dallygym:") else value
        if name in ids:
            return name
    raise AgentLoadError(
        f"{where}: env_id {_short(value)} is not one of dallygym's environments "
        f"({', '.join(ids)}); nothing else is imported"
    )


def _option_choices() -> dict[str, tuple[str, ...]]:
    """The values each string option of a config may take (the environments' own lists)."""
    from ..envs.offer import REWARDS, SENSITIVITY_MODES
    from ..envs.queue import MAKESPAN_CREDITS, OFFER_RULES, QUEUE_REWARDS
    from ..sim.engine import LEASE_PICKS
    from ..sim.policies import POLICIES
    from .trainer import KEEP, QUEUE_NETS

    return {
        "priority": tuple(POLICIES),
        "makespan_reference": tuple(POLICIES),
        "sensitivity": SENSITIVITY_MODES,
        "reward": tuple(dict.fromkeys((*REWARDS, *QUEUE_REWARDS))),
        "offer_rule": tuple(dict.fromkeys((*OFFER_RULES, *POLICIES))),
        "lease_picks": tuple(LEASE_PICKS),
        "makespan_credit": MAKESPAN_CREDITS,
        "vec_env": ("dummy", "subproc"),
        "keep": tuple(KEEP),
        "queue_net": QUEUE_NETS,
    }


def _check_value(key: str, value: object, annotation: str, where: str) -> None:
    """Check one config value against its field's annotation (``int``, ``float | None``,
    ``list[int] | None``, ``str``, ``bool``): the JSON type, finiteness and size."""
    kinds = [part.strip() for part in annotation.split("|")]
    if value is None:
        if "None" in kinds:
            return
        raise AgentLoadError(f"{where}: {key} must not be null")
    base = next(k for k in kinds if k != "None")
    bad = f"{where}: {key} must be {'a list of integers' if base == 'list[int]' else 'a ' + base}"
    if base == "bool":
        if not isinstance(value, bool):
            raise AgentLoadError(f"{bad}, got {_short(value)}")
    elif base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise AgentLoadError(f"{bad}, got {_short(value)}")
        if abs(value) > _MAX_INT:
            raise AgentLoadError(f"{where}: {key} is out of range ({_short(value)})")
    elif base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AgentLoadError(f"{bad}, got {_short(value)}")
        if not math.isfinite(float(value)) or abs(value) > _MAX_INT:
            raise AgentLoadError(f"{where}: {key} must be a finite number, got {_short(value)}")
    elif base == "str":
        if not isinstance(value, str) or len(value) > _MAX_STRING or not value.isprintable():
            raise AgentLoadError(f"{bad} of printable characters (at most {_MAX_STRING}), got {_short(value)}")
    elif base == "list[int]":
        if (
            not isinstance(value, list)
            or len(value) > 64
            or any(isinstance(v, bool) or not isinstance(v, int) or abs(v) > _MAX_INT for v in value)
        ):
            raise AgentLoadError(f"{bad} (at most 64), got {_short(value)}")
    else:  # pragma: no cover - a new field type must be taught here
        raise AgentLoadError(f"{where}: {key} has a type this version cannot check ({annotation})")


def mlp_parameters(net_arch: list[int], obs_dim: int, actions: int) -> int:
    """Parameters of stable-baselines3's actor-critic MLP with ``net_arch`` (the same hidden
    layers for the policy and the value function, then a policy and a value head)."""
    total, width = 0, obs_dim
    for units in net_arch:
        total += width * units + units
        width = units
    return 2 * total + (width * actions + actions) + (width + 1)


def check_config(config: object, where: str) -> dict:
    """``config`` (a parsed ``config.json``) checked against :class:`~dallygym.learning.trainer.TrainConfig`:
    only known keys, each of its field's type and within bounds, string options among their
    values, ``env_id`` one of dallygym's ids, the network within :data:`MAX_PARAMETERS`.
    Returns the config with ``env_id`` normalised (without a ``dallygym:`` prefix)."""
    from ..sim.cluster import ClusterError, ClusterSpec
    from .trainer import TrainConfig, is_queue_env

    if not isinstance(config, dict):
        raise AgentLoadError(f"{where}: expected a JSON object (the settings the agent was trained with)")
    fields = TrainConfig.__dataclass_fields__
    unknown = [k for k in config if k not in fields and k != HASH_KEY]
    if unknown:
        raise AgentLoadError(
            f"{where}: unknown key {_short(unknown[0])}; this version of dallygym reads "
            f"the fields of TrainConfig and {HASH_KEY}"
        )
    for key, value in config.items():
        if key == HASH_KEY:
            if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
                raise AgentLoadError(f"{where}: {HASH_KEY} must be 64 lowercase hex digits, got {_short(value)}")
            continue
        # The annotations are strings (postponed evaluation): "int", "float | None", "list[int]", ...
        _check_value(key, value, str(fields[key].type), where)
    config = dict(config)
    config["env_id"] = env_id_of(config.get("env_id", TrainConfig.env_id), where)
    for key, choices in _option_choices().items():
        value = config.get(key)
        if value is not None and value not in choices:
            raise AgentLoadError(f"{where}: {key} {_short(value)} is not one of {', '.join(choices)}")
    try:
        ClusterSpec(
            config.get("racks", TrainConfig.racks),
            config.get("machines_per_rack", TrainConfig.machines_per_rack),
            config.get("gpus_per_machine", TrainConfig.gpus_per_machine),
        )
    except (ClusterError, ValueError) as exc:
        raise AgentLoadError(f"{where}: {str(exc).splitlines()[0][:200]}") from None
    for key in ("guard_leases", "teacher_share"):
        value = config.get(key)
        if value is not None and not 0.0 < value <= 1.0:
            raise AgentLoadError(f"{where}: {key} must be a share in (0, 1], got {_short(value)}")
    if config.get("makespan_weight") is not None and config["makespan_weight"] < 0:
        raise AgentLoadError(f"{where}: makespan_weight must be >= 0, got {_short(config['makespan_weight'])}")
    slots = config.get("max_candidates")
    if slots is not None and not 1 <= slots <= MAX_CANDIDATES:
        raise AgentLoadError(f"{where}: max_candidates must be between 1 and {MAX_CANDIDATES:,}, got {_short(slots)}")
    if not is_queue_env(config["env_id"]):
        from ..envs.offer import OBS_DIM

        net_arch = config.get("net_arch", TrainConfig().net_arch)
        if not net_arch or len(net_arch) > MAX_LAYERS or not all(1 <= n <= MAX_WIDTH for n in net_arch):
            raise AgentLoadError(
                f"{where}: net_arch must be 1 to {MAX_LAYERS} layers of 1 to {MAX_WIDTH} units, got {_short(net_arch)}"
            )
        count = mlp_parameters(net_arch, OBS_DIM, 4)
        if count > MAX_PARAMETERS:
            raise AgentLoadError(
                f"{where}: net_arch {_short(net_arch)} has {count:,} parameters, more than the "
                f"{MAX_PARAMETERS:,} an agent may have"
            )
    # Last, the environment's own checks on the options it will be built with (the values'
    # types and ranges are known good by now, so nothing is imported or built).
    settings = TrainConfig(**{k: v for k, v in config.items() if k != HASH_KEY})
    try:
        settings.env_config().check()
    except (ClusterError, ValueError, TypeError) as exc:
        raise AgentLoadError(f"{where}: {str(exc).splitlines()[0][:300]}") from None
    return config


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    repeated = next((k for k in keys if keys.count(k) > 1), None)
    if repeated is not None:
        raise ValueError(f"key {_short(repeated)} appears more than once")
    return dict(pairs)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def parse_config(data: bytes, where: str) -> dict:
    """``config.json``'s bytes parsed (:func:`parse_json`) and checked by :func:`check_config`."""
    return check_config(parse_json(data, where), where)


def parse_json(data: bytes, where: str) -> object:
    """An agent file's bytes parsed: UTF-8, strict JSON (no NaN or Infinity, no repeated key)."""
    try:
        text = data.decode("utf-8")
        config = json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise AgentLoadError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise AgentLoadError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise AgentLoadError(f"{where}: not valid JSON ({detail[:160]})") from None
    return config


def read_config(run_dir: Path) -> dict:
    """The checked ``config.json`` of a run directory (see :func:`parse_config`)."""
    path = run_dir / CONFIG_FILE
    data = read_regular_file(path, MAX_CONFIG_BYTES, "the settings the agent was trained with")
    return parse_config(data, str(path))


def read_policy(path: Path, config: dict, limit: int) -> dict:
    """The state dict in ``path``, at most ``limit`` bytes, whose SHA-256 must be the config's
    ``policy_sha256`` when the config records one."""
    data = read_regular_file(path, limit, "the agent's network")
    recorded = config.get(HASH_KEY)
    if recorded is not None and sha256(data) != recorded:
        raise AgentLoadError(
            f"{path}: not the parameters its {CONFIG_FILE} was written with (SHA-256 differs): "
            f"the two files come from different runs, e.g. a training killed while saving"
        )
    return read_state_dict(data, str(path), limit)


def policy_limit(policy) -> int:
    """The largest ``policy.pth`` that can fill ``policy``: its tensors' bytes plus torch's
    container overhead."""
    tensors = sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    return tensors + tensors // 8 + _CONTAINER_BYTES


# --- writing, atomically ------------------------------------------------------------------------


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by a rename from a temporary file beside it (never a partial
    file at ``path``)."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path} ({exc.strerror or exc})") from None


def _bind_existing(run_dir: Path) -> None:
    """Give an older agent's ``config.json`` the hash of the ``policy.pth`` beside it, so that if
    a new commit is cut short after its parameters are renamed in, the old config refuses them."""
    config_path, policy_path = run_dir / CONFIG_FILE, run_dir / POLICY_FILE
    if not (config_path.is_file() and policy_path.is_file()) or config_path.is_symlink() or policy_path.is_symlink():
        return
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(config, dict) and HASH_KEY not in config:
        config[HASH_KEY] = sha256(policy_path.read_bytes())
        write_atomic(config_path, (json.dumps(config, indent=2) + "\n").encode())


def commit_agent(run_dir: Path, state: dict, config: dict) -> Path:
    """Write an agent into ``run_dir``: ``policy.pth`` (from ``state``) and then ``config.json``
    (``config`` with the parameters' SHA-256), each by an atomic rename. Returns the policy's path.

    Read at any moment, the directory holds the old agent, the new one, or (between the two
    renames) new parameters beside the old config, which :func:`read_policy` refuses.
    """
    import torch

    run_dir.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    _bind_existing(run_dir)
    write_atomic(run_dir / POLICY_FILE, data)
    write_atomic(run_dir / CONFIG_FILE, (json.dumps({**config, HASH_KEY: sha256(data)}, indent=2) + "\n").encode())
    return run_dir / POLICY_FILE


# --- converting a stable-baselines3 archive -----------------------------------------------------


def _zip_policy_bytes(zip_path: Path) -> bytes:
    """The ``policy.pth`` entry of a stable-baselines3 archive, at most :data:`MAX_POLICY_BYTES`
    whatever its header claims; no other entry is read."""
    import zipfile

    if zip_path.is_symlink():
        raise AgentLoadError(f"{zip_path}: a symbolic link; give the archive itself")
    try:
        with zipfile.ZipFile(zip_path) as archive:
            try:
                entry = archive.getinfo(POLICY_FILE)
            except KeyError:
                raise AgentLoadError(
                    f"{zip_path}: no {POLICY_FILE} entry: not a stable-baselines3 model archive"
                ) from None
            if entry.file_size > MAX_POLICY_BYTES:
                raise AgentLoadError(
                    f"{zip_path}: entry {POLICY_FILE} inflates to {entry.file_size:,} bytes, more "
                    f"than {MAX_POLICY_BYTES:,}; refused before reading"
                )
            with archive.open(entry) as handle:
                data = handle.read(MAX_POLICY_BYTES + 1)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, RuntimeError) as exc:
        raise AgentLoadError(f"{zip_path}: cannot read the archive ({str(exc)[:160]})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise AgentLoadError(f"{zip_path}: entry {POLICY_FILE} inflates past {MAX_POLICY_BYTES:,} bytes; refused")
    return data


def _family(state: dict) -> str:
    """Which kind of network ``state`` fills: ``"queue"`` (the job-pointer network of the
    ``DallyQueue`` ids), ``"offer"`` (an MLP policy of the ``Dally`` ids), or ``""``."""
    if "features_extractor.phi.0.weight" in state:
        return "queue"
    if "mlp_extractor.policy_net.0.weight" in state:
        return "offer"
    return ""


def inferred_net_arch(state: dict) -> list[int]:
    """The hidden layers of an MLP policy, read from its parameters' shapes."""
    layers, index = [], 0
    while f"mlp_extractor.policy_net.{index}.weight" in state:
        weight = state[f"mlp_extractor.policy_net.{index}.weight"]
        if weight.ndim != 2:
            break
        layers.append(int(weight.shape[0]))
        index += 2  # Linear, activation, Linear, ...
    return layers


def convert_agent(
    zip_path: str | Path, out_dir: str | Path | None = None, env_id: str | None = None, cluster=None
) -> Path:
    """Write an agent (``policy.pth`` and ``config.json``) from a stable-baselines3 ``model.zip``,
    without unpickling it.

    Only the archive's ``policy.pth`` entry is read, with the tensors-only loader; its ``data``
    entry (cloudpickle blobs that would run code if loaded) is never read. The settings come
    from the ``config.json`` beside the zip when there is one (``dallygym train`` writes it);
    otherwise from ``env_id`` (required then: the zip does not record it in a form that can be
    read safely) and ``cluster`` (a :class:`~dallygym.sim.cluster.ClusterSpec`, the size the agent
    was trained at; default 8 x 8 x 8), with an MLP's ``net_arch`` read from the parameters'
    shapes. The agent is loaded back before this returns, so a converted agent evaluates.
    Writes next to the zip unless ``out_dir`` is given; returns the path of ``policy.pth``.
    """
    from .trainer import LearnedAgent, TrainConfig, is_queue_env

    zip_path = Path(zip_path)
    if zip_path.is_dir():
        zip_path = zip_path / "model.zip"
    state = read_state_dict(_zip_policy_bytes(zip_path), f"{zip_path} entry {POLICY_FILE}")
    family = _family(state)
    beside = zip_path.parent / CONFIG_FILE
    if beside.exists() or beside.is_symlink():
        config = read_config(zip_path.parent)
        config.pop(HASH_KEY, None)  # it belongs to the policy.pth beside, which this replaces
        if env_id is not None and env_id_of(env_id, "--env-id") != config["env_id"]:
            raise AgentLoadError(
                f"{beside}: says env_id {config['env_id']}, but --env-id is {env_id}; "
                f"convert into another --out without the config, or drop --env-id"
            )
    else:
        ids = [i for i in registered_ids() if family and is_queue_env(i) == (family == "queue")]
        if env_id is None:
            fits = f" (its parameters fit {' or '.join(ids)})" if ids else ""
            raise AgentLoadError(
                f"{zip_path}: no {CONFIG_FILE} beside it; say which environment the agent was "
                f"trained on with --env-id{fits}"
            )
        config = {"env_id": env_id_of(env_id, "--env-id")}
        if cluster is not None:
            config.update(
                racks=cluster.racks,
                machines_per_rack=cluster.machines_per_rack,
                gpus_per_machine=cluster.gpus_per_machine,
            )
        if family == "offer":
            config["net_arch"] = inferred_net_arch(state)
        if family == "queue":  # the set network's value head is named critic; the pointer one's is not
            config["queue_net"] = "set" if "mlp_extractor.critic.0.weight" in state else "pointer"
        config = {**dataclasses.asdict(TrainConfig(**config)), "out_dir": str(zip_path.parent)}
        config = check_config(config, f"{zip_path} (settings from the command line)")
    out = Path(out_dir) if out_dir is not None else zip_path.parent
    # Check that the parameters fill the network the settings describe before writing anything.
    from .trainer import _policy_network

    _policy_network(state, config, f"{zip_path} entry {POLICY_FILE}")
    path = commit_agent(out, state, config)
    LearnedAgent(out)
    return path
