"""The policy network for ``DallyQueue-v0``: a shared per-job encoder that scores each candidate.

``DallyQueue-v0`` asks "which of these jobs next?" over a padded set of candidates. A plain MLP
over the flattened slots would have to learn the same job-scoring rule once per slot; here one
small encoder reads every job (DeepSets, Zaheer et al. 2017: shared φ, pooled over the set),
the pooled set and the cluster features form a context, and each job's score is a function of
its own encoding and that context -- a pointer-style head, the same for every slot, so what is
learned about one job transfers to all. The "stop" action is scored from the context alone.

Two versions. :class:`JobSetPolicy` (``queue_net="set"``, what ``dallygym train --env-id
DallyQueue-v0`` builds) runs the encoder only on the slots that hold a candidate and estimates
the value from the pooled set, so neither its cost nor its parameters depend on the number of
slots. :class:`JobPointerPolicy` (``queue_net="pointer"``, the first version, kept for the
agents trained with it) encodes every slot, empty ones included, and its value head reads the
score of every slot.

Used through sb3-contrib: ``MaskablePPO(JobSetPolicy, env)``. Needs the ``agents`` extra
(torch). Lives in the package, not in ``agents/``, so that a saved model, which names these
classes, loads wherever dallygym does.
"""

from __future__ import annotations

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer, MaskableDictRolloutBufferSamples
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


class JobSetEncoder(BaseFeaturesExtractor):
    """The features of :class:`JobSetPolicy`: per-slot action logits and a pooled summary.

    The same scoring as :class:`JobSetExtractor` (a shared per-job encoder φ, a context from
    the masked mean and max of the encodings and the cluster features, a pointer head scoring
    each job against that context, stop scored from the context), but φ and the pointer head
    run only on the live slots: the rows the mask marks are gathered from the whole batch into
    one ``(live rows, features)`` matrix, encoded and scored there, and pooled back per sample
    (a sum and a max indexed by sample). An empty slot holds a zero row and scores what a zero
    row scores, computed once per sample; the action mask removes those scores anyway. So the
    cost follows the number of candidates, not the number of slots.

    Output (per sample): ``max_candidates + 1`` action logits (one per slot, then stop), then
    the summary the value head reads: the masked mean and max of the job encodings and the
    cluster features (``2 x job_dim + cluster features`` wide, whatever the slot count).

    Why the result is that of the full computation (``packed = False``: every slot through φ,
    for comparison): φ and the pointer head act on each row alone, so a live row's encoding and
    score do not depend on which other rows are computed with it; the mean and the max only
    ever see live encodings (the full computation multiplies the others by 0, and encodings are
    >= 0, so those add nothing to the sum and never raise the max); the count is the mask's.
    Equal up to float rounding (the sums run in another order); a batch with its empty tail cut
    off, or its minibatch's, gives exactly the same output as the whole batch.

    Args:
        job_dim: width of the shared per-job encoder φ (two layers).
        context_dim: width of the context the pointer head scores against.
    """

    def __init__(self, observation_space: spaces.Dict, job_dim: int = 64, context_dim: int = 64) -> None:
        slots, job_features = observation_space["jobs"].shape
        cluster_features = observation_space["cluster"].shape[0]
        self.summary_dim = 2 * job_dim + cluster_features
        super().__init__(observation_space, features_dim=slots + 1 + self.summary_dim)
        self.slots = slots
        self.job_dim = job_dim
        #: Encode only the live slots (False: every slot, the padded computation).
        self.packed = True
        self.phi = nn.Sequential(nn.Linear(job_features, job_dim), nn.ReLU(), nn.Linear(job_dim, job_dim), nn.ReLU())
        self.context = nn.Sequential(nn.Linear(self.summary_dim, context_dim), nn.ReLU())
        self.score_hidden = nn.Sequential(nn.Linear(job_dim + context_dim, job_dim), nn.ReLU())
        self.score_out = nn.Linear(job_dim, 1)
        self.stop_out = nn.Linear(context_dim, 1)

    def _score(self, h: th.Tensor, ctx_part: th.Tensor) -> th.Tensor:
        """Scores of encodings ``h`` (``(..., job_dim)``) given their sample's context term
        ``ctx_part`` (:meth:`_context_part`, broadcast against ``h``). The first layer of the
        pointer head reads ``[h, ctx]``: its product splits into one with ``h``, per job, and
        one with ``ctx``, per sample, so the context is multiplied once per sample, not per job.
        For a matrix of rows with one context row each (the live rows), the sum is one fused
        ``addmm``, which saves a pass over the rows."""
        layer = self.score_hidden[0]
        weight = layer.weight[:, : self.job_dim].T
        if h.dim() == 2 and ctx_part.shape == h.shape:
            hidden = th.addmm(ctx_part, h, weight)
        else:
            hidden = h @ weight + ctx_part
        return self.score_out(th.relu(hidden)).squeeze(-1)

    def _context_part(self, ctx: th.Tensor) -> th.Tensor:
        """The context's share of the pointer head's first layer (its bias included)."""
        layer = self.score_hidden[0]
        return th.nn.functional.linear(ctx, layer.weight[:, self.job_dim :], layer.bias)

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        """The features of a batch. ``obs["jobs"]`` and ``obs["job_mask"]`` may hold fewer
        slots than the space (an empty tail already cut off): the output is the same."""
        jobs, mask, cluster = obs["jobs"], obs["job_mask"], obs["cluster"]
        batch, shown, _ = jobs.shape
        # What an empty slot (a zero row) encodes to and scores, once per sample.
        empty = self.phi(jobs.new_zeros(1, jobs.shape[2]))  # (1, job_dim)
        if not self.packed:
            h = self.phi(jobs)  # (batch, shown, job_dim)
            m = mask.unsqueeze(-1)
            kept = h * m
            total = kept.sum(dim=1)
            top = kept.amax(dim=1) if shown else h.new_zeros(batch, self.job_dim)
        else:
            sample, slot = (mask > 0).nonzero(as_tuple=True)  # live slots, sample by sample
            h = self.phi(jobs[sample, slot])  # (live, job_dim)
            # Weighted by the mask as in the full computation. The environment's masks are 1,
            # and then the product is h itself: skipped (a pass over the rows, and its backward).
            weight = mask[sample, slot]
            kept = h if bool((weight == 1).all()) else h * weight.unsqueeze(-1)
            index = sample.unsqueeze(-1).expand(-1, self.job_dim)
            total = kept.new_zeros(batch, self.job_dim).index_add(0, sample, kept)
            # Encodings are >= 0 (ReLU): a max from 0 is the max of the live ones, 0 if none.
            top = kept.new_zeros(batch, self.job_dim).scatter_reduce(0, index, kept, reduce="amax")
        mean = total / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        summary = th.cat([mean, top, cluster], dim=-1)
        ctx = self.context(summary)
        part = self._context_part(ctx)  # (batch, job_dim)
        tail = self._score(empty, part)  # (batch,)
        if not self.packed:
            scores = self._score(h, part.unsqueeze(1))  # (batch, shown)
            if shown < self.slots:
                scores = th.cat([scores, tail.unsqueeze(1).expand(-1, self.slots - shown)], dim=-1)
        else:
            scores = tail.unsqueeze(1).expand(-1, self.slots).index_put((sample, slot), self._score(h, part[sample]))
        return th.cat([scores, self.stop_out(ctx), summary], dim=-1)


