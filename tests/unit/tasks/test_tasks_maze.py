"""VPO maze (003 App. A.1): rejection rules, BFS routes, the trade-off guarantee, rewards."""

import collections

import numpy as np
import pytest

from mojax.tasks import maze as M
from mojax.tasks.framework.base import Example
from mojax.tasks.maze_task import MazeTask, multi_prompt, single_prompt

CORNERS = {(0, 0), (0, 8), (8, 0), (8, 8)}


def _bfs(maze, src, blocked=()):
    """Independent reference: plain BFS distance dict over open cells."""
    dist = {src: 0}
    q = collections.deque([src])
    while q:
        r, c = q.popleft()
        for n in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= n[0] < 9 and 0 <= n[1] < 9 and not maze.walls[n[0]][n[1]]:
                if n not in dist and n not in blocked:
                    dist[n] = dist[(r, c)] + 1
                    q.append(n)
    return dist


@pytest.fixture(scope="module")
def train():
    return M.generate_split("train")


@pytest.fixture(scope="module")
def test_mazes():
    return M.generate_split("test")


def test_splits_sizes_seeds_and_determinism(train, test_mazes):
    assert len(train) == 1000 and len(test_mazes) == 100
    assert train[0].seed >= 42 and train[-1].seed < 4242  # the two seed ranges do not overlap
    assert test_mazes[0].seed >= 4242
    assert M.generate_split("test", 5) == test_mazes[:5]
    assert len({m.seed for m in train}) == 1000
    with pytest.raises(ValueError, match="split"):
        M.generate_split("dev")


def test_every_rejection_rule_holds(train, test_mazes):
    for m in train + test_mazes:
        assert {(m.start, m.exit)} <= {((0, 0), (8, 8)), ((0, 8), (8, 0))}
        assert {m.gold_corner, m.diamond_corner} == CORNERS - {m.start, m.exit}
        d_s, d_g, d_d = _bfs(m, m.start), _bfs(m, m.gold_corner), _bfs(m, m.diamond_corner)
        via_gold = d_s[m.gold_corner] + d_g[m.exit]
        via_diam = d_s[m.diamond_corner] + d_d[m.exit]
        via_both = d_s[m.gold_corner] + d_g[m.diamond_corner] + d_d[m.exit]
        assert m.budget == max(via_gold, via_diam) + 7
        assert via_both > m.budget
        # the paper checks gold-first only; the diamond-first order never fits either here
        assert d_s[m.diamond_corner] + d_d[m.gold_corner] + d_g[m.exit] > m.budget
        for items, corner in ((m.gold, m.gold_corner), (m.diamonds, m.diamond_corner)):
            assert 3 <= len(items) <= 5
            for r, c in items:
                assert abs(r - corner[0]) + abs(c - corner[1]) <= 2 and not m.walls[r][c]
        assert 3 <= len(m.lava) <= 5
        for r, c in m.lava:
            assert 2 <= r <= 6 and 2 <= c <= 6 and (r, c) != (4, 4) and not m.walls[r][c]
        assert _bfs(m, m.start, blocked=m.lava).get(m.exit, 10**9) <= m.budget
        assert not m.walls[4][4]


def test_rejections_happen_and_extra_openings_make_cycles(train):
    assert train[-1].seed - 42 + 1 > 1000  # some seeds were rejected
    # a spanning tree on n open cells has n - 1 edges; the extra openings add cycles
    m = train[0]
    cells = [(r, c) for r in range(9) for c in range(9) if not m.walls[r][c]]
    edges = sum(1 for r, c in cells for n in ((r + 1, c), (r, c + 1)) if n in set(cells))
    assert edges > len(cells) - 1


def test_bfs_routes_reach_exit_within_budget(test_mazes):
    for m in test_mazes:
        for corner in (m.gold_corner, m.diamond_corner):
            route = M.route_through(m, corner)
            assert len(route) <= m.budget - 7
            out = M.simulate(m, route)
            assert out["reached"]
            r = M.maze_reward(m, route)
            assert r[0] == 1.0
        safe = M.shortest_route(m, m.start, m.exit, avoid_lava=True)
        assert len(safe) <= m.budget
        assert M.maze_reward(m, safe)[3] == 1.0


