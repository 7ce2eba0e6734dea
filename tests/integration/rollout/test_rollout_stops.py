"""Tool stop strings -> stop ids (exact single tokens, multi-token candidates), observation
encoding and the driver's argument checks (all host-side, no compile)."""

import jax
import pytest

import mojax.models as mm
from mojax.rollout import encode_observation, rollout, tool_stop_spec
from mojax.rollout.observations import TRUNCATION_MARK
from mojax.rollout.tools import Calculator
from mojax.tasks.calculator import CalculatorTask
from mojax.tasks.framework.vocab import build_sentencepiece

TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
TEXTS = ["<|im_start|>user\nCompute 12*34.<|im_end|>\n<|im_start|>assistant\n<calc>12*34</calc>"]
TEXTS += ["<output>408</output><answer>408</answer> Error: bad input", TRUNCATION_MARK]


@pytest.fixture(scope="module")
def sp_tok(tmp_path_factory):
    path = build_sentencepiece(
        TEXTS * 20, tmp_path_factory.mktemp("sp") / "t.model", user_symbols=TAGS
    )
    return mm.load_tokenizer(path)


@pytest.fixture(scope="module")
def qwen_tok(qwen2_tokenizer_dir):
    return mm.load_tokenizer(qwen2_tokenizer_dir)


def test_single_piece_tag_is_an_exact_stop(sp_tok):
    spec = tool_stop_spec(sp_tok, "</calc>")
    assert spec.exact and spec.token_ids == tuple(sp_tok.encode("</calc>"))
    assert tool_stop_spec(sp_tok, "</calc>", mode="token") == spec
    text_mode = tool_stop_spec(sp_tok, "</calc>", mode="text")  # forced fallback
    assert not text_mode.exact and spec.token_ids[0] in text_mode.token_ids


PREFIXES = ["", "x", "print(1)", ")", "a b ", "foo\n", "`", "é", "12", "```python\nprint(2)\n```\n"]


@pytest.mark.parametrize("stop", ["</code>", "```output", "</search>", "</tool_call>"])
def test_candidates_end_every_tokenisation_of_the_stop(qwen_tok, stop):
    """Independent check of "ids that can end the string": whatever precedes the stop string,
    its tokenisation ends with a candidate id and the host check confirms the decoded text."""
    eos = qwen_tok.eos_token_id
    spec = tool_stop_spec(qwen_tok, stop, exclude=(eos,))
    assert not spec.exact and eos not in spec.token_ids
    for prefix in PREFIXES:
        ids = qwen_tok.encode(prefix + stop)
        assert ids[-1] in spec.token_ids, (prefix, ids)
        assert spec.confirm(qwen_tok.decode(ids))
        assert not spec.confirm(qwen_tok.decode(ids[:-1]))
        for after in ("\n", "\n\n", "\r\n"):  # the sampler stops at the first confirmed id
            ids = qwen_tok.encode(prefix + stop + after)
            hits = [j for j, i in enumerate(ids) if i in spec.token_ids]
            assert any(spec.confirm(qwen_tok.decode(ids[: j + 1])) for j in hits), (prefix, ids)
    with pytest.raises(ValueError, match="stop_mode='token'"):
        tool_stop_spec(qwen_tok, stop, mode="token")


def test_stop_spec_errors(sp_tok):
    with pytest.raises(ValueError, match="stop_mode"):
        tool_stop_spec(sp_tok, "</calc>", mode="regex")
    with pytest.raises(ValueError, match="tool_stop"):
        tool_stop_spec(sp_tok, "")


def test_observation_truncation_keeps_markup_head_and_tail(sp_tok):
    task = CalculatorTask()
    ids, cut = encode_observation(sp_tok, task, "408", 16)
    assert not cut and ids == sp_tok.encode("<output>408</output>")
    text = "1" * 40 + "Error: bad input"
    ids, cut = encode_observation(sp_tok, task, text, 24)
    out = sp_tok.decode(ids)
    assert cut and len(ids) <= 24
    assert (
        out.startswith("<output>111") and out.endswith("input</output>") and TRUNCATION_MARK in out
    )
    # markup alone longer than the budget: a hard cut, still within it
    ids, cut = encode_observation(sp_tok, task, text, 3)
    assert cut and len(ids) == 3


