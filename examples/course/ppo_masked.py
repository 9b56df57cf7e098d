"""PPO with action masking for the course environment, in one file you can read top to bottom.

    python -m examples.course.ppo_masked --total-timesteps 40960 --learning-rate 0.0005 --out runs/course-ppo

(the committed run's settings, ``examples/course/README.md``, where a 163,840-step run degraded
after 40,960 steps).

What it does, in order:

1. builds ``--num-envs`` copies of the course environment (``DallyQueueSmall-v0``: each step,
   which waiting job is served next; see ``examples/course/course.py``);
2. builds the agent: a network that scores every candidate job with the same small MLP
   (a *pointer*: the score of a slot depends on that job's features and on a summary of the
   whole queue, never on the slot's position) plus a score for "stop", and a value head;
3. repeats: collect ``--num-steps`` steps from every environment with the current policy
   (invalid actions masked out of the distribution), compute advantages with GAE, then run
   ``--update-epochs`` epochs of clipped PPO updates on minibatches of that rollout;
4. prints progress (episode returns, and every ``--eval-every`` updates the mean JCT on a few
   validation traces against Dally's), and saves ``agent.pt``: the network's tensors and the
   settings, loadable with ``torch.load(weights_only=True)``.

``python -m examples.course.rank --agent runs/course-ppo/agent.pt`` then ranks it against every
shipped policy on the held-out course traces.

Only torch, numpy and gymnasium are used. The style follows CleanRL's single-file scripts (one
file, flat, the algorithm in the order it runs); the code is this project's own.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from examples.course import course


@dataclass
class Args:
    seed: int = 0
    total_timesteps: int = 200_000
    num_envs: int = 8
    num_steps: int = 128  # steps per environment per rollout
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    gamma: float = 0.995  # an episode is about 80 steps: look far ahead
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    eval_every: int = 10  # updates between validation prints (0: never)
    torch_threads: int = 1
    out: str = "runs/course-ppo"


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in asdict(Args()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return Args(**vars(parser.parse_args(argv)))


# --- observations: the Dict observation as three tensors -------------------------------------


def to_tensors(observations: list[dict]) -> dict[str, torch.Tensor]:
    """Stack the environments' Dict observations: jobs (E, slots, features), job_mask
    (E, slots), cluster (E, cluster features)."""
    return {key: torch.as_tensor(np.stack([o[key] for o in observations])) for key in ("jobs", "job_mask", "cluster")}


# --- the agent ---------------------------------------------------------------------------------


def layer(n_in: int, n_out: int, gain: float = np.sqrt(2)) -> nn.Linear:
    """A linear layer with orthogonal weights and zero bias (PPO's usual initialisation)."""
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


class PointerAgent(nn.Module):
    """Scores each candidate job with one shared MLP, and "stop" from a summary of the queue.

    * ``encode``: every job row (19 features) -> a ``hidden``-wide encoding, the same weights
      for every slot;
    * ``context``: the mean of the real jobs' encodings plus the cluster features -> a summary;
    * ``score``: (job encoding, summary) -> one logit per slot; ``stop``: summary -> one logit;
    * ``value``: summary -> the critic's estimate of the return.
    """

    def __init__(self, job_features: int, cluster_features: int, hidden: int = 64) -> None:
        super().__init__()
        self.encode = nn.Sequential(layer(job_features, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh())
        self.context = nn.Sequential(layer(hidden + cluster_features, hidden), nn.Tanh())
        self.score = nn.Sequential(layer(2 * hidden, hidden), nn.Tanh(), layer(hidden, 1, gain=0.01))
        self.stop = layer(hidden, 1, gain=0.01)
        self.value = nn.Sequential(layer(hidden, hidden), nn.Tanh(), layer(hidden, 1, gain=1.0))

    def summary(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encode(obs["jobs"])  # (B, slots, hidden)
        m = obs["job_mask"].unsqueeze(-1)  # (B, slots, 1): 1 where a slot holds a job
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return h, self.context(torch.cat([mean, obs["cluster"]], dim=-1))

    def get_value(self, obs) -> torch.Tensor:
        return self.value(self.summary(obs)[1]).squeeze(-1)

    def logits(self, obs, action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits over slots + stop (invalid actions get a huge negative logit, so
        their probability is 0 and they never contribute to the entropy), and the summary."""
        h, ctx = self.summary(obs)
        pairs = torch.cat([h, ctx.unsqueeze(1).expand_as(h)], dim=-1)
        logits = torch.cat([self.score(pairs).squeeze(-1), self.stop(ctx)], dim=-1)
        return logits.masked_fill(~action_mask, -1e8), ctx

    def get_action_and_value(self, obs, action_mask, action=None):
        logits, ctx = self.logits(obs, action_mask)
        dist = Categorical(logits=logits)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(ctx).squeeze(-1)


class GreedyAgent:
    """A trained :class:`PointerAgent` with the stable-baselines3 ``predict`` signature (the
    most likely valid action), so ``dallygym.evaluate`` and the ranking command can run it."""

    def __init__(self, net: PointerAgent, name: str = "ppo-masked") -> None:
        self.net = net.eval()
        self.name = name

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        obs = to_tensors([observation])
        mask = torch.as_tensor(np.asarray(action_masks, dtype=bool)).unsqueeze(0)
        with torch.no_grad():
            logits, _ = self.net.logits(obs, mask)
        return np.int64(int(logits.argmax(-1))), state


def save_agent(net: PointerAgent, args: Args, path: Path, extra: dict) -> None:
    torch.save({"state_dict": net.state_dict(), "args": asdict(args), "shape": extra}, path)


def load_agent(path: str | Path) -> GreedyAgent:
    """A saved ``agent.pt`` as a :class:`GreedyAgent` (tensors and plain data only)."""
    saved = torch.load(path, weights_only=True)
    shape = saved["shape"]
    net = PointerAgent(shape["job_features"], shape["cluster_features"], saved["args"]["hidden"])
    net.load_state_dict(saved["state_dict"])
    return GreedyAgent(net, name=Path(path).parent.name or "ppo-masked")


# --- validation: mean JCT of the greedy agent and of Dally on a few traces --------------------


def validate(net: PointerAgent) -> tuple[float, float]:
    import dallygym

    agent, jct, dally = GreedyAgent(net), [], []
    for _, trace in course.heldout_traces(course.VALIDATION_SEEDS):
        jct.append(dallygym.evaluate(course.make_env(trace), agent)["jct_mean_s"])
        dally.append(dallygym.simulate(trace, course.CLUSTER, policy="dally").summary["jct_mean_s"])
    net.train()
    return float(np.mean(jct)) / 3600, float(np.mean(dally)) / 3600


# --- training ------------------------------------------------------------------------------------


def train(args: Args) -> Path:
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # 1. environments: a plain list, stepped one after the other (no vector wrapper to learn).
    envs = [course.make_env() for _ in range(args.num_envs)]
    observations, masks = [], []
    for i, env in enumerate(envs):
        obs, info = env.reset(seed=args.seed * 1000 + i)
        observations.append(obs)
        masks.append(info["action_mask"])
    space = envs[0].observation_space
    slots, job_features = space["jobs"].shape
    cluster_features = space["cluster"].shape[0]
    n_actions = envs[0].action_space.n

    # 2. the agent and its optimiser.
    net = PointerAgent(job_features, cluster_features, args.hidden)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.learning_rate, eps=1e-5)

    # Rollout storage: one row per step, one column per environment.
    T, E = args.num_steps, args.num_envs
    buf_jobs = torch.zeros((T, E, slots, job_features))
    buf_jobmask = torch.zeros((T, E, slots))
    buf_cluster = torch.zeros((T, E, cluster_features))
    buf_mask = torch.zeros((T, E, n_actions), dtype=torch.bool)
    buf_action = torch.zeros((T, E), dtype=torch.long)
    buf_logprob = torch.zeros((T, E))
    buf_reward = torch.zeros((T, E))
    buf_done = torch.zeros((T, E))  # 1 if the step ended its episode
    buf_value = torch.zeros((T, E))

    batch_size = T * E
    minibatch_size = batch_size // args.num_minibatches
    num_updates = max(1, args.total_timesteps // batch_size)
    episode_return = np.zeros(E)
    finished_returns: list[float] = []
    log = []
    start_wall, start_cpu = time.time(), time.process_time()

    for update in range(1, num_updates + 1):
        if args.anneal_lr:  # linear decay of the learning rate to 0
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1 - (update - 1) / num_updates)

        # 3a. collect a rollout with the current policy.
        for t in range(T):
            obs_t = to_tensors(observations)
            mask_t = torch.as_tensor(np.stack(masks))
            with torch.no_grad():
                action, logprob, _, value = net.get_action_and_value(obs_t, mask_t)
            buf_jobs[t], buf_jobmask[t], buf_cluster[t] = obs_t["jobs"], obs_t["job_mask"], obs_t["cluster"]
            buf_mask[t], buf_action[t], buf_logprob[t], buf_value[t] = mask_t, action, logprob, value
            for i, env in enumerate(envs):
                obs, reward, terminated, truncated, info = env.step(int(action[i]))
                buf_reward[t, i] = reward
                episode_return[i] += reward
                if terminated or truncated:
                    buf_done[t, i] = 1.0
                    finished_returns.append(episode_return[i])
                    episode_return[i] = 0.0
                    obs, info = env.reset()
                else:
                    buf_done[t, i] = 0.0
                observations[i], masks[i] = obs, info["action_mask"]

        # 3b. advantages by GAE, bootstrapped from the value of the state after the rollout.
        with torch.no_grad():
            next_value = net.get_value(to_tensors(observations))
        advantages = torch.zeros((T, E))
        last = torch.zeros(E)
        for t in reversed(range(T)):
            following = next_value if t == T - 1 else buf_value[t + 1]
            alive = 1.0 - buf_done[t]  # no bootstrapping across the end of an episode
            delta = buf_reward[t] + args.gamma * following * alive - buf_value[t]
            last = delta + args.gamma * args.gae_lambda * alive * last
            advantages[t] = last
        returns = advantages + buf_value

        # 3c. PPO updates on shuffled minibatches of the flattened rollout.
        flat = {
            "jobs": buf_jobs.reshape(batch_size, slots, job_features),
            "job_mask": buf_jobmask.reshape(batch_size, slots),
            "cluster": buf_cluster.reshape(batch_size, cluster_features),
        }
        b_mask, b_action = buf_mask.reshape(batch_size, n_actions), buf_action.reshape(-1)
        b_logprob, b_adv, b_ret = buf_logprob.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        for _ in range(args.update_epochs):
            order = torch.randperm(batch_size)
            for begin in range(0, batch_size, minibatch_size):
                idx = order[begin : begin + minibatch_size]
                obs_mb = {key: value[idx] for key, value in flat.items()}
                _, new_logprob, entropy, new_value = net.get_action_and_value(obs_mb, b_mask[idx], b_action[idx])
                ratio = (new_logprob - b_logprob[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                # Clipped surrogate: never profit from moving the ratio beyond 1 +- clip_coef.
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                value_loss = 0.5 * ((new_value - b_ret[idx]) ** 2).mean()
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
                optimizer.step()

        # 4. progress.
        steps = update * batch_size
        recent = float(np.mean(finished_returns[-50:])) if finished_returns else float("nan")
        row = {
            "update": update,
            "steps": steps,
            "episodes": len(finished_returns),
            "return_last50": recent,
            "cpu_s": round(time.process_time() - start_cpu, 1),
            "wall_s": round(time.time() - start_wall, 1),
        }
        if args.eval_every and (update % args.eval_every == 0 or update == num_updates):
            row["val_jct_h"], row["val_dally_jct_h"] = validate(net)
        log.append(row)
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)

    save_agent(net, args, out / "agent.pt", {"job_features": job_features, "cluster_features": cluster_features})
    (out / "log.json").write_text(json.dumps({"args": asdict(args), "log": log}, indent=1))
    print(f"saved {out / 'agent.pt'} after {steps} steps, {log[-1]['cpu_s']} s CPU, {log[-1]['wall_s']} s wall")
    return out / "agent.pt"


if __name__ == "__main__":
    train(parse_args())