def _best_item_sets(m):
    """Exhaustive search over (cell, collected items) within the budget: can one route reach E
    with every gold and every diamond?"""
    items = sorted(m.gold) + sorted(m.diamonds)
    idx = {c: i for i, c in enumerate(items)}
    gmask = (1 << len(m.gold)) - 1
    full = (1 << len(items)) - 1
    frontier, seen = {(m.start, 0)}, {(m.start, 0)}
    for _ in range(m.budget):
        nxt = set()
        for cell, mask in frontier:
            for dr, dc in M.MOVES.values():
                n = (cell[0] + dr, cell[1] + dc)
                if not m.is_open(n):
                    n = cell
                nm = mask | (1 << idx[n]) if n in idx else mask
                if n == m.exit:
                    if nm == full:
                        return True
                    continue
                if (n, nm) not in seen:
                    seen.add((n, nm))
                    nxt.add((n, nm))
        frontier = nxt
    assert gmask  # at least one gold item exists
    return False


def test_no_route_collects_both_corners_items_within_budget(test_mazes):
    for m in test_mazes:
        assert not _best_item_sets(m), m.seed


def _open_maze():
    walls = tuple(tuple(False for _ in range(9)) for _ in range(9))
    return M.Maze(
        walls=walls,
        start=(0, 0),
        exit=(8, 8),
        gold_corner=(0, 8),
        diamond_corner=(8, 0),
        gold=frozenset({(0, 6), (0, 7), (1, 8)}),
        diamonds=frozenset({(8, 0), (7, 0), (8, 1), (6, 0)}),
        lava=frozenset({(4, 8), (5, 8), (3, 3)}),
        budget=20,
        seed=-1,
    )


@pytest.mark.parametrize(
    "route,expected",
    [
        # along the top then down the right edge: all 3 gold, lava (4,8) and (5,8): l = 1 - 2/3
        ("RIGHT " * 8 + "DOWN " * 8, [1, 1, 0, 1 / 3]),
        # down the left edge then along the bottom: all 4 diamonds, no lava
        ("DOWN " * 8 + "RIGHT " * 8, [1, 0, 1, 1]),
        # a bump into the border spends a move but changes nothing (17 moves <= 20)
        ("UP " + "RIGHT " * 8 + "DOWN " * 8, [1, 1, 0, 1 / 3]),
        # moves after E are not executed
        ("RIGHT " * 8 + "DOWN " * 8 + "LEFT LEFT", [1, 1, 0, 1 / 3]),
        # E never reached: zeros even though gold was collected
        ("RIGHT " * 8 + "DOWN " * 3, [0, 0, 0, 0]),
        # E would be reached on move 21 > budget 20: zeros
        ("UP " * 5 + "RIGHT " * 8 + "DOWN " * 8, [0, 0, 0, 0]),
        # one diamond (8,1) of 4 via column 1, no lava: d = 1/4
        ("RIGHT " + "DOWN " * 8 + "RIGHT " * 7, [1, 0, 0.25, 1]),
    ],
)
def test_reward_of_known_routes(route, expected):
    m = _open_maze()
    moves = M.parse_moves(route)
    np.testing.assert_allclose(M.maze_reward(m, moves), expected, rtol=1e-6)
    task = MazeTask()
    ex = Example("x", ({"role": "user", "content": "maze"},), m)
    np.testing.assert_allclose(
        task.score(f"think...<answer>{route}</answer>", ex), expected, rtol=1e-6
    )


