"""A corpus of agent directories an attacker, a fuzzer or a careless user could hand to
``dallygym evaluate --agent DIR``, each with the outcome the loader must give.

Every case is a function that builds one run directory from the committed agents; the corpus
is built where it is used (tests/test_agent_corpus.py builds each case in a temporary
directory), because several cases cannot be files in a repository: symbolic links to
``/etc/shadow``, FIFOs, an 8 GB sparse ``policy.pth``. To look at them, write them all out:

    python tests/agent_corpus.py OUT_DIR

Each case is ``(name, build, expected)``: ``expected`` is ``"load"`` or a piece of the
one-line refusal (:class:`dallygym.learning.agent_files.AgentLoadError`) that names what is wrong.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OFFER_AGENT = ROOT / "agents" / "runs" / "ppo-hidden"  # Dally-v0, net_arch [64, 64]
QUEUE_AGENT = ROOT / "agents" / "runs" / "queue-ppo-s0"  # DallyQueue-v0, the job-pointer network

#: A module that, if anything imported it, would leave a marker file beside itself.
EVIL_MODULE = "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('pwned')\n"


class CreatesFile:
    """Unpickling this calls ``open(path, "w")``: a stand-in for any code an attacker wants run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _copy(source: Path, run: Path) -> None:
    """The agent ``source`` without the hash that binds its config to its parameters, so that a
    case which changes one file meets the check it is about, not the hash."""
    run.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "policy.pth", run / "policy.pth")
    config = json.loads((source / "config.json").read_text())
    config.pop("policy_sha256", None)
    (run / "config.json").write_text(json.dumps(config, indent=2))


def _as_committed(source: Path):
    def build(run: Path) -> None:
        run.mkdir(parents=True, exist_ok=True)
        for name in ("policy.pth", "config.json"):
            shutil.copy(source / name, run / name)

    return build


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text())


def _edit(source: Path, **changes):
    """A copy of ``source`` with ``config.json``'s keys changed (a value of ``...`` drops the key)."""

    def build(run: Path) -> None:
        _copy(source, run)
        config = _config(run)
        for key, value in changes.items():
            if value is ...:
                config.pop(key, None)
            else:
                config[key] = value
        (run / "config.json").write_text(json.dumps(config))

    return build


def _config_text(source: Path, text: str | bytes):
    """A copy of ``source`` whose ``config.json`` is exactly ``text``."""

    def build(run: Path) -> None:
        _copy(source, run)
        data = text.encode() if isinstance(text, str) else text
        (run / "config.json").write_bytes(data)

    return build


def _config_raw(source: Path, key: str, literal: str):
    """A copy whose ``config.json`` has ``key`` set to a JSON literal that ``json.dumps`` cannot
    write (``NaN``, a 400-digit number)."""

    def build(run: Path) -> None:
        _copy(source, run)
        config = _config(run)
        config[key] = "@@"
        (run / "config.json").write_text(json.dumps(config).replace('"@@"', literal))

    return build


def _evil_env_id(env_id: str):
    """A config naming a module as ``env_id``, with that module beside it and on ``sys.path``."""

    def build(run: Path) -> None:
        _copy(OFFER_AGENT, run)
        config = _config(run)
        config["env_id"] = env_id
        (run / "config.json").write_text(json.dumps(config))
        (run / "evilmod.py").write_text(EVIL_MODULE)

    return build


def _replace_file(name: str, make):
    """A copy of the offer agent whose file ``name`` is replaced by what ``make(path)`` puts there."""

    def build(run: Path) -> None:
        _copy(OFFER_AGENT, run)
        (run / name).unlink()
        make(run / name)

    return build


def _torch_bytes(obj) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _state(source: Path) -> dict:
    import torch

    return torch.load(source / "policy.pth", weights_only=True)


