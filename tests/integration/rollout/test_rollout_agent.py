"""Multi-turn rollout driver on a scripted model through the real sampler + append path.

The "scripted model" is the tiny Qwen (random weights) whose next-token logits get a bias of
``BIAS`` on a scripted token, looked up by (RoPE position, current token): greedy decoding then
emits the chosen transcript, while every logit still depends on the whole context through the
real attention over the KV cache. References: the expected transcript built independently from
the script and the real Calculator, and a teacher-forced forward of the same model over the final
concatenated sequence without any cache (log-probs within 1e-4, fp32).
"""

import dataclasses
import threading
import time
import zlib

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mojax.models as mm
from mojax.models.qwen import Qwen
from mojax.rollout import RolloutSpec, rollout, run_rollout, tool_stop_spec
from mojax.rollout.observations import TRUNCATION_MARK, encode_observation, malformed_message
from mojax.rollout.tools import Calculator
from mojax.sampling import api as mojax_api
from mojax.tasks.calculator import CalculatorTask, Problem, sft_demonstrations
from mojax.tasks.framework.vocab import build_sentencepiece

ATOL = 1e-4
BIAS = 4.0
VOCAB = 128  # >= the sentencepiece vocabularies; one model shape for every test (compiles)
WIDTH = 160  # teacher-forcing width (one compile)
TAGS = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
# Fixed shapes for every rollout of this file (R, S, the prompt bucket; P = 6 rows): the sampler
# compiles once per shape, and compiles dominate the runtime on CPU.
SETTINGS = dict(
    max_new_tokens=24,
    max_response_len=72,
    max_turns=3,
    max_obs_tokens=16,
    max_total_len=192,
    min_prompt_bucket=64,
    min_obs_bucket=16,  # every append (observations, empty ones) is one 16-slot program
    false_stop_bucket=16,
)


@flax.struct.dataclass
class ScriptedModel(mm.QwenModel):
    """``QwenModel`` whose logits add ``BIAS`` on ``table[position, token % W]`` (-1 = no bias).

    The forward returns hidden states with two extra channels (the RoPE position and the token
    id) so that ``Qwen.logits`` calls, which only see the last hidden state, can look the script
    up; the sampler only uses ``apply_fn``, ``params`` and ``config``.
    """

    table: jax.Array = None  # int32 [T, W]

    @property
    def apply_fn(self):
        base = Qwen(self.config).apply
        table, vocab = self.table, self.config.vocab_size

        def apply(variables, x, attention_mask=None, positions=None, cache=None, **kw):
            if kw.get("method") is Qwen.logits:
                logits = base(variables, x[..., :-2], method=Qwen.logits)
                pos = jnp.clip(x[..., -2].astype(jnp.int32), 0, table.shape[0] - 1)
                target = table[pos, x[..., -1].astype(jnp.int32) % table.shape[1]]
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


@jax.jit
def _forward(model, toks, mask):
    return model.apply_fn({"params": model.params}, toks, mask)


def teacher_forced(model, seq):
    """fp64 log-softmax [len(seq) - 1, V] of a full forward without cache (row i: seq[i + 1])."""
    toks = np.zeros((1, WIDTH), np.int32)
    toks[0, : len(seq)] = seq
    mask = (np.arange(WIDTH) < len(seq))[None]
    logits = np.asarray(_forward(model, jnp.asarray(toks), jnp.asarray(mask)))[0]
    logits = logits.astype(np.float64)[: len(seq) - 1]
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def calc_texts(n=200):
    task = CalculatorTask()
    demos = sft_demonstrations(task.load("train", n, seed=0))
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    texts = [chat.format(d.example.messages[0]["content"]) + d.response for d in demos]
    # the observations the model will see (errors included), so the vocab covers their characters
    texts += [malformed_message("</calc>"), "syntax error: invalid syntax", TRUNCATION_MARK]
    texts += ["Error: exponent larger than 10000", "unsupported character (U+2047)"]
    return texts


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
            text = malformed_message(task.tool_stop) if call is None else tool(call).observation
            obs, _ = encode_observation(
                tok, task, text, SETTINGS["max_obs_tokens"], trusted=call is None
            )
            obs_spans.append((len(seq) - len(prompt), len(seq) - len(prompt) + len(obs)))
            seq += obs
            policy += [False] * len(obs)
    return seq, policy, obs_spans