@pytest.mark.parametrize(
    "route,bonus,linear,convex",
    [
        # no bonus (m = 1): one diamond (8,1) of 4, no lava -> [1, 0, (1/4)^2, clamp(1 * 1^2)]
        ("RIGHT " + "DOWN " * 8 + "RIGHT " * 7, False, [1, 0, 0.25, 1], [1, 0, 1 / 16, 1]),
        # via the bonus tile (4,4) (m = 1.5), then lava (4,8) and (5,8): l = 1 - 2/3 = 1/3
        # -> [1, 0, 0, 1.5 * (1/3)^2 = 1/6]
        (
            "RIGHT " * 4 + "DOWN " * 4 + "RIGHT " * 4 + "DOWN " * 4,
            True,
            [1, 0, 0, 1 / 3],
            [1, 0, 0, 1 / 6],
        ),
        # diamond (6,0) (d = 1/4), then up to row 4 and through the bonus tile, no lava; 20 moves
        # = budget -> [1, 0, clamp(1.5 / 16) = 3/32, clamp(1.5 * 1^2) = 1]
        (
            "DOWN " * 6 + "UP " * 2 + "RIGHT " * 4 + "DOWN " * 4 + "RIGHT " * 4,
            True,
            [1, 0, 0.25, 1],
            [1, 0, 3 / 32, 1],
        ),
        # the bonus tile without reaching E: zeros in both variants
        ("RIGHT " * 4 + "DOWN " * 4, True, [0, 0, 0, 0], [0, 0, 0, 0]),
    ],
)
def test_convex_bonus_authors_variant_by_hand(route, bonus, linear, convex):
    """Issue 13: the authors' code variant [1, clamp(m (g/#G)^2), clamp(m (d/#D)^2),
    clamp(m (1 - lava/#L)^2)], m = 1.5 if the bonus tile was visited else 1, clamped to [0, 1];
    zeros if E is not reached. The default (paper, VPO App. A.1) is linear and B is a distractor."""
    m = _open_maze()
    moves = M.parse_moves(route)
    np.testing.assert_allclose(M.maze_reward(m, moves), linear, rtol=1e-6)
    np.testing.assert_allclose(M.maze_reward(m, moves, convex_bonus=True), convex, rtol=1e-6)
    ex = Example("x", ({"role": "user", "content": "maze"},), m)
    got = MazeTask(convex_bonus=True).score(f"<answer>{route}</answer>", ex)
    np.testing.assert_allclose(got, convex, rtol=1e-6)
    assert M.simulate(m, moves)["bonus"] == bonus


def test_parsing_and_sets():
    assert M.parse_moves(" up, Up;RIGHT\n down ") == ["UP", "UP", "RIGHT", "DOWN"]
    assert M.parse_moves("UP JUMP") is None and M.parse_moves("   ") is None
    m = _open_maze()
    task = MazeTask()
    ex = Example("x", ({"role": "user", "content": "maze"},), m)
    np.testing.assert_array_equal(task.score("<answer>UP JUMP</answer>", ex), [0, 0, 0, 0])
    np.testing.assert_array_equal(task.score("RIGHT " * 8 + "DOWN " * 8, ex), [0, 0, 0, 0])
    text = (
        "reasoning <route_1>" + "RIGHT " * 8 + "DOWN " * 8 + "</route_1>"
        "<route_2>go right</route_2><route_3>" + "RIGHT " * 8 + "DOWN " * 8 + "</route_3>"
    )
    r, v = task.score_set(text, ex, 4)
    assert v.tolist() == [True, False, True, False]
    np.testing.assert_allclose(r[0], [1, 1, 0, 1 / 3], rtol=1e-6)
    r, v = task.score_set(text, ex, 4, dedup=True)
    assert v.tolist() == [True, False, False, False]


def test_prompts(test_mazes):
    m = test_mazes[0]
    p = single_prompt(m)
    assert m.render() in p and f"You have {m.budget} steps." in p
    assert f"This maze has {len(m.gold)} Gold, {len(m.diamonds)} Diamond, {len(m.lava)} Lava" in p
    grid = m.render().split("\n")
    assert len(grid) == 9 and all(len(row.split(" ")) == 9 for row in grid)
    assert grid[m.start[0]].split(" ")[m.start[1]] == "S" and grid[4].split(" ")[4] == "B"
    mp = multi_prompt(m, 3)
    assert f"You have {m.budget} steps per route." in mp and "<route_3>" in mp
    assert f"own {m.budget}-step budget" in mp
    ex = MazeTask.load("test", 1)[0]
    assert ex.target == m and MazeTask().messages(ex, num_answers=3)[0]["content"] == mp
