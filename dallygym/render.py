"""Pictures of the cluster: which GPUs are in use, coloured by the tier of the job holding them."""

from __future__ import annotations

import numpy as np

from .engine import Engine, Offer

#: ANSI map characters: free GPU, and a GPU held by a job placed at machine / rack / network tier.
FREE_CHAR = "."
TIER_CHARS = ("M", "R", "N")
#: RGB colours of the same, and of the gaps between machines and racks.
FREE_RGB = (40, 40, 48)
TIER_RGB = ((46, 160, 67), (240, 160, 40), (214, 50, 50))
GAP_RGB = (255, 255, 255)
CELL_PX = 6


def gpu_tiers(engine: Engine) -> np.ndarray:
    """Per GPU: the tier of the job holding it (0/1/2), or -1 if free."""
    owner = engine.cluster.owner
    out = np.full(owner.shape, -1, dtype=np.int64)
    held = owner >= 0
    out[held] = engine.tier[owner[held]]
    return out


def render_ansi(engine: Engine, offer: Offer | None = None) -> str:
    """One line per rack, machines separated by spaces, one character per GPU."""
    spec = engine.spec
    tiers = gpu_tiers(engine).reshape(spec.racks, spec.machines_per_rack, spec.gpus_per_machine)
    chars = np.array([*TIER_CHARS, FREE_CHAR])  # index -1 picks FREE_CHAR
    lines = [f"t = {engine.now_s / 3600:,.2f} h   used {engine.cluster.used_total}/{spec.num_gpus} GPUs   "
             f"waiting {engine.waiting_jobs().size}   done {engine.finished}/{engine.n}"]
    for r in range(spec.racks):
        machines = ["".join(chars[tiers[r, m]]) for m in range(spec.machines_per_rack)]
        lines.append(f"rack {r:>2} | " + " ".join(machines))
    if offer is not None:
        lines.append(f"offer: job {offer.job_id} ({offer.num_gpus} GPUs, starving {offer.starvation_s / 3600:.2f} h) "
                     f"can go to: {', '.join(t.label for t in offer.tiers)}")
    lines.append(f"legend: {FREE_CHAR} free, M/R/N held by a job placed on one machine / one rack / the network")
    return "\n".join(lines) + "\n"


def render_rgb(engine: Engine) -> np.ndarray:
    """An (H, W, 3) uint8 picture: racks top to bottom, machines left to right, GPUs as cells."""
    spec = engine.spec
    tiers = gpu_tiers(engine).reshape(spec.racks, spec.machines_per_rack, spec.gpus_per_machine)
    palette = np.array([*TIER_RGB, FREE_RGB], dtype=np.uint8)
    cells = palette[tiers]  # racks x machines x gpus x 3
    gap = 2
    h = spec.racks * (CELL_PX + gap) + gap
    w = spec.machines_per_rack * (spec.gpus_per_machine * CELL_PX + gap) + gap
    image = np.empty((h, w, 3), dtype=np.uint8)
    image[:] = GAP_RGB
    for r in range(spec.racks):
        y = gap + r * (CELL_PX + gap)
        for m in range(spec.machines_per_rack):
            x = gap + m * (spec.gpus_per_machine * CELL_PX + gap)
            row = np.repeat(cells[r, m], CELL_PX, axis=0)  # (gpus * CELL_PX, 3)
            image[y : y + CELL_PX, x : x + spec.gpus_per_machine * CELL_PX] = row[None, :, :]
    return image
