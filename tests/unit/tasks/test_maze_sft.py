"""Maze SFT demonstrations (mojax.tasks.maze_sft): BFS routes that reach E within the budget, score
what their kind promises, parse back through the task's own scorer, and tokenise after the RL prompt."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
from mojax_test_utils import load_config, run_spec

from mojax.tasks import build_task
from mojax.tasks import maze as M
from mojax.tasks.framework import multi_answer
from mojax.tasks.maze_sft import ROUTE_KINDS, demo_routes, maze_demonstration, maze_demonstrations
from mojax.tasks.maze_task import MazeTask


@pytest.fixture(scope="module")
def train_mazes():
    return M.generate_split("train", 200)


def _walk(maze, moves):
    """An independent simulator: the cells visited until E (walls block, moves beyond budget
    ignored)."""
    pos, seen = maze.start, [maze.start]
    for mv in moves[: maze.budget]:
        dr, dc = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}[mv]
        r, c = pos[0] + dr, pos[1] + dc
        if 0 <= r < 9 and 0 <= c < 9 and not maze.walls[r][c]:
            pos = (r, c)
        seen.append(pos)
        if pos == maze.exit:
            return seen
    return None


def test_every_route_reaches_the_exit_within_budget_and_visits_its_corner(train_mazes):
    for maze in train_mazes:
        routes = demo_routes(maze)
        assert set(routes) == set(ROUTE_KINDS)
        for kind, moves in routes.items():
            assert len(moves) <= maze.budget, (maze.seed, kind)
            path = _walk(maze, moves)
            assert path is not None and path[-1] == maze.exit, (maze.seed, kind)
            assert M.maze_reward(maze, moves)[0] == 1.0
        assert maze.gold_corner in _walk(maze, routes["via_gold"])
        assert maze.diamond_corner in _walk(maze, routes["via_diamond"])
        # the direct route is lava-free (the generator guarantees a lava-free path in budget)
        assert not set(_walk(maze, routes["direct"])) & maze.lava


def test_route_kinds_spread_over_the_objectives(train_mazes):
    """The three kinds score differently: via_gold collects more gold than via_diamond, and the
    reverse for diamonds (mean over 200 mazes)."""
    r = collections.defaultdict(list)
    for maze in train_mazes:
        for kind, moves in demo_routes(maze).items():
            r[kind].append(M.maze_reward(maze, moves))
    mean = {k: np.mean(v, axis=0) for k, v in r.items()}
    assert mean["via_gold"][1] > mean["via_diamond"][1] + 0.5
    assert mean["via_diamond"][2] > mean["via_gold"][2] + 0.5


@pytest.mark.parametrize("s", [2, 3, 5])
def test_multi_answer_demo_scores_through_the_task_parser(train_mazes, s):
    task = MazeTask()
    rng = random.Random(0)
    for maze in train_mazes[:20]:
        text = maze_demonstration(maze, s, rng)
        blocks = multi_answer.parse_blocks(text, s, tag=task.answer_tag)
        assert all(b.text is not None for b in blocks)
        routes = {" ".join(m) for m in demo_routes(maze).values()}
        assert {b.text for b in blocks} <= routes
        # distinct kinds while S <= 3: where the three routes differ, so do the S blocks (and with
        # S > 3 every kind is used)
        if len(routes) == 3:
            assert len({b.text for b in blocks}) == min(s, 3)
        for b in blocks:
            assert task.score_answer(b.text, _ex(maze))[0] == 1.0


def _ex(maze):
    from mojax.tasks.framework.base import Example

    return Example("m", ({"role": "user", "content": "x"},), maze)


def test_single_answer_demo_is_an_answer_block_the_task_scores(train_mazes):
    task = MazeTask()
    texts = maze_demonstrations(train_mazes[:30], 0, seed=3)
    assert texts == maze_demonstrations(train_mazes[:30], 0, seed=3)  # deterministic
    assert texts != maze_demonstrations(train_mazes[:30], 0, seed=4)
    for maze, text in zip(train_mazes, texts):
        assert text.startswith("<answer>") and text.endswith("</answer>")
        assert task.score(text, _ex(maze))[0] == 1.0


def _built(tmp_path, name, **over):
    from mojax.rl import builders

    cfg = load_config("vpo")
    with cfg.unlocked():
        cfg.task.num_train, cfg.task.num_eval, cfg.sft.num_examples = 8, 2, 8
        for k, v in over.items():
            setattr(cfg.task, k, v)
        if not cfg.task.num_answers:  # a valid single-answer run of the same config
            cfg.estimator, cfg.advantage, cfg.eval.ks = "grpo", {}, (1,)
    task = build_task(cfg.task)
    splits = task.load_splits(cfg.task, seed=int(cfg.seed))
    tok = builders.build_tokenizer(run_spec(cfg), task, splits, str(tmp_path / name))
    return cfg, task, splits, tok


def test_sft_arrays_put_the_loss_on_the_response_after_each_prompt(tmp_path):
    """``sft_arrays`` on the maze: per maze a single-answer row then an S-route row, each the
    prompt exactly as the rollout builds it (loss 0), then the demonstration and eos (loss 1)."""
    from mojax.rl import builders

    cfg, task, splits, tok = _built(tmp_path, "vpo")
    tokens, mask = builders.sft_arrays(run_spec(cfg), task, tok, splits.train)
    assert tokens.shape[0] == 16 and tokens.shape == mask.shape
    mazes = [ex.target for ex in splits.train]
    single = maze_demonstrations(mazes, 0, int(cfg.seed))
    multi = maze_demonstrations(mazes, 2, int(cfg.seed) + 1)
    for i in range(16):
        ex = splits.train[i // 2]
        s = None if i % 2 == 0 else 2
        demo = single[i // 2] if s is None else multi[i // 2]
        prompt = tok.encode(task.build_prompt(ex, tok, num_answers=s))
        n = len(prompt)
        assert list(tokens[i, :n]) == prompt and not mask[i, :n].any()
        resp = tok.encode(demo) + [tok.eos_token_id]
        assert list(tokens[i, n : n + len(resp)]) == resp
        assert mask[i, n : n + len(resp)].all() and not mask[i, n + len(resp) :].any()
        assert tok.decode(resp[:-1]) == demo


def test_single_answer_and_set_configs_share_the_vocabulary_and_warm_start(tmp_path):
    """GRPO (``num_answers=0``) and VPO (S = 2) on the maze build the same vocabulary and the same
    SFT arrays, so one warm-start checkpoint per seed serves both; S = 3 builds another."""
    from mojax.rl import builders

    arrays = {}
    for name, s in (("grpo", 0), ("vpo", 2), ("vpo3", 3)):
        cfg, task, splits, tok = _built(tmp_path, name, num_answers=s)
        pieces = [tok.sp.id_to_piece(i) for i in range(tok.sp.get_piece_size())]
        arrays[name] = (pieces, *builders.sft_arrays(run_spec(cfg), task, tok, splits.train))
    (pa, ta, ma), (pb, tb, mb) = arrays["grpo"], arrays["vpo"]
    assert pa == pb
    np.testing.assert_array_equal(ta, tb)
    np.testing.assert_array_equal(ma, mb)
    assert arrays["vpo3"][1].shape != tb.shape or not np.array_equal(arrays["vpo3"][1], tb)
