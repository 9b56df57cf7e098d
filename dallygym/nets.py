"""The policy network for ``DallyQueue-v0``: a shared per-job encoder that scores each candidate.

``DallyQueue-v0`` asks "which of these jobs next?" over a padded set of candidates. A plain MLP
over the flattened slots would have to learn the same job-scoring rule once per slot; here one
small encoder reads every job (DeepSets, Zaheer et al. 2017: shared φ, pooled over the set),
the pooled set and the cluster features form a context, and each job's score is a function of
its own encoding and that context -- a pointer-style head, the same for every slot, so what is
learned about one job transfers to all. The "stop" action is scored from the context alone.

Used through sb3-contrib: ``MaskablePPO(JobPointerPolicy, env)``; ``dallygym train --env-id
DallyQueue-v0`` does this. Needs the ``agents`` extra (torch). Lives in the package, not in
``agents/``, so that a saved model, which names these classes, loads wherever dallygym does.
"""

from __future__ import annotations

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class JobSetExtractor(BaseFeaturesExtractor):
    """Per-slot action scores and a pooled context from a ``DallyQueue-v0`` observation.

    Output (per sample): ``max_candidates + 1`` action logits (one per slot, then stop),
    followed by the ``context_dim`` context (for the value head). Padded slots get a score too;
    the action mask removes them.

    Args:
        job_dim: width of the shared per-job encoder φ (two layers).
        context_dim: width of the context (pooled jobs + cluster features).
    """

    def __init__(self, observation_space: spaces.Dict, job_dim: int = 64, context_dim: int = 64) -> None:
        slots, job_features = observation_space["jobs"].shape
        cluster_features = observation_space["cluster"].shape[0]
        super().__init__(observation_space, features_dim=slots + 1 + context_dim)
        self.slots = slots
        self.phi = nn.Sequential(nn.Linear(job_features, job_dim), nn.ReLU(), nn.Linear(job_dim, job_dim), nn.ReLU())
        # Context from the masked mean and max of the job encodings and the cluster features.
        self.context = nn.Sequential(nn.Linear(2 * job_dim + cluster_features, context_dim), nn.ReLU())
        self.score_hidden = nn.Sequential(nn.Linear(job_dim + context_dim, job_dim), nn.ReLU())
        self.score_out = nn.Linear(job_dim, 1)
        self.stop_out = nn.Linear(context_dim, 1)

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        """The features of a batch of observations. ``obs["jobs"]`` and ``obs["job_mask"]`` may
        hold fewer slots than the space (the empty tail cut off, as the imitation warm start
        does to save time): the output is the same, since every empty slot scores alike."""
        jobs, mask = obs["jobs"], obs["job_mask"]
        shown = jobs.shape[1]
        h = self.phi(jobs)  # (batch, shown, job_dim)
        m = mask.unsqueeze(-1)
        count = m.sum(dim=1).clamp(min=1.0)
        mean = (h * m).sum(dim=1) / count
        # Encodings are >= 0 (ReLU), so zeroing the empty slots leaves the max of the others.
        top = (h * m).amax(dim=1)
        ctx = self.context(th.cat([mean, top, obs["cluster"]], dim=-1))
        pair = th.cat([h, ctx.unsqueeze(1).expand(-1, shown, -1)], dim=-1)
        scores = self.score_out(self.score_hidden(pair)).squeeze(-1)  # (batch, shown)
        if shown < self.slots:
            empty = self.phi(jobs.new_zeros(1, 1, jobs.shape[2])).expand(len(jobs), 1, -1)
            tail = self.score_out(self.score_hidden(th.cat([empty, ctx.unsqueeze(1)], dim=-1))).squeeze(-1)
            scores = th.cat([scores, tail.expand(-1, self.slots - shown)], dim=-1)
        stop = self.stop_out(ctx)  # (batch, 1)
        return th.cat([scores, stop, ctx], dim=-1)


class _Logits(nn.Module):
    """The action head: the first ``n`` features are already the logits."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, latent: th.Tensor) -> th.Tensor:
        return latent[:, : self.n]


class JobPointerPolicy(MaskableMultiInputActorCriticPolicy):
    """MaskablePPO policy for ``DallyQueue-v0``: :class:`JobSetExtractor` scores the actions
    (no policy MLP on top), a small MLP over its output estimates the value."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("features_extractor_class", JobSetExtractor)
        kwargs.setdefault("net_arch", {"pi": [], "vf": [64]})
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        extractor = self.features_extractor
        # Near-uniform initial choice (as SB3 initialises its action layers, gain 0.01).
        for layer in (extractor.score_out, extractor.stop_out):
            nn.init.orthogonal_(layer.weight, gain=0.01)
            nn.init.zeros_(layer.bias)
        self.action_net = _Logits(int(self.action_space.n))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _predict(self, observation, deterministic: bool = False, action_masks=None) -> th.Tensor:
        """Sampled actions, or deterministic ones chosen in two stages: stop if the policy puts
        at least half its probability on stopping, else the likeliest candidate. (A plain argmax
        would stop whenever stop's probability beats that of every single candidate -- with
        hundreds of candidates sharing the rest, even a small chance of stopping would win.)"""
        distribution = self.get_distribution(observation, action_masks)
        if not deterministic:
            return distribution.get_actions(deterministic=False)
        probs = distribution.distribution.probs
        stop = probs[:, -1]
        serve = probs[:, :-1]
        best = serve.argmax(dim=1)
        return th.where(stop >= serve.sum(dim=1), th.full_like(best, probs.shape[1] - 1), best)