class _SetHeads(nn.Module):
    """The ``mlp_extractor`` of :class:`JobSetPolicy`: the actor's latent is the features
    themselves (their first ``slots + 1`` are the logits); the critic is an MLP over the
    summary at the end of the features only, so its parameters do not depend on the slots."""

    def __init__(self, features_dim: int, summary_dim: int, widths: list[int], activation_fn) -> None:
        super().__init__()
        self.summary_dim = summary_dim
        layers, width = [], summary_dim
        for units in widths:
            layers += [nn.Linear(width, units), activation_fn()]
            width = units
        self.critic = nn.Sequential(*layers)
        self.latent_dim_pi = features_dim
        self.latent_dim_vf = width

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        return features

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return self.critic(features[:, features.shape[1] - self.summary_dim :])


class JobSetPolicy(JobPointerPolicy):
    """MaskablePPO policy for ``DallyQueue-v0`` whose cost follows the candidates, not the
    slots: :class:`JobSetEncoder` scores the actions (only live slots pass through the
    encoder), and an MLP (``net_arch["vf"]``, 64 units) over the pooled summary estimates the
    value. No parameter's shape depends on ``max_candidates``. Deterministic actions as in
    :class:`JobPointerPolicy`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("features_extractor_class", JobSetEncoder)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        widths = self.net_arch.get("vf", []) if isinstance(self.net_arch, dict) else list(self.net_arch)
        self.mlp_extractor = _SetHeads(
            self.features_dim, self.features_extractor.summary_dim, widths, self.activation_fn
        )


#: The ``DallyQueue`` networks by name (``TrainConfig.queue_net``).
QUEUE_POLICIES = {"set": JobSetPolicy, "pointer": JobPointerPolicy}


class LiveRolloutBuffer(MaskableDictRolloutBuffer):
    """MaskablePPO's rollout buffer for :class:`JobSetPolicy`: the same samples in the same
    order, but each minibatch's ``jobs`` and ``job_mask`` leave out the slots empty in every
    sample of the minibatch (the network's output does not depend on them: see
    :class:`JobSetEncoder`), and its observations are tensors over the gathered arrays rather
    than second copies of them."""

    def _get_samples(self, batch_inds: np.ndarray, env=None) -> MaskableDictRolloutBufferSamples:
        job_mask = self.observations["job_mask"][batch_inds]
        live = np.flatnonzero(job_mask.any(axis=0))
        shown = int(live[-1]) + 1 if len(live) else 0
        observations = {
            key: th.from_numpy(obs[batch_inds])
            for key, obs in self.observations.items()
            if key not in ("jobs", "job_mask")
        }
        observations["jobs"] = th.from_numpy(self.observations["jobs"][batch_inds, :shown])
        observations["job_mask"] = th.from_numpy(np.ascontiguousarray(job_mask[:, :shown]))
        return MaskableDictRolloutBufferSamples(
            observations=observations,
            actions=self.to_torch(self.actions[batch_inds]),
            old_values=self.to_torch(self.values[batch_inds].flatten()),
            old_log_prob=self.to_torch(self.log_probs[batch_inds].flatten()),
            advantages=self.to_torch(self.advantages[batch_inds].flatten()),
            returns=self.to_torch(self.returns[batch_inds].flatten()),
            action_masks=self.to_torch(self.action_masks[batch_inds].reshape(-1, self.mask_dims)),
        )