def scripted(tok, task, prompts, scripts, tool, seed=1, variant="tiny-qwen3", vocab=VOCAB, w=VOCAB):
    """The tiny Qwen scripted to emit ``scripts`` (policy segments per row) after ``prompts``.

    Keys are (position, token), so two rows may clash; each prompt gets the fewest leading filler
    tokens that avoid a clash (prompts are arbitrary token lists). Returns (model, prompts, built).
    """
    cfg = mm.get_variant(variant, dtype="float32", vocab_size=vocab)
    table = np.full((WIDTH, w), -1, np.int32)
    filler = tok.encode(" ")[0]
    out_prompts, built = [], []
    for prompt, script in zip(prompts, scripts, strict=True):
        for k in range(64):
            p = [filler] * k + list(prompt)
            seq, policy, spans = build(tok, task, p, script, tool)
            keys = [(i - 1, seq[i - 1] % w, seq[i]) for i in range(1, len(seq)) if policy[i]]
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


def prompts_for(tok, task, problems):
    return [tok.encode(task.build_prompt(task.example(p, "x"), tok)) for p in problems]


def padded(tok, text, n):
    """``text`` preceded by digits so that the segment is exactly ``n`` tokens (a long turn)."""
    ids = tok.encode(text)
    return tok.encode("1" * (n - len(ids))) + ids


def check_row(res, row, model, seq, policy, spans, plen, upto=None):
    """Tokens, loss mask, zero log-probs on observations / padding, teacher-forced log-probs."""
    seq, policy = seq[: plen + upto] if upto else seq, policy[: plen + upto] if upto else policy
    n = int(res.lengths[row])
    assert res.tokens[row, :n].tolist() == seq[plen:], row
    mask = res.loss_mask[row, :n]
    np.testing.assert_array_equal(mask, np.asarray(policy[plen:]))
    assert not res.loss_mask[row, n:].any() and not res.logprobs[row, n:].any()
    for a, b in spans:
        assert not mask[a:b].any() and not res.logprobs[row, a:b].any()
    logp = teacher_forced(model, seq)
    want = logp[np.arange(plen - 1, len(seq) - 1), seq[plen:]]
    np.testing.assert_allclose(res.logprobs[row, :n][mask], want[mask], atol=ATOL, rtol=0)
    assert res.logprobs[row, :n][mask].max() < 0  # real log-probs, not a forced 0


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = build_sentencepiece(
        calc_texts(), tmp_path_factory.mktemp("sp") / "calc.model", user_symbols=TAGS
    )
    return mm.load_tokenizer(path)


