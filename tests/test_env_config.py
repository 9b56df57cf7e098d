"""EnvConfig: one environment as a value, checked by the environment's own constructor checks."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import pytest

from dallygym.envs.config import EnvConfig, registered_ids
from dallygym.envs.offer import DallyEnv
from dallygym.envs.queue import DallyQueueEnv
from dallygym.learning.agent_files import AgentLoadError, check_config
from dallygym.learning.trainer import TrainConfig, check_train_config

# Options each constructor refuses, for each family of ids.
BAD_OPTIONS = [
    ("DallySmall-v0", {"reward": "speed"}),
    ("DallySmall-v0", {"priority": "nope"}),
    ("DallySmall-v0", {"priority": 3}),
    ("DallySmall-v0", {"sensitivity": "psychic"}),
    ("DallySmall-v0", {"render_mode": "video"}),
    ("DallySmall-v0", {"reward_scale_s": -1.0}),
    ("DallySmall-v0", {"makespan_penalty": -2.0}),
    ("DallySmall-v0", {"strict": "yes"}),
    ("DallySmall-v0", {"makespan_reference": "nope"}),
    ("DallySmall-v0", {"latency": 7}),
    ("DallySmall-v0", {"racks": 0}),
    ("DallySmall-v0", {"contention": "max-min"}),
    ("DallySmall-v0", {"oversubscription": 0.0}),
    ("DallySmall-v0", {"link_load": True}),
    ("DallyQueueSmall-v0", {"link_load": "yes", "contention": "fair-share"}),
    ("DallyQueueSmall-v0", {"reward": "comm"}),
    ("DallyQueueSmall-v0", {"offer_rule": "nope"}),
    ("DallyQueueSmall-v0", {"max_candidates": 0}),
    ("DallyQueueSmall-v0", {"makespan_weight": -1.0}),
    ("DallyQueueSmall-v0", {"lease_picks": "sometimes"}),
    ("DallyQueueSmall-v0", {"makespan_credit": "later"}),
    ("DallyQueueSmall-v0", {"guard_leases": 1.5}),
    ("DallyQueueSmall-v0", {"guard_waiting": True}),
    ("DallyQueueSmall-v0", {"limit_features": True, "reward": "jct"}),
    ("DallyQueueSmall-v0", {"gpus_per_machine": 0}),
]


@pytest.mark.parametrize(("env_id", "options"), BAD_OPTIONS)
def test_check_refuses_what_the_constructor_refuses_with_the_same_error(env_id, options):
    with pytest.raises(Exception) as built:
        gym.make(env_id, **options)
    with pytest.raises(Exception) as checked:
        EnvConfig(env_id, options).check()
    assert type(checked.value) is type(built.value)
    assert str(built.value).startswith(str(checked.value))  # (gymnasium appends the kwargs to a TypeError)


def test_check_fills_the_registered_options_then_the_defaults():
    options = EnvConfig("DallyQueueSmall-v0", {"guard_leases": 0.5}).check()
    assert (options["racks"], options["machines_per_rack"], options["max_candidates"]) == (2, 2, 64)
    assert options["guard_leases"] == 0.5
    assert options["lease_s"] == 3600.0  # the constructor's default
    assert set(options) == set(DallyQueueEnv.option_defaults())


def test_an_option_the_environment_does_not_have_is_named_with_the_id():
    with pytest.raises(
        ValueError, match=r"'guard_leases' is not an option of Dally-v0 \(DallyEnv\); its options are racks"
    ):
        EnvConfig("Dally-v0", {"guard_leases": 0.5}).check()
    with pytest.raises(ValueError, match=r"'x', 'y' are not options of DallyQueue-v0"):
        EnvConfig("DallyQueue-v0", {"x": 1, "y": 2}).check()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "os:Dally-v0", "Dally-v9", 3])
def test_only_dallygym_ids_are_accepted(env_id):
    with pytest.raises(ValueError, match="is not one of dallygym's environments"):
        EnvConfig(env_id)


def test_the_namespaced_id_is_the_same_config():
    assert EnvConfig("dallygym:Dally-v0") == EnvConfig("Dally-v0")
    assert EnvConfig("Dally-v0").env_class is DallyEnv
    assert set(registered_ids()) >= {"Dally-v0", "DallyQueue-v0"}


def test_replace_and_make_leave_the_config_as_it_was():
    base = EnvConfig("DallyQueueSmall-v0", {"guard_leases": 0.5})
    other = base.replace(racks=3)
    assert base.options == {"guard_leases": 0.5}
    assert other.options == {"guard_leases": 0.5, "racks": 3}
    env = base.make(racks=3).unwrapped
    assert (env.spec_cluster.racks, env.guard_leases) == (3, 0.5)
    assert base.options == {"guard_leases": 0.5}
    assert copy.deepcopy(other) == other == pickle.loads(pickle.dumps(other))


def test_options_are_the_config_s_own_copy():
    options = {"racks": 2}
    config = EnvConfig("DallySmall-v0", options)
    options["racks"] = 5
    assert config.options == {"racks": 2}


def test_the_training_config_hands_its_environment_over_as_one():
    train = TrainConfig(env_id="DallyQueue-v0", racks=4, guard_leases=0.5, limit_features=True)
    env = train.env_config(2)
    assert env == EnvConfig("DallyQueue-v0", train.env_kwargs(2))
    assert env.options["racks"] == 2 and env.options["limit_features"] is True
    validation = train.validation_env_config(4, ["t"])
    assert validation.options["trace"] == ["t"] and validation.options["racks"] == 4


def test_the_training_config_is_checked_by_the_environment_at_every_size():
    check_train_config(TrainConfig(env_id="DallyQueue-v0", train_racks=[2, 4], n_envs=2))
    with pytest.raises(ValueError, match=r"unknown reward 'comm'"):
        check_train_config(TrainConfig(env_id="DallyQueue-v0", reward="comm"))
    with pytest.raises(ValueError, match=r"'max_candidates' is not an option of Dally-v0"):
        check_train_config(TrainConfig(max_candidates=64))


def test_an_agent_config_the_environment_refuses_is_refused_on_load():
    config = {"env_id": "DallyQueue-v0", "guard_waiting": True}
    with pytest.raises(AgentLoadError, match=r"here: guard_waiting=True needs guard_leases"):
        check_config(config, "here")
    assert check_config({"env_id": "DallyQueue-v0", "guard_waiting": True, "guard_leases": 0.5}, "here")
