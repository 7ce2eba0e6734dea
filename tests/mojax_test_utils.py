"""Helpers shared by several test files (never imported from a ``test_*.py`` file).

* ``hf_config`` / ``build_hf``: tiny transformers Qwen2 / Qwen3 models with every weight random (the
  independent reference of the parity tests; torch is imported lazily);
* ``reference_probs``: a float64 numpy sampling distribution written from the processors' definitions;
* ``load_config`` / ``shrink``: a method config file by name, and the same run made tiny;
* ``compile_cache_env``: a subprocess's compilation cache (the session's, see ``conftest.py``);
* ``cluster_tail``: a failed ``launch/local_cluster.py`` run's last lines, per process.
"""

import contextlib
import importlib.util
import os
import pathlib
import subprocess

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 128
ATOL = 1e-4  # logits parity with transformers (never loosened)


def hf_config(model_type, heads, kv_heads, tie, head_dim=None, rope_scaling=None, hidden=64):
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        attn_implementation="eager",
    )
    if head_dim is not None:
        kw["head_dim"] = head_dim
    if rope_scaling is not None:
        kw["rope_scaling"] = rope_scaling
    import transformers

    cls = transformers.Qwen3Config if model_type == "qwen3" else transformers.Qwen2Config
    return cls(**kw)


def build_hf(config, seed=0):
    """A transformers causal LM with every parameter (norms, biases too) random."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def reference_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, logprobs=None):
    """float64 [V] sampling distribution of one row of logits (``logprobs`` ignored)."""
    z = np.asarray(logits, np.float64)
    if temperature == 0.0:
        out = np.zeros_like(z)
        out[np.argmax(z)] = 1.0
        return out
    z = z / temperature
    keep = np.ones(z.shape, bool)
    if top_k:
        kth = np.sort(z)[::-1][min(top_k, z.size) - 1]
        keep &= z >= kth
    if top_p < 1.0:
        p = np.where(keep, np.exp(z - z.max()), 0.0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        n = int(np.sum(cum - p[order] < top_p))  # sorted prefix until the mass reaches top_p
        keep &= z >= z[order[n - 1]]
    if min_p > 0.0:
        p = np.where(keep, np.exp(z - z.max()), 0.0)
        p /= p.sum()
        keep &= p >= min_p * p.max()
    p = np.where(keep, np.exp(z - z.max()), 0.0)
    return p / p.sum()


def load_config(name, arg=None):
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", REPO / "configs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def run_spec(c):
    """The ``RunSpec`` of config ``c`` (validated without the device checks)."""
    from mojax.spec import validate

    return validate(c, num_devices=None)


def shrink(c):
    """The same run, smaller: 2 RL steps, a few prompts and samples, a short warm start."""
    c.steps = min(c.steps, 2)
    c.checkpoint_every = c.eval_every = 1
    c.rollout.prompts_per_step = 2
    c.rollout.num_samples = 2
    c.task.num_eval = min(c.task.num_eval, 4)
    c.task.num_validation = 0  # = num_eval
    c.sft.steps = min(c.sft.steps, 20)
    c.sft.batch_size = 16
    c.sft.num_examples = 64
    c.task.num_train = min(c.task.num_train, 64)
    c.eval.ks = (1,)
    c.eval.num_samples = 1
    c.ppo.num_minibatches = c.ppo.num_microbatches = 1
    return c


def padded_batch(seed=0, t=12):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, VOCAB, (3, t)).astype(np.int32)
    mask = np.ones((3, t), np.int32)
    mask[1, :4] = 0  # left padding
    mask[2, t - 5 :] = 0  # right padding
    return tokens, mask


def hf_logits(model, tokens, mask):
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    import torch

    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(tokens, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            position_ids=torch.tensor(positions, dtype=torch.long),
        )
    return out.logits.float().numpy()


def max_masked_diff(a, b, mask):
    return float(np.abs(np.where(mask[..., None].astype(bool), a - b, 0.0)).max())


def compile_cache_env(default_dir) -> dict[str, str]:
    """The environment of a subprocess run: the session's compilation cache where there is one,
    else ``default_dir``; every program kept."""
    return {
        "JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR")
        or str(default_dir),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def cluster_tail(text: str, lines: int = 40, width: int = 300) -> str:
    """The last ``lines`` lines of each process of a ``launch/local_cluster.py`` run's output
    (``[i] ...``, each cut at ``width`` characters) and the launcher's own (which process failed,
    and how): a failure message that shows the process that died, not only the one that timed
    out waiting for it."""
    groups: dict[str, list[str]] = {}
    for line in text.splitlines():
        tag = line.split(" ", 1)[0] if line.startswith("[") else "[?]"
        groups.setdefault(tag, []).append(line[:width])
    return "\n".join("\n".join(g[-lines:]) for _, g in sorted(groups.items()))


@contextlib.contextmanager
def persistent_compilation_cache(path):
    """jax's persistent compilation cache in ``path`` (the session's where ``conftest.py`` made
    one) for the block. The setting is process-wide, so it is put back and the cache closed
    afterwards: the tests that follow in the same process compile as before."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = os.environ.get("JAX_COMPILATION_CACHE_DIR") or path

    before = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
    )
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
        compilation_cache.reset_cache()