@pytest.fixture(scope="module")
def scene(tok):
    """Six scripted rows exercising every path of the driver (exact single-token stop)."""
    task, calc = CalculatorTask(), Calculator()
    end = [tok.eos_token_id]
    problems = [Problem(12, "*", 34, "hard"), Problem(5, "+", 7, "easy")]
    problems += [Problem(23, "-", 9, "medium"), Problem(817, "*", 7, "hard")]
    problems += [Problem(99, "*", 99, "hard"), Problem(3, "*", 4, "easy")]
    scripts = [
        # 0: one call, then the answer
        ["<calc>12*34</calc>", tok.encode("<answer>408</answer>") + end],
        # 1: no call; an unterminated tag at the end is text, not a call
        [tok.encode("<answer>12</answer><calc>1+") + end],
        # 2: two calls
        ["<calc>23-9</calc>", "<calc>14*2</calc>", tok.encode("<answer>28</answer>") + end],
        # 3: malformed call (no opening tag): an error observation, counted
        ["817*7</calc>", tok.encode("<answer>5719</answer>") + end],
        # 4: long turns and huge results (observations truncated): the second call's observation
        #    does not fit in R = 72 -> budget
        [padded(tok, "<calc>99999**9</calc>", 24), padded(tok, "<calc>99999**9</calc>", 24), []],
        # 5: unicode outside the vocabulary (unk pieces) and a huge expression: tool errors
        ["<calc>３×４</calc>", "<calc>9**9**9**9</calc>", tok.encode("<answer>1</answer>") + end],
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, built = scripted(tok, task, prompts, scripts, calc.run)
    return task, calc, model, prompts, built


def test_scripted_multi_turn_masks_counts_and_matches_teacher_forcing(tok, scene):
    task, calc, model, prompts, built = scene
    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **SETTINGS
    )
    assert res.stop.exact and res.stop.token_ids == tuple(tok.encode("</calc>"))
    assert res.n_calls.tolist() == [1, 0, 2, 1, 1, 2]
    assert res.finish_reason == ["stop", "stop", "stop", "stop", "budget", "stop"]
    c = res.counters
    assert c["malformed"] == 1 and c["tool_calls"] == 7 and c["tool_calls_run"] == 7
    assert c["tool_errors"] == 2 and c["timeouts"] == 0
    assert c["obs_truncated"] == sum(t.obs_truncated for turns in res.turns for t in turns) >= 2
    for row, (seq, policy, spans) in enumerate(built):
        upto = spans[0][1] + 24 if row == 4 else None  # row 4 ends at its second </calc>
        check_row(
            res, row, model, seq, policy, spans[:1] if row == 4 else spans, len(prompts[row]), upto
        )
        turns = res.turns[row]
        executed = [t for t in turns if t.executed]
        assert len(executed) == res.n_calls[row]
        for t, (a, b) in zip(executed, spans, strict=False):
            assert t.end == a and t.obs_tokens == b - a
    # transcripts parse; tool outputs appear
    assert (
        CalculatorTask.parse_answer(res.texts[0]) == 408 and "<output>408</output>" in res.texts[0]
    )
    assert CalculatorTask.parse_answer(res.texts[1]) == 12 and res.turns[1][0].ended_by == "stop"
    assert "<output>14</output>" in res.texts[2] and "<output>28</output>" in res.texts[2]
    assert [t.call for t in res.turns[2]] == ["23-9", "14*2", None]
    assert res.turns[3][0].malformed and res.turns[3][0].exit_reason == "malformed"
    assert res.turns[3][0].observation in res.texts[3]
    assert res.turns[3][0].observation.startswith("<output>Error: malformed")
    t4 = res.turns[4]
    assert (
        t4[0].obs_truncated and t4[0].obs_tokens <= 16 and t4[0].observation.endswith("</output>")
    )
    assert t4[0].observation.startswith("<output>9999") and TRUNCATION_MARK in t4[0].observation
    assert t4[0].observation.endswith("9999</output>")  # head and tail of 999..99**9 kept
    assert t4[1].ended_by == "budget" and not t4[1].executed and t4[1].call == "99999**9"
    assert [t.exit_reason for t in res.turns[5][:2]] == ["error", "error"]
    assert "exponent" in res.turns[5][1].error


def test_spec_built_once_gives_the_same_rollout(tok, scene, monkeypatch):
    """``run_rollout`` with a ``RolloutSpec`` built once (the trainer's path) equals the one-call
    ``rollout`` wrapper, and never scans the vocabulary for the tool stop again."""
    task, calc, model, prompts, built = scene
    spec = RolloutSpec.create(tok, task, temperature=0.0, **SETTINGS)

    def no_rescan(*args, **kwargs):
        raise AssertionError("tool_stop_spec called after the spec was built")

    monkeypatch.setattr("mojax.rollout.stops.tool_stop_spec", no_rescan)
    key = jax.random.key(0)
    a = run_rollout(spec, model, tok, task, prompts, key=key, tool=calc)
    b = run_rollout(spec, model, tok, task, prompts, key=key, tool=calc)
    monkeypatch.undo()
    ref = rollout(model, tok, task, prompts, key=key, temperature=0.0, tool=calc, **SETTINGS)
    for res in (a, b):
        for field in ("tokens", "logprobs", "loss_mask", "lengths", "n_calls"):
            np.testing.assert_array_equal(getattr(res, field), getattr(ref, field))
        assert res.finish_reason == ref.finish_reason and res.counters == ref.counters
        assert [[t.call for t in ts] for ts in res.turns] == [
            [t.call for t in ts] for ts in ref.turns
        ]