def _policy(source: Path, make_state):
    """A copy of ``source`` whose ``policy.pth`` holds ``make_state(its state dict)``."""

    def build(run: Path) -> None:
        _copy(source, run)
        (run / "policy.pth").write_bytes(_torch_bytes(make_state(_state(source))))

    return build


def _payload_policy(run: Path) -> None:
    _copy(OFFER_AGENT, run)
    state = _state(OFFER_AGENT)
    (run / "policy.pth").write_bytes(_torch_bytes({**state, "extra": CreatesFile(str(run / "IMPORTED"))}))


def _sparse(size: int):
    def make(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.truncate(size)

    return make


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink_to(target: str):
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def _bound(source: Path, policy_from: Path | None = None, digest: str | None = None):
    """A copy of ``source`` whose config records a hash: of its own parameters, of another
    agent's (``policy_from``: the pair a killed training could leave), or ``digest`` as given."""

    def build(run: Path) -> None:
        import hashlib

        _copy(source, run)
        config = _config(run)
        bound = (policy_from or source) / "policy.pth"
        config["policy_sha256"] = digest if digest is not None else hashlib.sha256(bound.read_bytes()).hexdigest()
        (run / "config.json").write_text(json.dumps(config))

    return build


def _mixed(config_from: Path, policy_from: Path):
    def build(run: Path) -> None:
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(config_from / "config.json", run / "config.json")
        shutil.copy(policy_from / "policy.pth", run / "policy.pth")

    return build


def _unbound_mix(config_from: Path, policy_from: Path):
    def build(run: Path) -> None:
        _copy(config_from, run)
        shutil.copy(policy_from / "policy.pth", run / "policy.pth")

    return build


def _without(name: str):
    def build(run: Path) -> None:
        _copy(OFFER_AGENT, run)
        (run / name).unlink()

    return build


def _unpacks_large(run: Path) -> None:
    """A small ``policy.pth`` whose compressed entry inflates to 64 MB (a torch zip bomb)."""
    _copy(OFFER_AGENT, run)
    data = _torch_bytes(_state(OFFER_AGENT))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        dst.writestr(zipfile.ZipInfo("archive/data/99"), b"\0" * (64 * 1024 * 1024), compress_type=zipfile.ZIP_DEFLATED)
    (run / "policy.pth").write_bytes(out.getvalue())


OA, QA = OFFER_AGENT, QUEUE_AGENT  # the committed offer agent and queue agent the cases start from
CASES: list[tuple[str, object, str]] = [
    # What must load.
    ("offer-agent-as-committed", _as_committed(OA), "load"),
    ("queue-agent-as-committed", _as_committed(QA), "load"),
    ("offer-agent-unbound", _edit(OA), "load"),
    ("committed-config-other-parameters", _mixed(OA, QA), "different runs"),
    ("env-id-with-dallygym-prefix", _edit(OA, env_id="dallygym:Dally-v0"), "load"),
    ("queue-slots-explicit", _edit(QA, max_candidates=512), "load"),
    ("config-with-own-hash", _bound(OA), "load"),
    ("queue-config-with-own-hash", _bound(QA), "load"),
    ("config-only-env-id", _config_text(OA, '{"env_id": "Dally-v0"}'), "load"),
    ("out-dir-anywhere", _edit(OA, out_dir="/etc"), "load"),
    # env_id naming a module: never imported.
    ("env-id-evil-module", _evil_env_id("evilmod:Dally-v0"), "env_id"),
    ("env-id-this-module", _evil_env_id("this:Dally-v0"), "env_id"),
    ("env-id-dotted-module", _evil_env_id("os.path:Dally-v0"), "env_id"),
    ("env-id-classic-control", _edit(OA, env_id="gymnasium.envs.classic_control:CartPole-v1"), "env_id"),
    ("env-id-other-env", _edit(OA, env_id="CartPole-v1"), "env_id"),
    ("env-id-trailing-space", _edit(OA, env_id="Dally-v0 "), "env_id"),
    ("env-id-empty", _edit(OA, env_id=""), "env_id"),
    ("env-id-number", _edit(OA, env_id=42), "env_id"),
    ("env-id-list", _edit(OA, env_id=["Dally-v0"]), "env_id"),
    ("env-id-null", _edit(OA, env_id=None), "env_id"),
    # Sizes chosen by the author: refused before anything is allocated.
    ("net-arch-huge", _edit(OA, net_arch=[50_000, 50_000]), "net_arch"),
    ("net-arch-too-many-parameters", _edit(OA, net_arch=[4096, 4096]), "net_arch"),
    ("net-arch-too-deep", _edit(OA, net_arch=[64] * 9), "net_arch"),
    ("net-arch-empty", _edit(OA, net_arch=[]), "net_arch"),
    ("net-arch-zero", _edit(OA, net_arch=[64, 0]), "net_arch"),
    ("net-arch-negative", _edit(OA, net_arch=[64, -1]), "net_arch"),
    ("net-arch-float", _edit(OA, net_arch=[64.0, 64]), "net_arch"),
    ("net-arch-bool", _edit(OA, net_arch=[True, 64]), "net_arch"),
    ("net-arch-string", _edit(OA, net_arch="64,64"), "net_arch"),
    ("net-arch-wrong-for-parameters", _edit(OA, net_arch=[32]), "parameters do not fit"),
    ("max-candidates-at-bound-other-network", _edit(QA, max_candidates=4096), "parameters do not fit"),
    (
        "queue-small-id-other-network",
        _edit(QA, env_id="DallyQueueSmall-v0", max_candidates=None),
        "parameters do not fit",
    ),
    ("max-candidates-billion", _edit(QA, max_candidates=10**9), "max_candidates"),
    ("max-candidates-zero", _edit(QA, max_candidates=0), "max_candidates"),
    ("max-candidates-negative", _edit(QA, max_candidates=-5), "max_candidates"),
    ("max-candidates-float", _edit(QA, max_candidates=1.5), "max_candidates"),
    ("max-candidates-bool", _edit(QA, max_candidates=True), "max_candidates"),
    ("max-candidates-400-digits", _config_raw(QA, "max_candidates", "9" * 400), "max_candidates"),
    ("racks-ten-million", _edit(OA, racks=10**7), "racks"),
    ("racks-string", _edit(OA, racks="8"), "racks"),
    ("racks-negative", _edit(OA, racks=-1), "racks"),
    # Options outside their values, and numbers that are not.
    ("sensitivity-unknown", _edit(OA, sensitivity="bogus"), "sensitivity"),
    ("reward-unknown", _edit(OA, reward="evil"), "reward"),
    ("priority-a-function", _edit(OA, priority="os.system"), "priority"),
    ("offer-rule-unknown", _edit(QA, offer_rule="x"), "offer_rule"),
    ("lease-picks-unknown", _edit(QA, lease_picks="x"), "lease_picks"),
    ("makespan-weight-nan", _config_raw(QA, "makespan_weight", "NaN"), "NaN"),
    ("makespan-weight-infinity", _config_raw(QA, "makespan_weight", "Infinity"), "Infinity"),
    ("makespan-weight-overflow", _config_raw(QA, "makespan_weight", "1e400"), "makespan_weight"),
    ("makespan-weight-negative", _edit(QA, makespan_weight=-1.0), "makespan_weight"),
    ("guard-leases-above-one", _edit(QA, guard_leases=2.0), "guard_leases"),
    ("trace-5000-characters", _edit(OA, trace="x" * 5000), "trace"),
    ("trace-with-nul", _edit(OA, trace="batch\x00-500"), "trace"),
    ("unknown-key-dunder", _edit(OA, __class__="os.system"), "unknown key"),
    ("unknown-key-policy-kwargs", _edit(OA, policy_kwargs={"net_arch": [10**6]}), "unknown key"),
    # config.json that is not a config.
    (
        "config-duplicate-key",
        _config_text(OA, '{"env_id": "Dally-v0", "env_id": "evilmod:Dally-v0"}'),
        "more than once",
    ),
    ("config-a-list", _config_text(OA, "[]"), "JSON object"),
    ("config-null", _config_text(OA, "null"), "JSON object"),
    ("config-empty", _config_text(OA, ""), "not valid JSON"),
    ("config-truncated", _config_text(OA, '{"env_id": "Dally-v0", "net_arch": [64,'), "not valid JSON"),
    ("config-latin-1", _config_text(OA, '{"trace": "caf\xe9"}'.encode("latin-1")), "not UTF-8"),
    ("config-utf-16", _config_text(OA, '{"env_id": "Dally-v0"}'.encode("utf-16")), "not UTF-8"),
    ("config-nested-deeply", _config_text(OA, "[" * 30_000 + "]" * 30_000), "JSON"),
    ("config-one-megabyte", _config_text(OA, json.dumps({"trace": "x" * 1_000_000})), "bytes"),
    ("config-symlink-to-passwd", _replace_file("config.json", _symlink_to("/etc/passwd")), "symbolic link"),
    ("config-a-directory", _replace_file("config.json", lambda p: p.mkdir()), "regular file"),
    ("config-a-fifo", _replace_file("config.json", _fifo), "regular file"),
    ("config-missing", _without("config.json"), "no such file"),
    # policy.pth that is not parameters, or not these.
    ("policy-symlink-to-shadow", _replace_file("policy.pth", _symlink_to("/etc/shadow")), "symbolic link"),
    (
        "policy-symlink-to-a-real-agent",
        _replace_file("policy.pth", _symlink_to(str(OA / "policy.pth"))),
        "symbolic link",
    ),
    ("policy-a-directory", _replace_file("policy.pth", lambda p: p.mkdir()), "regular file"),
    ("policy-a-fifo", _replace_file("policy.pth", _fifo), "regular file"),
    ("policy-eight-gigabytes", _replace_file("policy.pth", _sparse(8 * 1024**3)), "refused before reading"),
    ("policy-empty", _replace_file("policy.pth", lambda p: p.write_bytes(b"")), "plain tensors"),
    ("policy-random-bytes", _replace_file("policy.pth", lambda p: p.write_bytes(os.urandom(4096))), "plain tensors"),
    ("policy-unpacks-to-64-megabytes", _unpacks_large, "unpack"),
    ("policy-with-payload", _payload_policy, "plain tensors"),
    ("policy-a-list-of-tensors", _policy(OA, lambda s: list(s.values())), "state dict"),
    ("policy-extra-parameter", _policy(OA, lambda s: {**s, "extra.weight": s[next(iter(s))]}), "parameters do not fit"),
    ("policy-missing-parameter", _policy(OA, lambda s: dict(list(s.items())[1:])), "parameters do not fit"),
    (
        "policy-wrong-shape",
        _policy(OA, lambda s: {k: v[..., :1] if v.ndim == 2 else v for k, v in s.items()}),
        "observation features",
    ),
    ("policy-missing", _without("policy.pth"), "no such file"),
    # Two runs mixed in one directory.
    ("hash-of-another-run", _bound(OA, policy_from=QA), "different runs"),
    ("hash-malformed", _bound(OA, digest="not-a-hash"), "policy_sha256"),
    ("queue-config-offer-parameters", _unbound_mix(QA, OA), "parameters do not fit"),
    ("offer-config-queue-parameters", _unbound_mix(OA, QA), "parameters do not fit"),
]


def build_all(out: Path) -> list[Path]:
    """Write every case into ``out/<name>``; returns the directories."""
    made = []
    for name, build, _ in CASES:
        run = out / name
        build(run)
        made.append(run)
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/agent_corpus.py OUT_DIR")
    for path in build_all(Path(sys.argv[1])):
        print(path)
