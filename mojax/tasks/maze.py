"""VPO's 9×9 maze (VPO App. A.1): generator, BFS solver, move simulator and reward.

Generation, in this order, one ``random.Random(seed)`` per attempt (seeds 42, 43, … for train,
4242, 4243, … for test; rejected seeds are skipped, the first 1000 / 100 survivors kept):

1. Prim spanning tree on an all-wall grid: carve a uniformly random seed cell; repeatedly pop a
   uniformly random frontier wall cell and carve it iff it has exactly one empty 4-neighbour
   (adding its wall neighbours to the frontier).
2. ``n_cycles ~ U{18..28}`` extra openings: each one carves a uniformly random wall cell that has
   ≥ 2 empty neighbours (stops early if none is left).
3. Endpoints ``(0,0)→(8,8)`` or ``(0,8)→(8,0)`` with probability 1/2; the other two corners are
   randomly the gold and the diamond corner; the centre ``(4,4)`` is the bonus tile (a distractor).
   *mojax decision:* these five cells are opened if step 1-2 left them walls (the paper places
   them without saying); an opened cell with no open neighbour makes a distance infinite → reject.
4. BFS distances ``d`` (walls block; lava and items do not exist yet): ``via_gold = d(S,gold) +
   d(gold,E)``, ``via_diam``, ``via_both = d(S,gold) + d(gold,diam) + d(diam,E)``;
   ``budget = max(via_gold, via_diam) + 7``; reject unless ``via_both > budget``. (Only the
   gold-first order is checked, as in the paper; on the generated train and test splits the
   diamond-first order never fits the budget either — a test checks it.)
5. ``n_gold ~ U{3..5}`` gold cells among the open cells within Manhattan radius 2 of the gold
   corner, the same for diamonds, ``n_lava ~ U{3..5}`` lava cells among the open cells of the
   interior ``2 ≤ r, c ≤ 6`` except the bonus tile. *mojax decision:* items go on open cells only
   (they must be collectable); too few open cells → reject.
6. Reject unless a lava-free S→E path fits in the budget.

Reward (App. A.1): the move list is simulated — walls and borders block (the move is spent, the
agent stays), the trajectory ends as soon as E is stepped on, moves beyond the budget are not
executed (*mojax decision*: "each route has its own N-step budget"), lava is walkable but counted,
items count only before E. E never reached → ``(0, 0, 0, 0)``; else ``(1, g, d, ℓ)`` with
``g = |gold visited| / n_gold``, ``d = |diamonds visited| / n_diam``,
``ℓ = 1 − |lava stepped| / n_lava``. The GRPO scalar is the uniform mean.

In the paper the bonus tile B is a distractor: advertised in the prompt as a score multiplier, it
has no effect on the reward. ``convex_bonus=True`` is the authors' code variant (their generator
writes this mode into every ground truth): E reached →
``(1, clamp(m·g²), clamp(m·d²), clamp(m·ℓ²))`` with ``m = 1.5`` if the bonus tile was stepped on
before E, else 1, and ``clamp`` to [0, 1]; E not reached → zeros, as in the paper's reward. The
default is the paper's linear reward (VPO App. A.1).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import re
from collections.abc import Iterator

import numpy as np

__all__ = [
    "SIZE",
    "MOVES",
    "Maze",
    "generate_maze",
    "generate_split",
    "bfs_distances",
    "shortest_route",
    "route_through",
    "parse_moves",
    "simulate",
    "maze_reward",
    "TRAIN_SEED",
    "TEST_SEED",
    "BONUS_MULTIPLIER",
]

SIZE = 9
CENTRE = (4, 4)
TRAIN_SEED, TEST_SEED = 42, 4242
MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
_ENDPOINTS = (((0, 0), (8, 8)), ((0, 8), (8, 0)))
Cell = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class Maze:
    """One generated maze. ``walls[r][c]`` is True for a wall; row 0 is the top (UP = row − 1)."""

    walls: tuple[tuple[bool, ...], ...]
    start: Cell
    exit: Cell
    gold_corner: Cell
    diamond_corner: Cell
    gold: frozenset[Cell]
    diamonds: frozenset[Cell]
    lava: frozenset[Cell]
    budget: int
    seed: int

    def is_open(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < SIZE and 0 <= c < SIZE and not self.walls[r][c]

    def render(self) -> str:
        """The grid as the VPO prompt shows it: one row per line, cells separated by spaces."""
        rows = []
        for r in range(SIZE):
            row = []
            for c in range(SIZE):
                cell = (r, c)
                if self.walls[r][c]:
                    ch = "#"
                elif cell == self.start:
                    ch = "S"
                elif cell == self.exit:
                    ch = "E"
                elif cell in self.gold:
                    ch = "G"
                elif cell in self.diamonds:
                    ch = "D"
                elif cell in self.lava:
                    ch = "L"
                elif cell == CENTRE:
                    ch = "B"
                else:
                    ch = "."
                row.append(ch)
            rows.append(" ".join(row))
        return "\n".join(rows)


def _neighbours(cell: Cell) -> Iterator[Cell]:
    r, c = cell
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        rr, cc = r + dr, c + dc
        if 0 <= rr < SIZE and 0 <= cc < SIZE:
            yield rr, cc


def _carve(rng: random.Random) -> list[list[bool]]:
    """Steps 1-2: Prim wall-carving spanning tree, then ``U{18..28}`` extra openings."""
    walls = [[True] * SIZE for _ in range(SIZE)]
    seed_cell = (rng.randrange(SIZE), rng.randrange(SIZE))
    walls[seed_cell[0]][seed_cell[1]] = False
    frontier = [n for n in _neighbours(seed_cell)]
    in_frontier = set(frontier)
    while frontier:
        cell = frontier.pop(rng.randrange(len(frontier)))
        in_frontier.discard(cell)
        if not walls[cell[0]][cell[1]]:
            continue
        if sum(not walls[r][c] for r, c in _neighbours(cell)) == 1:
            walls[cell[0]][cell[1]] = False
            for n in _neighbours(cell):
                if walls[n[0]][n[1]] and n not in in_frontier:
                    frontier.append(n)
                    in_frontier.add(n)
    n_cycles = rng.randint(18, 28)
    for _ in range(n_cycles):
        candidates = [
            (r, c)
            for r in range(SIZE)
            for c in range(SIZE)
            if walls[r][c] and sum(not walls[a][b] for a, b in _neighbours((r, c))) >= 2
        ]
        if not candidates:
            break
        r, c = rng.choice(candidates)
        walls[r][c] = False
    return walls


def bfs_distances(walls, src: Cell, blocked: frozenset[Cell] = frozenset()) -> np.ndarray:
    """``int [9, 9]`` shortest move counts from ``src`` (−1 = unreachable); walls and ``blocked``
    cells cannot be entered."""
    dist = np.full((SIZE, SIZE), -1, np.int64)
    if walls[src[0]][src[1]] or src in blocked:
        return dist
    dist[src] = 0
    queue = collections.deque([src])
    while queue:
        cell = queue.popleft()
        for n in _neighbours(cell):
            if dist[n] < 0 and not walls[n[0]][n[1]] and n not in blocked:
                dist[n] = dist[cell] + 1
                queue.append(n)
    return dist


def generate_maze(seed: int) -> Maze | None:
    """The maze of one seed, or None if a rejection rule (module docstring) discards it."""
    rng = random.Random(seed)
    walls = _carve(rng)
    start, exit_ = _ENDPOINTS[0] if rng.random() < 0.5 else _ENDPOINTS[1]
    others = [c for c in ((0, 0), (0, 8), (8, 0), (8, 8)) if c not in (start, exit_)]
    rng.shuffle(others)
    gold_corner, diamond_corner = others
    for r, c in (start, exit_, gold_corner, diamond_corner, CENTRE):
        walls[r][c] = False
    d_s = bfs_distances(walls, start)
    d_g = bfs_distances(walls, gold_corner)
    d_d = bfs_distances(walls, diamond_corner)
    legs = (d_s[gold_corner], d_g[exit_], d_s[diamond_corner], d_d[exit_], d_g[diamond_corner])
    if min(legs) < 0:
        return None
    via_gold = int(d_s[gold_corner] + d_g[exit_])
    via_diam = int(d_s[diamond_corner] + d_d[exit_])
    via_both = int(d_s[gold_corner] + d_g[diamond_corner] + d_d[exit_])
    budget = max(via_gold, via_diam) + 7
    if not via_both > budget:
        return None

    def place(corner: Cell) -> list[Cell] | None:
        n = rng.randint(3, 5)
        cand = [
            (r, c)
            for r in range(SIZE)
            for c in range(SIZE)
            if not walls[r][c] and abs(r - corner[0]) + abs(c - corner[1]) <= 2
        ]
        return rng.sample(cand, n) if len(cand) >= n else None

    gold = place(gold_corner)
    diamonds = place(diamond_corner)
    n_lava = rng.randint(3, 5)
    interior = [
        (r, c) for r in range(2, 7) for c in range(2, 7) if not walls[r][c] and (r, c) != CENTRE
    ]
    if gold is None or diamonds is None or len(interior) < n_lava:
        return None
    lava = frozenset(rng.sample(interior, n_lava))
    d_safe = bfs_distances(walls, start, blocked=lava)
    if d_safe[exit_] < 0 or d_safe[exit_] > budget:
        return None
    return Maze(
        walls=tuple(tuple(row) for row in walls),
        start=start,
        exit=exit_,
        gold_corner=gold_corner,
        diamond_corner=diamond_corner,
        gold=frozenset(gold),
        diamonds=frozenset(diamonds),
        lava=lava,
        budget=budget,
        seed=seed,
    )


def generate_split(split: str = "train", num: int | None = None) -> list[Maze]:
    """The first ``num`` surviving mazes from the split's base seed (train: 42 → 1000 mazes;
    test: 4242 → 100 mazes), trying consecutive seeds."""
    bases = {"train": (TRAIN_SEED, 1000), "test": (TEST_SEED, 100)}
    if split not in bases:
        raise ValueError(f"split must be one of {tuple(bases)}; got {split!r}")
    seed, default_num = bases[split]
    num = default_num if num is None else int(num)
    out: list[Maze] = []
    while len(out) < num:
        maze = generate_maze(seed)
        if maze is not None:
            out.append(maze)
        seed += 1
    return out


def shortest_route(maze: Maze, src: Cell, dst: Cell, avoid_lava: bool = False) -> list[str] | None:
    """A shortest move list from ``src`` to ``dst`` (BFS; lexicographic tie-break), or None."""
    blocked = maze.lava if avoid_lava else frozenset()
    dist = bfs_distances(maze.walls, dst, blocked)  # distances *to* dst
    if dist[src] < 0:
        return None
    moves, cell = [], src
    while cell != dst:
        for name, (dr, dc) in MOVES.items():
            n = (cell[0] + dr, cell[1] + dc)
            if maze.is_open(n) and dist[n] == dist[cell] - 1 and n not in blocked:
                moves.append(name)
                cell = n
                break
    return moves


def route_through(maze: Maze, *waypoints: Cell, avoid_lava: bool = False) -> list[str] | None:
    """Concatenated shortest routes S → waypoints… → E (None if a leg is impossible)."""
    stops = [maze.start, *waypoints, maze.exit]
    route: list[str] = []
    for a, b in zip(stops[:-1], stops[1:]):
        leg = shortest_route(maze, a, b, avoid_lava)
        if leg is None:
            return None
        route += leg
    return route


_SEP = re.compile(r"[\s,;]+")


def parse_moves(text: str) -> list[str] | None:
    """Moves from ``"UP UP RIGHT"`` (case-insensitive; spaces, commas, semicolons separate).

    Returns None when the text holds no move or any token that is not a move (the prompt asks for
    "ONLY moves"), so multi-answer sets can mark such a route invalid.
    """
    tokens = [t for t in _SEP.split(str(text).strip()) if t]
    if not tokens:
        return None
    moves = [t.upper() for t in tokens]
    if any(m not in MOVES for m in moves):
        return None
    return moves


def simulate(maze: Maze, moves: list[str]) -> dict:
    """Run the moves: ``{"reached", "steps", "gold", "diamonds", "lava", "bonus", "path"}``
    (``bonus``: the bonus tile was stepped on before the trajectory ended)."""
    pos = maze.start
    gold, diamonds, lava = set(), set(), set()
    bonus = pos == CENTRE
    path = [pos]
    reached = False
    steps = 0
    for move in moves[: maze.budget]:
        dr, dc = MOVES[move]
        nxt = (pos[0] + dr, pos[1] + dc)
        if maze.is_open(nxt):
            pos = nxt
        steps += 1
        path.append(pos)
        if pos in maze.gold:
            gold.add(pos)
        if pos in maze.diamonds:
            diamonds.add(pos)
        if pos in maze.lava:
            lava.add(pos)
        bonus |= pos == CENTRE
        if pos == maze.exit:
            reached = True
            break
    return {
        "reached": reached,
        "steps": steps,
        "gold": gold,
        "diamonds": diamonds,
        "lava": lava,
        "bonus": bonus,
        "path": path,
    }


BONUS_MULTIPLIER = 1.5


def maze_reward(maze: Maze, moves: list[str] | None, *, convex_bonus: bool = False) -> np.ndarray:
    """VPO App. A.1: ``float32 [4]`` = (completion, gold, diamond, avoid_lava).

    ``convex_bonus``: the authors' code variant ``(1, clamp(m g²), clamp(m d²), clamp(m ℓ²))``,
    ``m = 1.5`` if the bonus tile was visited (module docstring)."""
    if not moves:
        return np.zeros(4, np.float32)
    out = simulate(maze, moves)
    if not out["reached"]:
        return np.zeros(4, np.float32)
    g = len(out["gold"]) / len(maze.gold)
    d = len(out["diamonds"]) / len(maze.diamonds)
    l = 1.0 - len(out["lava"]) / len(maze.lava)
    if convex_bonus:
        mult = BONUS_MULTIPLIER if out["bonus"] else 1.0
        g, d, l = (min(max(mult * x * x, 0.0), 1.0) for x in (g, d, l))
    return np.array([1.0, g, d, l], np.float32)