class RecordingSampler:
    """A ``mojax.sampling.Sampler`` of its own (not the in-graph class): forwards every call to an
    in-graph sampler and records it, so the test sees what the rollout asks of its engine."""

    def __init__(self, model):
        from mojax.sampling import InGraphSampler

        self.inner, self.calls = InGraphSampler.of(model), []

    @property
    def row_sharding(self):
        self.calls.append("row_sharding")
        return self.inner.row_sharding

    def update_weights(self, params):
        self.calls.append("update_weights")
        self.inner.update_weights(params)

    def generate(self, prompt_tokens, **kwargs):
        self.calls.append("generate")
        return self.inner.generate(prompt_tokens, **kwargs)

    def append_and_continue(self, state, obs_tokens, obs_lengths, resume, **kwargs):
        self.calls.append("append_and_continue")
        return self.inner.append_and_continue(state, obs_tokens, obs_lengths, resume, **kwargs)


def test_the_rollout_runs_on_any_sampler(tok, scene):
    """The driver reaches the engine only through the sampler interface: a sampler of another
    class gives the same rollout, with one ``generate`` and one ``append_and_continue`` per
    further decode call."""
    task, calc, model, prompts, built = scene
    spec = RolloutSpec.create(tok, task, temperature=0.0, **SETTINGS)
    key = jax.random.key(0)
    rec = RecordingSampler(model)
    got = run_rollout(spec, rec, tok, task, prompts, key=key, tool=calc)
    ref = run_rollout(spec, model, tok, task, prompts, key=key, tool=calc)
    for field in ("tokens", "logprobs", "loss_mask", "lengths", "n_calls"):
        np.testing.assert_array_equal(getattr(got, field), getattr(ref, field))
    assert rec.calls[:2] == ["row_sharding", "generate"]
    appends = rec.calls.count("append_and_continue")
    assert rec.calls.count("generate") == 1 and appends == got.counters["decode_calls"] - 1 > 0


class SlowTool:
    """The Calculator behind a delay that differs per call (so calls finish out of submission
    order), recording how many decode calls were dispatched while each call was running."""

    def __init__(self, decode_calls: list[int]):
        self.calc, self.decode_calls, self.in_flight = Calculator(), decode_calls, []
        self.lock = threading.Lock()

    def run(self, text):
        start = self.decode_calls[0]
        time.sleep(0.15 + 0.03 * (zlib.crc32(text.encode()) % 5))
        with self.lock:
            self.in_flight.append(self.decode_calls[0] - start)
        return self.calc.run(text)


def test_tools_overlap_decoding_and_give_the_serial_rollout(tok, scene, monkeypatch):
    """Decode segments of 8 tokens: a row's call starts at the end of the segment it stopped in,
    while the other rows decode on. The rollout is bitwise the serial one (calls run once every
    row has stopped), whatever order the calls finish in; both match the scripted transcripts
    and the teacher-forced log-probs as the unsegmented rollout does."""
    task, calc, model, prompts, built = scene
    kw = {**SETTINGS, "false_stop_bucket": 1, "decode_segment": 8}
    decode_calls = [0]
    append = mojax_api.append_and_continue

    def counting_append(*args, **kwargs):
        decode_calls[0] += 1
        return append(*args, **kwargs)

    monkeypatch.setattr(mojax_api, "append_and_continue", counting_append)
    spec = RolloutSpec.create(tok, task, temperature=0.0, **kw)
    slow = SlowTool(decode_calls)
    over = run_rollout(spec, model, tok, task, prompts, key=jax.random.key(0), tool=slow)
    serial = spec.replace(overlap_tools=False)
    ser = run_rollout(serial, model, tok, task, prompts, key=jax.random.key(0), tool=calc)
    # the overlap happened: decode segments were dispatched while calls were running
    assert over.counters["segment_resumes"] >= 2 and max(slow.in_flight) >= 1, slow.in_flight
    for field in ("tokens", "logprobs", "loss_mask", "lengths", "n_calls"):
        np.testing.assert_array_equal(getattr(over, field), getattr(ser, field), err_msg=field)
    assert over.finish_reason == ser.finish_reason and over.texts == ser.texts
    assert over.counters == ser.counters

    def strip(turns):
        return [[dataclasses.replace(t, duration_s=0.0) for t in ts] for ts in turns]

    assert strip(over.turns) == strip(ser.turns)
    # the same rollout as without segments (test above): transcripts, calls, finish reasons
    assert over.n_calls.tolist() == [1, 0, 2, 1, 1, 2]
    assert over.finish_reason == ["stop", "stop", "stop", "stop", "budget", "stop"]
    for row, (seq, policy, spans) in enumerate(built):
        upto = spans[0][1] + 24 if row == 4 else None
        check_row(
            over, row, model, seq, policy, spans[:1] if row == 4 else spans, len(prompts[row]), upto
        )