def test_rollout_argument_errors(sp_tok):
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=128)
    model = mm.QwenModel(config=cfg, params=None)  # never reached: the checks come first
    task, prompts = CalculatorTask(), [[3, 4, 5]]
    kw = dict(key=jax.random.key(0), max_new_tokens=8, tool=Calculator())
    with pytest.raises(ValueError, match="max_new_tokens"):
        rollout(model, sp_tok, task, prompts, **{**kw, "max_new_tokens": 0})
    with pytest.raises(ValueError, match="num_samples"):
        rollout(model, sp_tok, task, prompts, num_samples=0, **kw)
    with pytest.raises(ValueError, match="tool"):
        rollout(model, sp_tok, task, prompts, **{**kw, "tool": None})
    with pytest.raises(ValueError, match="tool must be callable"):
        rollout(model, sp_tok, task, prompts, **{**kw, "tool": 42})
    with pytest.raises(ValueError, match="stateful"):
        rollout(model, sp_tok, task, prompts, stateful=True, **kw)
    with pytest.raises(ValueError, match="prompts_ids"):
        rollout(model, sp_tok, task, [[]], **kw)
    with pytest.raises(ValueError, match="max_tool_calls"):
        rollout(model, sp_tok, task, prompts, max_tool_calls=-1, **kw)
    with pytest.raises(ValueError, match="no token of the vocabulary"):
        rollout(model, sp_tok, task, prompts, tool_stop="§", **kw)  # not in the vocabulary


def test_rollout_spec_checks_name_the_config_key(sp_tok):
    from mojax.rollout import FINISH_REASONS, RolloutSpec
    from mojax.sampling.state import FINISH_REASONS as SAMPLER

    task = CalculatorTask()
    spec = RolloutSpec.create(sp_tok, task, max_new_tokens=8, max_turns=3, max_obs_tokens=4)
    # defaults resolved once: R = 3 turns + 2 observations, calls = turns - 1, eos from the tokenizer
    assert spec.max_response_len == 3 * 8 + 2 * 4 and spec.max_tool_calls == 2
    assert spec.eos_ids == (sp_tok.eos_token_id,) and spec.stop == tool_stop_spec(sp_tok, "</calc>")
    assert spec.sampler_stop_ids == [sp_tok.eos_token_id, *spec.stop.token_ids]
    assert spec.multi_turn and not spec.replace(max_tool_calls=0).multi_turn
    greedy = spec.replace(temperature=0.0)  # no rescan: the same StopSpec object
    assert greedy.stop is spec.stop and greedy.temperature == 0.0
    for field, value, key in [
        ("max_new_tokens", 0, "config.rollout.max_new_tokens"),
        ("max_turns", 0, "config.rollout.max_turns"),
        ("max_tool_calls", -1, "config.rollout.max_tool_calls"),
        ("max_response_len", 0, "config.rollout.max_response_len"),
        ("temperature", -1.0, "config.rollout.temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_k", -2, "top_k"),
        ("draw", "multinomial", "draw"),
        ("tool_timeout_s", 0.0, "config.rollout.tool_timeout_s"),
        ("decode_segment", -1, "RolloutSpec.decode_segment"),
        ("max_obs_tokens", 1.5, "RolloutSpec.max_obs_tokens"),
    ]:
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            spec.replace(**{field: value})
    # the rollout's finish reasons start with the sampler's (one source for "stop" / "length")
    assert FINISH_REASONS[:2] == tuple(r for r in SAMPLER if r != "running")
    assert set(FINISH_REASONS[2:]) == {"max_turns", "max_tool_calls", "budget"}
