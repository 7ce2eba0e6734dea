"""Multi-turn rollout driver on a scripted model through the real sampler + append path.

The "scripted model" is the tiny Qwen (random weights) whose next-token logits get a bias of
``BIAS`` on a scripted token, looked up by (RoPE position, current token): greedy decoding then
emits the chosen transcript, while every logit still depends on the whole context through the
real attention over the KV cache. References: the expected transcript built independently from
the script and the real Calculator, and a teacher-forced forward of the same model over the final
concatenated sequence without any cache (log-probs within 1e-4, fp32).
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from mojax.models.qwen import Qwen
from mojax.rollout import rollout, tool_stop_spec
from mojax.rollout.agent import malformed_message
from mojax.rollout.tools import Calculator
from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
from mojax.tasks.vocab import build_sentencepiece

ATOL = 1e-4
BIAS = 4.0
VOCAB = 128  # >= the sentencepiece vocabularies; one model shape for every test (compiles)
WIDTH = 160  # teacher-forcing width (one compile)
TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
SETTINGS = dict(max_new_tokens=24, max_response_len=96, max_turns=3, max_obs_tokens=16)


@flax.struct.dataclass
class ScriptedModel(mm.QwenModel):
    """``QwenModel`` whose logits add ``BIAS`` on ``table[position, token]`` (-1 = no bias).

    The forward returns hidden states with two extra channels (the RoPE position and the token
    id) so that ``Qwen.logits`` calls, which only see the last hidden state, can look the script
    up; the sampler only uses ``apply_fn``, ``params`` and ``config``.
    """

    table: jax.Array = None  # int32 [T, V]

    @property
    def apply_fn(self):
        base = Qwen(self.config).apply
        table, vocab = self.table, self.config.vocab_size

        def apply(variables, x, attention_mask=None, positions=None, cache=None, **kw):
            if kw.get("method") is Qwen.logits:
                logits = base(variables, x[..., :-2], method=Qwen.logits)
                pos = jnp.clip(x[..., -2].astype(jnp.int32), 0, table.shape[0] - 1)
                target = table[pos, x[..., -1].astype(jnp.int32)]
                return logits + BIAS * jax.nn.one_hot(target, vocab)  # one_hot(-1) = 0
            mask = jnp.ones(x.shape, bool) if attention_mask is None else attention_mask
            counts = jnp.cumsum(mask.astype(jnp.int32), axis=-1)
            start = 0 if cache is None else cache.num_valid[:, None]
            pos = jnp.maximum(start + counts - 1, 0) if positions is None else positions
            out = base(variables, x, attention_mask=attention_mask, cache=cache, return_hidden=True)
            hidden, new_cache = out if cache is not None else (out, None)
            extra = jnp.stack([pos, x], axis=-1).astype(hidden.dtype)
            hidden = jnp.concatenate([hidden, extra], axis=-1)
            if not kw.get("return_hidden", False):
                hidden = apply(variables, hidden, method=Qwen.logits)
            return hidden if cache is None else (hidden, new_cache)

        return apply


def teacher_forced(model, seq):
    """fp64 log-softmax [len(seq) - 1, V]: row i is the distribution of seq[i + 1]."""
    toks = np.zeros((1, WIDTH), np.int32)
    toks[0, : len(seq)] = seq
    mask = (np.arange(WIDTH) < len(seq))[None]
    logits = np.asarray(model.apply_fn({"params": model.params}, jnp.asarray(toks), mask))[0]
    logits = logits.astype(np.float64)[: len(seq) - 1]
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def calc_texts(n=200):
    task = CalculatorTask()
    demos = sft_demonstrations(task.load("train", n, seed=0))
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    texts = [chat.format(d.example.messages[0]["content"]) + d.response for d in demos]
    # the observations the model will see (errors included), so the vocab covers their characters
    texts += [malformed_message("</calc>"), "syntax error: invalid syntax", "Error: 5>3"]
    return texts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = build_sentencepiece(
        calc_texts(), tmp_path_factory.mktemp("sp") / "calc.model", user_symbols=TAGS
    )
    return mm.load_tokenizer(path)


def build(tok, task, prompt, segments, tool):
    """Expected transcript: prompt, then policy segments with each call's real observation.

    Returns (tokens, policy mask, observation spans in response coordinates).
    """
    seq, policy, obs_spans = list(prompt), [False] * len(prompt), []
    for k, seg in enumerate(segments):
        ids = tok.encode(seg) if isinstance(seg, str) else list(seg)
        seq += ids
        policy += [True] * len(ids)
        if k + 1 < len(segments):  # a call ends this segment: append its observation
            call = task.parse_tool_call(tok.decode(ids))
            text = malformed_message(task.tool_stop) if call is None else tool.run(call).observation
            obs = tok.encode(task.format_observation(text))
            obs_spans.append((len(seq) - len(prompt), len(seq) - len(prompt) + len(obs)))
            seq += obs
            policy += [False] * len(obs)
    return seq, policy, obs_spans


def scripted(tok, task, prompts, scripts, tool, seed=1):
    """The tiny Qwen scripted to emit ``scripts`` (policy segments per row) after ``prompts``.

    Keys are (position, token), so two rows may clash; each prompt gets the fewest leading filler
    tokens that avoid a clash (prompts are arbitrary token lists). Returns (model, prompts, built).
    """
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=VOCAB)
    table = np.full((WIDTH, cfg.vocab_size), -1, np.int32)
    filler = tok.encode(" ")[0]
    out_prompts, built = [], []
    for prompt, script in zip(prompts, scripts, strict=True):
        for k in range(64):
            p = [filler] * k + list(prompt)
            seq, policy, spans = build(tok, task, p, script, tool)
            keys = [(i - 1, seq[i - 1], seq[i]) for i in range(1, len(seq)) if policy[i]]
            if all(table[a, t] in (-1, nxt) for a, t, nxt in keys):
                break
        else:
            raise AssertionError("no clash-free filler found")
        for a, t, nxt in keys:
            table[a, t] = nxt
        out_prompts.append(p)
        built.append((seq, policy, spans))
    params = mm.init_params(cfg, jax.random.key(seed))
    model = ScriptedModel(config=cfg, params=params, table=jnp.asarray(table))
    return model, out_prompts, built


def prompts_for(tok, task, exprs):
    return [tok.encode(task.build_prompt(task.example(p, "x"), tok)) for p in exprs]


def test_scripted_multi_turn_masks_counts_and_matches_teacher_forcing(tok):
    from mojax.tasks.calculator import Problem

    task, calc = CalculatorTask(), Calculator()
    problems = [Problem(12, "*", 34, "hard"), Problem(5, "+", 7, "easy"), Problem(23, "-", 9, "x")]
    problems += [Problem(8170, "*", 7, "hard"), Problem(6, "*", 60006, "easy")]  # distinct lengths
    end = [tok.eos_token_id]
    scripts = [
        ["<calc>12*34</calc>", tok.encode("<answer>408</answer>") + end],  # one call
        [tok.encode("<answer>12</answer>") + end],  # no call
        ["<calc>23-9</calc>", "<calc>14*2</calc>", tok.encode("<answer>28</answer>") + end],
        ["8170*7</calc>", tok.encode("<answer>57190</answer>") + end],  # malformed: no <calc>
        ["<calc>6*6</calc>", "<calc>36</calc>", "<calc>1+1</calc>", []],  # past max_turns=3
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, built = scripted(tok, task, prompts, scripts, calc)

    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **SETTINGS
    )

    assert res.stop.exact and res.stop.token_ids == tuple(tok.encode("</calc>"))
    assert res.n_calls.tolist() == [1, 0, 2, 1, 2]
    assert res.finish_reason == ["stop", "stop", "stop", "stop", "max_turns"]
    assert res.counters["malformed"] == 1 and res.counters["tool_calls"] == 6
    for row, (seq, policy, spans) in enumerate(built):
        plen = len(prompts[row])
        if row == 4:  # the third call is not answered: the row ends at its </calc>
            n_obs = spans[1][1]
            seq, policy = seq[: plen + n_obs + len(tok.encode("<calc>1+1</calc>"))], policy
        n = int(res.lengths[row])
        assert res.tokens[row, :n].tolist() == seq[plen:], row
        mask = res.loss_mask[row, :n]
        np.testing.assert_array_equal(mask, np.asarray(policy[plen : plen + n]))
        assert not res.loss_mask[row, n:].any() and not res.logprobs[row, n:].any()
        for a, b in spans:
            assert not mask[a:b].any() and not res.logprobs[row, a:b].any()
        # teacher-forced log-probs over the concatenated transcript, no cache
        logp = teacher_forced(model, seq)
        want = logp[np.arange(plen - 1, len(seq) - 1), seq[plen:]]
        np.testing.assert_allclose(res.logprobs[row, :n][mask], want[mask], atol=ATOL, rtol=0)
        # transcripts parse; tool outputs appear; turns record the calls
        turns = res.turns[row]
        assert [t.executed for t in turns].count(True) == res.n_calls[row]
        for t, (a, b) in zip([t for t in turns if t.executed], spans, strict=False):
            assert t.end == a and t.obs_tokens == b - a
    assert CalculatorTask.parse_answer(res.texts[0]) == 408
    assert "<output>408</output>" in res.texts[0]
    assert "<output>14</output>" in res.texts[2] and "<output>28</output>" in res.texts[2]
    assert res.turns[3][0].malformed and res.turns[3][0].exit_reason == "malformed"
    assert malformed_message("</calc>") in res.texts[3]
    assert res.turns[4][-1].ended_by == "max_turns" and res.turns[4][-1].call is None


def test_limits_tool_calls_and_budget(tok):
    """max_tool_calls ends a row asking for one call too many; a small R ends rows with budget."""
    from mojax.tasks.calculator import Problem

    task, calc = CalculatorTask(), Calculator()
    problems = [Problem(6, "*", 6, "easy"), Problem(12, "*", 34, "hard")]
    scripts = [
        ["<calc>6*6</calc>", "<calc>36*2</calc>", tok.encode("<answer>72</answer>") + [2]],
        ["<calc>12*34</calc>", tok.encode("<answer>408</answer>") + [2]],
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, built = scripted(tok, task, prompts, scripts, calc)
    kw = dict(key=jax.random.key(0), temperature=0.0, tool=calc)
    res = rollout(model, tok, task, prompts, **{**SETTINGS, "max_turns": 3}, max_tool_calls=1, **kw)
    assert res.finish_reason == ["max_tool_calls", "stop"]
    assert res.n_calls.tolist() == [1, 1]
    # response buffer too small for the observation: the call runs but is not appended
    res = rollout(model, tok, task, prompts, **{**SETTINGS, "max_response_len": 12}, **kw)
    assert res.finish_reason[1] == "budget" and res.n_calls[1] == 0
    assert res.turns[1][0].ended_by == "budget" and res.turns[1][0].call == "12*34"


def test_multi_token_stop_fallback_rejects_false_candidates(tmp_path):
    """``</calc>`` in three pieces: the sampler stops on '>' (candidate), the host confirms.

    A '>' in ``5>3`` is a false candidate: the row resumes with an empty append and the final
    transcript and log-probs are exactly those of decoding it from scratch.
    """
    from mojax.tasks.calculator import Problem

    tags = ("<calc>", "<output>", "</output>", "<answer>", "</answer>")
    tok = mm.load_tokenizer(
        build_sentencepiece(calc_texts(), tmp_path / "sp.model", user_symbols=tags)
    )
    assert len(tok.encode("</calc>")) > 1
    task, calc = CalculatorTask(), Calculator()
    problems = [Problem(12, "*", 34, "hard"), Problem(5, "+", 7, "easy")]
    scripts = [
        ["5>3<calc>12*34</calc>", tok.encode("3>2<answer>408</answer>") + [2]],
        [tok.encode("<answer>1>2</answer>") + [2]],
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, built = scripted(tok, task, prompts, scripts, calc)
    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **SETTINGS
    )
    spec = tool_stop_spec(tok, "</calc>", exclude=(tok.eos_token_id,))
    assert not res.stop.exact and res.stop == spec and tok.encode(">")[0] in spec.token_ids
    assert res.finish_reason == ["stop", "stop"] and res.n_calls.tolist() == [1, 0]
    assert res.counters["false_stops"] == 3
    assert [t.false_stops for t in res.turns[0]] == [1, 1] and res.turns[1][0].false_stops == 1
    for row, (seq, policy, _) in enumerate(built):
        plen, n = len(prompts[row]), int(res.lengths[row])
        assert res.tokens[row, :n].tolist() == seq[plen:]
        mask = res.loss_mask[row, :n]
        np.testing.assert_array_equal(mask, np.asarray(policy[plen:]))
        logp = teacher_forced(model, seq)
        want = logp[np.arange(plen - 1, len(seq) - 1), seq[plen:]]
        np.testing.assert_allclose(res.logprobs[row, :n][mask], want[mask], atol=ATOL, rtol=0)
    assert "<output>408</output>" in res.texts[0]