@pytest.mark.parametrize(
    "limits, reasons",
    [
        (
            dict(max_tool_calls=1),
            ["stop", "stop", "max_tool_calls", "stop", "max_tool_calls", "max_tool_calls"],
        ),
        (dict(max_turns=2), ["stop", "stop", "max_turns", "stop", "max_turns", "max_turns"]),
    ],
)
def test_turn_and_call_limits_end_rows_at_the_extra_call(tok, scene, limits, reasons):
    task, calc, model, prompts, built = scene
    kw = {**SETTINGS, **limits}
    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **kw
    )
    assert res.finish_reason == reasons
    assert res.n_calls.tolist() == [1, 0, 1, 1, 1, 1]
    for row in (2, 4, 5):  # ends right after the second call's stop token, nothing appended
        seq, policy, spans = built[row]
        second = len(tok.encode("<calc>14*2</calc>")) if row == 2 else None
        second = second or (24 if row == 4 else len(tok.encode("<calc>9**9**9**9</calc>")))
        check_row(res, row, model, seq, policy, spans[:1], len(prompts[row]), spans[0][1] + second)
        assert res.turns[row][-1].ended_by == reasons[row] and not res.turns[row][-1].executed


def test_multi_token_stop_fallback_rejects_false_candidates(tmp_path):
    """``</calc>`` in three pieces: the sampler stops on '>' (candidate), the host confirms.

    A '>' in ``5>3`` is a false candidate: the row resumes with an empty append and the final
    transcript and log-probs are exactly those of decoding it from scratch.
    """
    tags = ("<calc>", "<output>", "</output>", "<answer>", "</answer>")
    path = build_sentencepiece(calc_texts(), tmp_path / "sp.model", user_symbols=tags)
    tok = mm.load_tokenizer(path)
    assert len(tok.encode("</calc>")) > 1
    task, calc, end = CalculatorTask(), Calculator(), [tok.eos_token_id]
    problems = [Problem(12, "*", 34, "hard"), Problem(5, "+", 7, "easy")]
    problems += [Problem(23, "-", 9, "medium"), Problem(817, "*", 7, "hard")]
    problems += [Problem(99, "*", 99, "hard"), Problem(3, "*", 4, "easy")]
    scripts = [
        ["5>3<calc>12*34</calc>", tok.encode("3>2<answer>408</answer>") + end],
        [tok.encode("<answer>1>2</answer>") + end],
        ["<calc>2+3</calc>", tok.encode("<answer>5</answer>") + end],
        [tok.encode("<answer>7</answer>") + end],
        # false candidates until the turn budget runs out: length
        [tok.encode("1>" * 12 + "1>1")],
        ["<calc>4>3</calc>", tok.encode("<answer>1</answer>") + end],
    ]
    prompts = prompts_for(tok, task, problems)
    model, prompts, built = scripted(tok, task, prompts, scripts, calc.run)
    kw = {**SETTINGS, "false_stop_bucket": 1}  # an empty append takes 1 cache slot
    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **kw
    )
    spec = tool_stop_spec(tok, "</calc>", exclude=(tok.eos_token_id,))
    assert not res.stop.exact and res.stop == spec and tok.encode(">")[0] in spec.token_ids
    assert res.finish_reason == ["stop", "stop", "stop", "stop", "length", "stop"]
    assert res.n_calls.tolist() == [1, 0, 1, 0, 0, 1]
    assert [t.false_stops for t in res.turns[0]] == [1, 1] and res.turns[1][0].false_stops == 1
    assert res.turns[4][0].false_stops == 12 and res.turns[5][0].false_stops == 1
    assert res.counters["false_stops"] == 1 + 1 + 1 + 12 + 1
    for row, (seq, policy, spans) in enumerate(built):
        upto = 24 if row == 4 else None
        check_row(res, row, model, seq, policy, spans, len(prompts[row]), upto)
    assert "<output>408</output>" in res.texts[0] and "<output>5</output>" in res.texts[2]
    # 16-slot empty appends: row 4's twelve rejected candidates exhaust the S = 192 slot cache
    res = rollout(
        model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, tool=calc, **SETTINGS
    )
    assert res.finish_reason[4] == "budget" and res.counters["cache_exhausted"] == 1
    assert res.finish_reason[:2] == ["stop", "stop"] and res.n_calls[0] == 1