def continuous_prompts(seed=0):
    """4 right-padded prompts of 10, 4, 7 and 9 tokens (ids < 256) for the continuous sampler tests:
    ``(tokens int32 [4, 10], lengths int32 [4])``."""
    rng = np.random.RandomState(seed)
    return rng.randint(0, 256, (4, 10)).astype(np.int32), np.asarray([10, 4, 7, 9], np.int32)


def continuous_scene(model, stops, shapes):
    """A call and two appended turns for the continuous sampler tests (per-row budgets, ``stops``,
    a forced stop, temperature 1, top-p on the turns) and the static sampler's outputs:
    ``(tokens, generate kwargs, [(obs, obs_len, resume, append kwargs)] * 2, [3 outputs])``."""
    import jax

    import mojax.sampling as ms

    toks, lens = continuous_prompts()
    rng = np.random.RandomState(1)
    max_new = rng.randint(2, 40, (8,))
    forced = np.where(rng.rand(8) < 0.3, np.minimum(max_new, 3), 0)
    kw = dict(key=jax.random.key(3), temperature=1.0, stop_token_ids=stops, prompt_lengths=lens)
    kw.update(shapes, max_new_tokens=max_new, force_stop_at=forced)
    refs, turns = [ms.generate(model, toks, **kw)], []
    for turn in range(2):
        resume = rng.rand(8) < 0.7
        obs = rng.randint(0, 256, (8, 6)).astype(np.int32)
        obs_len = rng.randint(0, 7, (8,))
        more = dict(max_new_tokens=rng.randint(1, 12, (8,)), min_new_tokens=turn, top_p=0.9)
        turns.append((obs, obs_len, resume, more))
        refs.append(ms.append_and_continue(model, refs[-1].state, obs, obs_len, resume, **more))
    return toks, kw, turns, refs


def same_sampling_output(got, ref):
    """Two ``SamplingOutput``s: the same tokens, lengths, finish reasons and loss masks; log-probs
    within 1e-5 (XLA CPU rounds a matmul differently for different row counts)."""
    for field in ("tokens", "lengths", "finish_reason", "loss_mask"):
        np.testing.assert_array_equal(
            np.asarray(getattr(got, field)), np.asarray(getattr(ref, field))
        )
    np.testing.assert_allclose(
        np.asarray(got.logprobs), np.asarray(ref.logprobs), atol=1e-5, rtol=0
    )


def truncate_array_data(step_dir):
    """Cuts every array data file of a saved step to 3 bytes (what a storage fault leaves)."""
    state_dir = os.path.join(step_dir, "state")
    data_files = [
        os.path.join(r, f)
        for r, _, fs in os.walk(state_dir)
        for f in fs
        if os.path.getsize(os.path.join(r, f)) > 0
        and "d" in os.path.relpath(r, state_dir).split(os.sep)
    ]
    assert data_files, sorted(os.walk(step_dir))
    for f in data_files:
        with open(f, "r+b") as fh:
            fh.truncate(3)


def with_keys(c, **kv):
    c = c.copy_and_resolve_references()
    with c.unlocked():
        for k, v in kv.items():
            node = c
            *path, last = k.split(".")
            for p in path:
                node = node[p]
            node[last] = v
    return c


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs, ...), from ``ps``."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        c, parent = map(int, line.split())
        children.setdefault(parent, []).append(c)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found
