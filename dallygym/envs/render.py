"""Pictures of the cluster: which GPUs are in use, coloured by the tier of the job holding them."""

from __future__ import annotations

import numpy as np

from ..experiments.plots import FREE_RGB, TIER_NAMES, TIER_RGB
from ..sim.engine import Engine, Offer

#: ANSI map characters: free GPU, and a GPU held by a job placed at machine / rack / network tier.
FREE_CHAR = "."
TIER_CHARS = ("M", "R", "N")
#: RGB colours of the same: the occupancy chart's tier colours (:data:`dallygym.experiments.plots.TIER_RGB`,
#: Okabe & Ito's palette: machine sky blue, rack vermillion, network black) and a light grey
#: for a free GPU (:data:`dallygym.experiments.plots.FREE_RGB`), imported from that one place. Also the gaps
#: between machines and racks.
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
    lines = [
        f"t = {engine.now_s / 3600:,.2f} h   used {engine.cluster.used_total}/{spec.num_gpus} GPUs   "
        f"waiting {engine.waiting_jobs().size}   done {engine.finished}/{engine.n}"
    ]
    for r in range(spec.racks):
        machines = ["".join(chars[tiers[r, m]]) for m in range(spec.machines_per_rack)]
        lines.append(f"rack {r:>2} | " + " ".join(machines))
    if offer is not None:
        lines.append(
            f"offer: job {offer.job_id} ({offer.num_gpus} GPUs, starving {offer.starvation_s / 3600:.2f} h) "
            f"can go to: {', '.join(t.label for t in offer.tiers)}"
        )
    lines.append(f"legend: {FREE_CHAR} free, M/R/N held by a job placed on one machine / one rack / the network")
    return "\n".join(lines) + "\n"


# --- rgb_array -----------------------------------------------------------------------------
#
# Drawn with numpy alone (no matplotlib, no fonts on disk): rectangles for the GPUs and a
# built-in 5 x 7 pixel font for the text, scaled up (a frame of the 8-rack cluster: a few ms).

