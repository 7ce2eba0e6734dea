"""Goal-conditioned GRPO (VPO, arXiv:2605.22817, Sec. 5 and App. E.5): the prompt suffix, the
per-example Dirichlet weights, the rendered prompts and the per-prompt ``w . r`` advantages."""

import dataclasses
import types

import numpy as np
import pytest
from mojax_test_utils import load_config, shrink

from mojax.config import ConfigError
from mojax.rl.episodes import EpisodeRunner, Episodes, concat, select
from mojax.rl.state import HostState
from mojax.rl.step import advantages
from mojax.spec import validate
from mojax.tasks.framework.goal import draw_goal_weights, goal_messages, goal_suffix
from mojax.tasks.maze_task import MazeTask


def test_suffix_matches_the_paper_block():
    names = ("completion", "gold", "diamond", "avoid_lava")
    got = goal_suffix(names, [0.1234, 0.5, 0.005, 0.3716])
    # VPO App. E.5 written out by hand for M = 4 ({w:.2f}; the double nearest 0.005 lies above it)
    want = (
        "Your objective weights (higher = more important to optimize):\n"
        "\n"
        "- completion: 0.12\n"
        "- gold: 0.50\n"
        "- diamond: 0.01\n"
        "- avoid_lava: 0.37\n"
        "\n"
        "Maximize your weighted score."
    )
    assert got == want
    with pytest.raises(ValueError, match="3 entries"):
        goal_suffix(names, [0.2, 0.3, 0.5])


def test_weights_are_deterministic_dirichlet_draws_on_the_simplex():
    w = draw_goal_weights(0, 3, 1, 500, 4)
    assert w.shape == (500, 4) and w.dtype == np.float32
    np.testing.assert_array_equal(w, draw_goal_weights(0, 3, 1, 500, 4))
    assert (w >= 0).all()
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    for other in [(1, 3, 1), (0, 4, 1), (0, 3, 0)]:
        assert not np.allclose(w, draw_goal_weights(*other, 500, 4)), other
    # Dir(1,...,1) marginals are Beta(1, M - 1): mean 1/M, variance (M-1) / (M^2 (M+1)) = 0.0375
    big = draw_goal_weights(7, 0, 0, 20000, 4).astype(np.float64)
    np.testing.assert_allclose(big.mean(0), 0.25, atol=0.01)
    np.testing.assert_allclose(big.var(0), 0.0375, atol=0.003)


class _Tok:
    """A transparent chat template: role tags around each message; bytes as token ids."""

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in msgs)
        return text + ("<assistant>" if add_generation_prompt else "")

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(ids).decode()


def _runner(goal=True):
    spec = types.SimpleNamespace(task=types.SimpleNamespace(num_answers=0, goal_conditioned=goal))
    return EpisodeRunner(spec=spec, task=MazeTask(), tokenizer=_Tok(), sampler=None)


def test_rendered_prompt_carries_the_weights():
    task = MazeTask()
    ex = task.load("train", 2)
    runner = _runner()
    w1, w2 = draw_goal_weights(0, 0, 0, 2, 4), draw_goal_weights(0, 1, 0, 2, 4)
    ids1, got1 = runner._prompts(ex, w1)
    ids2, _ = runner._prompts(ex, w2)
    np.testing.assert_array_equal(got1, w1)
    for p in range(2):
        text = _Tok().decode(ids1[p])
        base = ex[p].messages[-1]["content"]
        want = f"<user>{base}\n\n{goal_suffix(task.objective_names, w1[p])}</user><assistant>"
        assert text == want
        assert ids1[p] != ids2[p]
    # no weights given (evaluation / validation): the canonical w* = task.scalar_weights
    ids_star, w_star = runner._prompts(ex, None)
    np.testing.assert_array_equal(w_star, np.tile(task.scalar_weights, (2, 1)))
    assert "- gold: 0.25" in _Tok().decode(ids_star[0])
    # not goal-conditioned: the plain prompt, no weights
    ids_plain, none = _runner(goal=False)._prompts(ex, None)
    assert none is None and "objective weights" not in _Tok().decode(ids_plain[0])
    msgs = goal_messages(task, ex[0], w1[0])
    assert msgs[-1]["content"].endswith("Maximize your weighted score.")
    with pytest.raises(ValueError, match=r"goal_weights has shape \(2, 3\)"):
        runner._prompts(ex, np.ones((2, 3)) / 3)


@dataclasses.dataclass
class _Rollout:
    texts: list
    lengths: np.ndarray