@pytest.mark.slow
def test_multi_token_stop_with_the_qwen2_tokenizer(qwen2_tokenizer_dir):
    """``</code>`` is ``</``/``)</`` + ``code`` + ``>`` for Qwen2: candidates are ``>`` only, so the
    ``>`` of every opening ``<code>`` is a false stop. Tiny Qwen2 with the full 151646-token vocab,
    the real PythonSandbox with one stateful session per row, ``<|im_end|>`` as eos."""
    from mojax.rollout.tools import PythonSandbox
    from mojax.tasks.framework.base import Example
    from mojax.tasks.math import MathTask

    tok = mm.load_tokenizer(qwen2_tokenizer_dir)
    task = MathTask(tool_format="tags")
    sandbox = PythonSandbox(timeout_s=10, memory_mb=256)
    # reference outputs from one real session per row, in call order (row 2 defines x, then
    # prints it: only a stateful session, as ToRL's, sees the definition)
    session = sandbox.session()
    ref = {code: session.run(code) for code in ("x = 6*7", "print(x)")}
    ref["print(12*34)"] = sandbox.run("print(12*34)")
    assert ref["print(x)"].output == "42\n"
    end = [tok.eos_token_id]
    questions = ["What is 12*34?", "What is 3+4?", "Print hi."]
    prompts = [
        tok.encode(task.build_prompt(Example(str(i), ({"role": "user", "content": q},), "0"), tok))
        for i, q in enumerate(questions)
    ]
    scripts = [
        ["Let me compute.\n<code>print(12*34)</code>", tok.encode("So \\boxed{408}.") + end],
        [tok.encode("\\boxed{7}") + end],
        ["<code>x = 6*7</code>", "<code>print(x)</code>", tok.encode("done") + end],
    ]
    model, prompts, built = scripted(
        tok, task, prompts, scripts, ref.get, variant="tiny-qwen2", vocab=tok.vocab_size, w=512
    )
    kw = dict(key=jax.random.key(0), temperature=0.0, tool=sandbox, stateful=True)
    res = rollout(model, tok, task, prompts, **kw, **SETTINGS)
    assert not res.stop.exact and tok.encode(">")[0] in res.stop.token_ids
    assert res.finish_reason == ["stop", "stop", "stop"] and res.n_calls.tolist() == [1, 0, 2]
    # every policy '>' that does not end a call is a false stop (the '>' of an opening <code>,
    # unless BPE merged it with what follows, as in '>x')
    gt = tok.encode(">")[0]
    n_gt = sum(seq[i] == gt for seq, pol, _ in built for i in range(len(seq)) if pol[i])
    assert res.counters["false_stops"] == n_gt - 3 >= 1
    for row, (seq, policy, spans) in enumerate(built):
        check_row(res, row, model, seq, policy, spans, len(prompts[row]))
    assert "<output>408" in res.texts[0] and "\\boxed{408}" in res.texts[0]
    assert [t.tool_output for t in res.turns[2][:2]] == ["", "42\n"]
    assert "<output></output>" in res.texts[2] and "<output>42</output>" in res.texts[2]


@pytest.mark.parametrize("limits", [dict(max_turns=1), dict(max_tool_calls=0)])
def test_no_calls_allowed_still_stops_at_the_tool_stop(tok, scene, limits):
    """Without a call budget the tool stop still ends the row (the model never writes past a
    call it cannot get an answer to); no tool is needed."""
    task, calc, model, prompts, built = scene
    kw = {**SETTINGS, **limits}
    res = rollout(model, tok, task, prompts, key=jax.random.key(0), temperature=0.0, **kw)
    reason = "max_turns" if "max_turns" in limits else "max_tool_calls"
    assert res.finish_reason == [reason, "stop", reason, reason, reason, reason]
    assert res.n_calls.tolist() == [0] * 6 and "tool_calls" not in res.counters
    for row, (seq, policy, spans) in enumerate(built):
        upto = spans[0][0] if spans else None
        check_row(res, row, model, seq, policy, [], len(prompts[row]), upto)