#: 5 x 7 glyphs of the characters the frame writes (upper case; anything else shows as "?").
_GLYPH_ROWS = {
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("####.", "....#", "....#", ".###.", "....#", "....#", "####."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
    "A": (".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "B": ("####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."),
    "C": (".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."),
    "D": ("####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."),
    "E": ("#####", "#....", "#....", "####.", "#....", "#....", "#####"),
    "F": ("#####", "#....", "#....", "####.", "#....", "#....", "#...."),
    "G": (".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"),
    "H": ("#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "I": (".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "J": ("..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."),
    "K": ("#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"),
    "L": ("#....", "#....", "#....", "#....", "#....", "#....", "#####"),
    "M": ("#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"),
    "N": ("#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"),
    "O": (".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "P": ("####.", "#...#", "#...#", "####.", "#....", "#....", "#...."),
    "Q": (".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"),
    "R": ("####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"),
    "S": (".####", "#....", "#....", ".###.", "....#", "....#", "####."),
    "T": ("#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."),
    "U": ("#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "V": ("#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."),
    "W": ("#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."),
    "X": ("#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"),
    "Y": ("#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."),
    "Z": ("#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"),
    " ": (".....",) * 7,
    ".": (".....", ".....", ".....", ".....", ".....", ".##..", ".##.."),
    ",": (".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."),
    ":": (".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."),
    ";": (".....", ".##..", ".##..", ".....", ".##..", "..#..", ".#..."),
    "/": ("....#", "...#.", "...#.", "..#..", ".#...", ".#...", "#...."),
    "-": (".....", ".....", ".....", "#####", ".....", ".....", "....."),
    "=": (".....", ".....", "#####", ".....", "#####", ".....", "....."),
    ">": (".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."),
    "(": ("...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."),
    ")": (".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."),
    "%": ("##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"),
    "?": (".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."),
}
TEXT_SCALE = 2  # each font pixel is 2 x 2 image pixels: 12 px per character, 18 px per line
_GLYPHS = {
    ch: np.kron(np.array([[c == "#" for c in row] for row in rows]), np.ones((TEXT_SCALE, TEXT_SCALE), dtype=bool))
    for ch, rows in _GLYPH_ROWS.items()
}
CHAR_W = 6 * TEXT_SCALE
LINE_H = 9 * TEXT_SCALE
MARGIN = 10
BACKGROUND_RGB = (250, 250, 250)
TEXT_RGB = (20, 20, 20)
BORDER_RGB = (190, 190, 196)
WIDTH_PX = 960  # enough for the status lines; more only if the cluster needs it


def _text(image: np.ndarray, x: int, y: int, text: str, color=TEXT_RGB) -> None:
    """Write ``text`` (upper-cased) with its top-left corner at (x, y); clipped at the edges."""
    for i, ch in enumerate(text.upper()):
        big = _GLYPHS.get(ch, _GLYPHS["?"])
        x0 = x + i * CHAR_W
        h = max(0, min(big.shape[0], image.shape[0] - y))
        w = max(0, min(big.shape[1], image.shape[1] - x0))
        if h and w:
            image[y : y + h, x0 : x0 + w][big[:h, :w]] = color


def _status_lines(engine: Engine, offer: Offer | None) -> list[str]:
    spec = engine.spec
    lines = [
        f"t = {engine.now_s / 3600:,.2f} h   GPUs used {engine.cluster.used_total}/{spec.num_gpus}   "
        f"queue {engine.waiting_jobs().size} jobs   done {engine.finished}/{engine.n}",
    ]
    if offer is None:
        lines.append("offer: none")
    else:
        lines.append(
            f"offer: job {offer.job_id}, {offer.num_gpus} GPUs, waited {offer.starvation_s / 3600:.2f} h; "
            f"free: {'/'.join(t.label for t in offer.tiers)}; best possible: {offer.best_possible_tier.label}"
        )
    return lines


def render_rgb(engine: Engine, offer: Offer | None = None) -> np.ndarray:
    """An (H, W, 3) uint8 frame: status lines (time, GPUs in use, queue, jobs done, the offer
    and its tiers), then racks top to bottom with machines left to right and one square per
    GPU coloured by the tier of the job holding it, then a legend.

    960 px wide (wider only if the cluster needs it), both sides multiples of 16 (what video
    encoders want), the same size for every frame of a cluster. GPU squares are 4-24 px, as
    large as fit in that width.
    """
    spec = engine.spec
    tiers = gpu_tiers(engine).reshape(spec.racks, spec.machines_per_rack, spec.gpus_per_machine)
    palette = np.array([*TIER_RGB, FREE_RGB], dtype=np.uint8)
    lines = _status_lines(engine, offer)
    # The occupancy chart's legend labels ("machine tier", ...), with the free GPUs first.
    legend = [("free", FREE_RGB), *((f"{label} tier", rgb) for label, rgb in zip(TIER_NAMES, TIER_RGB))]

    label_w = CHAR_W * (len(str(spec.racks - 1)) + 2)  # "R12 "
    machine_gap = 6
    per_rack = spec.machines_per_rack * spec.gpus_per_machine
    room = WIDTH_PX - 2 * MARGIN - label_w - machine_gap * spec.machines_per_rack
    cell = int(np.clip(room // per_rack, 4, 24))
    grid_w = spec.machines_per_rack * (spec.gpus_per_machine * cell + machine_gap)
    row_h = max(cell + max(4, cell // 2), 7 * TEXT_SCALE + 4)  # room for the rack's label
    grid_h = spec.racks * row_h
    legend_w = sum(CHAR_W * (len(name) + 4) for name, _ in legend)
    # The size depends on the cluster only, so every frame of an episode has the same one (a
    # video needs that); a status line too long for it is cut at the right edge.
    width = max(WIDTH_PX, 2 * MARGIN + max(label_w + grid_w, legend_w))
    height = 2 * MARGIN + LINE_H * len(lines) + 8 + grid_h + 8 + LINE_H
    width, height = -(-width // 16) * 16, -(-height // 16) * 16

    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:] = BACKGROUND_RGB
    y = MARGIN
    for line in lines:
        _text(image, MARGIN, y, line)
        y += LINE_H
    y += 8
    # One rack row at a time: each pixel column knows its GPU, machine gaps are background and
    # the last pixel of each GPU square is a thin border.
    g = spec.gpus_per_machine
    cols = np.arange(grid_w)
    machine, within = np.divmod(cols, g * cell + machine_gap)
    in_machine = within < g * cell
    gpu = machine * g + np.minimum(within // cell, g - 1)
    border = in_machine & (within % cell == cell - 1)
    inner = max(1, cell - 1)
    x0 = MARGIN + label_w
    for r in range(spec.racks):
        ty = y + max(0, (inner - 7 * TEXT_SCALE) // 2)
        _text(image, MARGIN, ty, f"R{r}")
        strip = palette[tiers[r].reshape(-1)[gpu]]
        strip[border] = BORDER_RGB
        strip[~in_machine] = BACKGROUND_RGB
        image[y : y + inner, x0 : x0 + grid_w] = strip[None, :, :]
        image[y + inner, x0 : x0 + grid_w][in_machine] = BORDER_RGB
        y += row_h
    y += 8
    x = MARGIN
    for name, rgb in legend:
        image[y + 2 : y + 2 + 7 * TEXT_SCALE - 4, x : x + CHAR_W * 2 - 4] = rgb
        _text(image, x + CHAR_W * 2, y, name)
        x += CHAR_W * (len(name) + 4)
    return image