def _episodes(rewards, valid, goal_w):
    p, g, _ = rewards.shape
    ex = MazeTask().load("train", p)
    rollout = _Rollout([""] * (p * g), np.ones(p * g, np.int32))
    return Episodes(ex, [[1]] * p, g, rollout, rewards, valid, {}, goal_weights=goal_w)


def test_advantages_are_group_zscores_of_the_per_prompt_scalar():
    from mojax.advantages import MethodContext

    spec = validate(load_config("goal_grpo"), num_devices=None)
    method = spec.method
    run = types.SimpleNamespace(spec=spec, hooks=method.make_hooks(MethodContext(method, {})))
    rng = np.random.default_rng(0)
    p, g, m = 3, 5, 4
    rewards = rng.uniform(0, 1, (p, g, m)).astype(np.float32)
    valid = np.ones((p, g), bool)
    w = draw_goal_weights(1, 2, 0, p, m)
    eps = _episodes(rewards, valid, w)
    _, out, _ = advantages(run, HostState(), eps, None)
    want = np.zeros((p, g))
    for i in range(p):  # GRPO on s = w_p . r (population std, eps 1e-6)
        s = np.array(
            [sum(float(w[i, k]) * float(rewards[i, j, k]) for k in range(m)) for j in range(g)]
        )
        want[i] = (s - s.mean()) / (s.std() + 1e-6)
    np.testing.assert_allclose(np.asarray(out.advantages), want, rtol=1e-4, atol=1e-5)
    # a shared w* gives different advantages: the per-prompt weights are what is used
    eps_star = _episodes(
        rewards, valid, np.tile(MazeTask.scalar_weights, (p, 1)).astype(np.float32)
    )
    _, out_star, _ = advantages(run, HostState(), eps_star, None)
    assert not np.allclose(np.asarray(out_star.advantages), want, atol=1e-3)
    # select / concat keep each prompt's weights with its rows
    both = concat(eps, eps_star)
    np.testing.assert_array_equal(both.goal_weights[p:], eps_star.goal_weights)
    picked = select(both, np.array([4, 0]))
    np.testing.assert_array_equal(picked.goal_weights, both.goal_weights[[4, 0]])


def test_config_validates_and_bad_combinations_name_the_key():
    spec = validate(load_config("goal_grpo"), num_devices=None)
    assert spec.task.goal_conditioned and spec.estimator == "grpo"
    validate(load_config("goal_grpo", "estimator=dr_grpo"), num_devices=None)
    validate(load_config("goal_grpo", "paper=true"), num_devices=None)
    c = load_config("goal_grpo").unlock()
    c.estimator = "gdpo"
    with pytest.raises(ConfigError, match="config.task.goal_conditioned"):
        validate(c, num_devices=None)
    c = load_config("goal_grpo").unlock()
    c.advantage = {"weights": (0.25, 0.25, 0.25, 0.25)}
    with pytest.raises(ConfigError, match="config.task.goal_conditioned.*advantage.weights"):
        validate(c, num_devices=None)


@pytest.mark.slow
def test_two_tiny_steps_train_on_freshly_drawn_weights(tmp_path):
    """Every transcript's prompt carries the weights drawn for its step from (seed, step, 0)."""
    import json

    from mojax.rl import trainer

    c = shrink(load_config("goal_grpo"))
    c.transcripts_per_step = c.rollout.prompts_per_step * c.rollout.num_samples
    trainer.run(c, str(tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    names = MazeTask.objectives
    g, p = c.rollout.num_samples, c.rollout.prompts_per_step
    assert sorted({r["step"] for r in rows}) == list(range(1, c.steps + 1))
    prompts = {}
    for r in rows:
        w = draw_goal_weights(c.seed, r["step"] - 1, 0, p, len(names))  # drawn before the update
        k = [x for x in rows if x["step"] == r["step"]].index(r) // g
        assert goal_suffix([o.name for o in names], w[k]) in r["prompt"]
        prompts.setdefault(r["step"], set()).add(r["prompt"])
    assert prompts[1].isdisjoint(prompts[2])  # fresh weights (and prompts) every step


def test_a_task_without_a_full_w_star_is_rejected():
    from mojax.spec.rules import _goal_errors

    task = types.SimpleNamespace(name="t", num_objectives=3, scalar_weights=(0.5, 0.5))
    errs = _goal_errors(validate(load_config("goal_grpo"), num_devices=None), task)
    assert len(errs) == 1 and errs[0].startswith("config.task.goal_conditioned=True")
    assert "scalar_weights of length M=3" in errs[0]
