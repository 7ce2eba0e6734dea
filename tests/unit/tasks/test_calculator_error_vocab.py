"""The calculator's error observations encode exactly with the calculator task's own tokenizer.

The tokenizer is the one a default run builds (``mojax.rl.builders.build_tokenizer`` on the default
calculator config, ``tokenizer.path="build"``). Before this fix its 90 pieces held only the
characters of the prompts and SFT transcripts, so ``Error: unsupported syntax`` came back as
``" ⁇ rror ⁇  unsupporte ⁇ "``.
"""

import ast
import importlib.util
import inspect
import pathlib
import random
import string

import pytest
from mojax_test_utils import run_spec

from mojax.rollout.observations import malformed_message
from mojax.rollout.tools import calculator as calc_lib
from mojax.rollout.tools.calculator import Calculator
from mojax.tasks import build_task
from mojax.tasks.calculator import CalculatorTask
from mojax.tasks.framework.base import TAGS
from mojax.tasks.framework.vocab import REQUIRED_CHARS, build_sentencepiece

REPO = pathlib.Path(__file__).resolve().parents[3]

# one expression per ``raise CalculatorError`` site of mojax/rollout/tools/calculator.py
ERROR_EXPRESSIONS = {
    "not a string": 12,
    "empty": " = ",
    "too long": "1+" * 300 + "1",
    # the only non-ASCII text this model can write: an <unk> id, decoded by sentencepiece as " ⁇ "
    "non-ascii": "2 * 3 \u2047 ",
    "non-printable": "1 + 2\x00",
    "syntax": "1 +",
    "unclosed": "(1 + 2",
    "parse nesting": ("(" * 9000 + "1" + ")" * 9000, dict(max_length=20000)),
    "eval nesting": "-" * 400 + "1",
    "digits": ("9" * 1200, dict(max_length=5000)),
    "inf": "1e308 * 10",
    "literal": "'a' * 2",
    "syntax node": "1 < 2",
    "name": "x + 1",
    "product digits": "10**900 * 10**900",
    "exponent": "2 ** 20000",
    "power digits": "7 ** 9999",
    "zero": "1 / 0",
    "overflow": "10.0 ** 400",
    "complex": "(-8) ** 0.5",
    "call of non-name": "(1)(2)",
    "function": "open('/etc/passwd')",
    "keywords": "sqrt(x=4)",
    "arity": "abs(1, 2)",
    "factorial sign": "factorial(-1)",
    "factorial size": "factorial(401)",
    "gcd": "gcd(1.5, 2)",
    "round": "round(1.5, 1.5)",
    "math domain": "sqrt(-1)",
}
# guards no finite input reaches (every operation's result is checked for inf first; no listed
# function returns a non-number; max_depth stops the evaluator long before Python's recursion limit)
UNREACHABLE = ("undefined result (nan)", "result is not a real number (", "expression too deeply")


def _default_config():
    spec = importlib.util.spec_from_file_location("cfg_grpo", REPO / "configs" / "grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """The default calculator run's own tokenizer, built the way the trainer builds it."""
    from mojax.rl import builders

    c = _default_config()
    assert c.task.name == "calculator" and c.tokenizer.path == "build"
    task = build_task(c.task)
    splits = task.load_splits(c.task, seed=c.seed)
    return builders.build_tokenizer(run_spec(c), task, splits, str(tmp_path_factory.mktemp("run")))


def _errors() -> list[str]:
    outs = []
    for name, expr in ERROR_EXPRESSIONS.items():
        expr, kwargs = expr if isinstance(expr, tuple) else (expr, {})
        result = Calculator(**kwargs).run(expr)
        assert result.exit_reason == "error", (name, result)
        outs.append(result.output)
    return outs


def _message_prefixes() -> set[str]:
    """The literal text each ``raise CalculatorError(...)`` of the tool's source starts with."""
    prefixes = set()
    for node in ast.walk(ast.parse(inspect.getsource(calc_lib))):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        if getattr(node.exc.func, "id", "") != "CalculatorError":
            continue
        arg = node.exc.args[0]
        parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
        head = parts[0]
        prefixes.add(head.value if isinstance(head, ast.Constant) else "")
    return prefixes


def test_every_error_message_is_exercised():
    """The table above reaches every message of the tool (a new message needs a new row)."""
    outputs = _errors()
    prefixes = _message_prefixes()
    assert len(prefixes) >= 20
    for prefix in prefixes:
        if prefix.startswith(UNREACHABLE):
            continue
        assert any(prefix in out for out in outputs), (
            f"no row of ERROR_EXPRESSIONS gives {prefix!r}"
        )


def test_calculator_errors_encode_exactly(tok):
    obs = CalculatorTask().format_observation
    for text in _errors() + [malformed_message("</calc>")]:
        assert tok.decode(tok.encode(text)) == text, text
        assert tok.decode(tok.encode(obs(text))) == obs(text)
        assert 1 not in tok.encode(text), (text, "encodes to <unk>")


def test_errors_on_any_decodable_text_encode_exactly(tok):
    """Whatever the model writes between <calc> and </calc> is a decode of its own token ids; the
    calculator's answer to it (error or value) must encode back exactly (unk pieces included)."""
    rng = random.Random(0)
    n_err = 0
    for _ in range(400):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 12))]
        text = tok.decode(ids)
        out = Calculator().run(text).output
        n_err += out.startswith("Error:")
        assert tok.decode(tok.encode(out)) == out, (ids, text, out)
    assert n_err > 100  # random ids are mostly not arithmetic: the error path is what ran


def test_required_chars_are_always_in_the_vocabulary(tmp_path):
    path = build_sentencepiece(["Compute 1+2."], tmp_path / "v.model", vocab_size=256)
    from mojax.models import load_tokenizer

    t = load_tokenizer(path)
    rng = random.Random(1)
    for _ in range(200):
        s = "".join(rng.choice(REQUIRED_CHARS) for _ in range(rng.randint(0, 30)))
        assert t.decode(t.encode(s)) == s and 1 not in t.encode(s), repr(s)
    assert set(string.ascii_letters) <= set(REQUIRED_CHARS)


def test_required_chars_take_no_merge_away(tok, tmp_path):
    """The default run's corpus tokenises into the same pieces with and without required_chars."""
    import sentencepiece as spm

    from mojax.rl import builders

    c = _default_config()
    task = build_task(c.task)
    texts = builders.corpus_texts(run_spec(c), task, task.load_splits(c.task, seed=c.seed))
    kw = dict(vocab_size=int(c.tokenizer.vocab_size), user_symbols=TAGS)
    bare = spm.SentencePieceProcessor(
        model_file=build_sentencepiece(texts, tmp_path / "bare.model", required_chars="", **kw)
    )
    assert tok.vocab_size > bare.get_piece_size()
    for text in texts[::7]:
        assert tok.sp.encode(text, out_type=str) == bare.encode(text, out_type=str)


def test_too_small_vocabulary_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=10 is below the 17 pieces this corpus"):
        build_sentencepiece(["Compute 1+2."], tmp_path / "v.model", vocab_size=10)
