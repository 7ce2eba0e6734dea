"""Logit processors (temperature, top-k, top-p, min-p) and the per-step token draw.

Definitions (the statistical test in tests/integration/sampling/test_sampling_processors.py checks these against a numpy
implementation written from them):

* temperature ``tau``: ``z = logits / tau``; ``tau = 0`` means greedy (``argmax logits``).
* top-k (``k > 0``): keep the tokens whose ``z`` is ``>=`` the k-th largest ``z`` (ties at the
  boundary are kept, as transformers' ``TopKLogitsWarper`` does).
* top-p (``p < 1``, nucleus, Holtzman et al. 2020, eq. 3): sort the (top-k-truncated) distribution
  in decreasing order and keep the smallest prefix whose probability mass reaches ``p``; the most
  likely token is always kept, ties at the boundary are kept.
* min-p (``m > 0``): keep tokens with ``softmax(z) >= m * max softmax(z)``.

Both truncation thresholds are found by an exact 32-step bisection over the fp32 values' order
(``_largest_threshold``), not by sorting the vocabulary each decode step. The kept tokens are
renormalised (the others get ``-inf``) and one token per row is drawn, by ``draw``:

* ``"gumbel"`` (default): Gumbel-max, the token of ``jax.random.categorical(key, z)``: one random
  draw per vocabulary entry (4.2 M per step at [128, 32768]). ``gumbel_max_draw`` computes the same
  ``argmax(z + gumbel(key, z.shape))`` with ``first_argmax``, a two-level argmax (XLA CPU's
  variadic (value, index) reduction over a whole vocabulary is slow).
* ``"inverse_cdf"``: one uniform ``u`` per row and the two-level inverse CDF of the unnormalised
  probabilities ``p = exp(z - max z)``: the block of ``INVERSE_CDF_BLOCK`` entries whose cumulative
  block mass first exceeds ``u * sum p``, then the entry inside it whose cumulative mass first
  exceeds the remainder. The token is ``min {i : sum_{j <= i} p_j > u * sum p}`` up to fp32
  rounding of the sums (as in ``torch.multinomial``); zero-probability (removed, ``-inf``)
  entries are never drawn. One uniform per row instead of one Gumbel draw per entry, and another
  random stream: a run's tokens depend on ``draw``.

Order: temperature, top-k, top-p, min-p (transformers' order).

Log-probs: by default the sampler records the **policy** log-prob ``log_softmax(logits)[token]`` of
the raw fp32 logits at temperature 1 with no truncation -- the ``pi_old(a|s)`` of the PPO ratio,
which the train step recomputes from the same logits. ``logprobs="sampling"`` records the log-prob
under the processed distribution the token was actually drawn from instead.

Shape legend: B rows, V vocab.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

LOGPROB_MODES = ("policy", "sampling")
DRAWS = ("gumbel", "inverse_cdf")
#: Entries per block of the two-level inverse CDF (``sqrt`` of a 64k vocabulary).
INVERSE_CDF_BLOCK = 256
#: Entries per block of ``first_argmax``.
ARGMAX_BLOCK = 256


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Static (hashable) sampling hyperparameters; part of the compile key.

    Attributes:
      temperature: ``0.0`` = greedy.
      top_k: ``0`` = off.
      top_p: ``1.0`` = off.
      min_p: ``0.0`` = off.
      logprobs: "policy" (log-softmax of the raw logits, temperature 1; the default) or "sampling"
        (log-prob under the processed distribution).
      draw: "gumbel" (the tokens of ``jax.random.categorical``; the default) or "inverse_cdf"
        (one uniform per row, two-level inverse CDF); see the module docstring.
      stop_controls: whether the decode step applies ``stop_bias`` (``min_new_tokens`` /
        ``force_stop_at``); set by the sampling calls from their arguments (``uses_stop_controls``),
        so a call without them pays nothing for them.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    logprobs: str = "policy"
    draw: str = "gumbel"
    stop_controls: bool = False

    def __post_init__(self):
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative int (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1) (0 = off), got {self.min_p}")
        if self.logprobs not in LOGPROB_MODES:
            raise ValueError(f"logprobs must be one of {LOGPROB_MODES}, got {self.logprobs!r}")
        if self.draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {self.draw!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _sortable(z: jax.Array) -> jax.Array:
    """uint32 keys with the order of the fp32 values (-inf smallest; no NaN expected)."""
    bits = jax.lax.bitcast_convert_type(z.astype(jnp.float32), jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))


def _largest_threshold(keys: jax.Array, measure, target) -> jax.Array:
    """Per row, the largest key ``t`` with ``measure(keys >= t) >= target`` (uint32 [B, 1]).

    ``measure`` is monotone (a count for top-k, a probability mass for top-p), so an exact
    bisection over the 2^32 keys takes 32 passes over [B, V] -- no sort of the vocabulary. The
    answer is always one of the row's values: the k-th largest (top-k) or the smallest value of
    the nucleus (top-p), ties included.
    """

    def body(_, bounds):
        lo, hi = bounds
        diff = hi - lo
        mid = lo + diff // 2 + (diff & 1)  # ceil midpoint without uint32 overflow
        ok = measure(keys >= mid[:, None]) >= target
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid - 1)

    lo, _ = jax.lax.fori_loop(0, 32, body, (jnp.min(keys, axis=-1), jnp.max(keys, axis=-1)))
    return lo[:, None]


def process_logits(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """The processed logits fp32 [B, V] the sampler draws from (removed tokens are ``-inf``).

    For greedy (temperature 0) the raw logits are returned (the draw is an argmax).
    """
    z = logits.astype(jnp.float32)
    if params.greedy:
        return z
    if params.temperature != 1.0:
        z = z / params.temperature
    if params.top_k > 0 and params.top_k < z.shape[-1]:
        keys = _sortable(z)
        count = lambda keep: jnp.sum(keep, axis=-1, dtype=jnp.int32)
        z = jnp.where(keys >= _largest_threshold(keys, count, params.top_k), z, -jnp.inf)
    if params.top_p < 1.0:
        keys = _sortable(z)
        probs = jax.nn.softmax(z, axis=-1)
        mass = lambda keep: jnp.sum(jnp.where(keep, probs, 0.0), axis=-1)
        z = jnp.where(keys >= _largest_threshold(keys, mass, params.top_p), z, -jnp.inf)
    if params.min_p > 0.0:
        probs = jax.nn.softmax(z, axis=-1)
        z = jnp.where(probs >= params.min_p * jnp.max(probs, -1, keepdims=True), z, -jnp.inf)
    return z


def _argmax_keys(x: jax.Array) -> jax.Array:
    """uint32 keys ordered as ``jnp.argmax`` compares floats: NaN largest, ``-0.0 == +0.0``."""
    x = x.astype(jnp.float32)
    keys = _sortable(jnp.where(x == 0, jnp.float32(0), x))  # -0.0 -> +0.0 first
    return jnp.where(jnp.isnan(x), jnp.uint32(0xFFFFFFFF), keys)


def first_argmax(x: jax.Array, block: int = ARGMAX_BLOCK) -> jax.Array:
    """``jnp.argmax(x, axis=-1)`` of float ``x`` [B, V] as int32 [B]: the first index of the row
    maximum (a NaN counts as the maximum, as in ``jnp.argmax``), found in two levels.

    On order-preserving uint32 keys (``_argmax_keys``; XLA's float max reduction need not propagate
    NaN), level one takes each ``block``-entry block's max (a plain max reduction, vectorised); the
    first block holding the row maximum is an argmax over V / block entries, and the answer is the
    first maximum inside that block. Same result as one argmax over V, without its variadic
    (value, index) reduction, which XLA CPU runs far slower than a max.
    """
    b, v = x.shape
    block = min(block, v)
    nb = -(-v // block)
    keys = jnp.pad(_argmax_keys(x), ((0, 0), (0, nb * block - v)))  # pad key 0 < any value's
    keys = keys.reshape(b, nb, block)
    best = jnp.argmax(jnp.max(keys, axis=-1), axis=-1)  # [B] first block with the maximum
    inner = jnp.take_along_axis(keys, best[:, None, None], axis=1)[:, 0]  # [B, block]
    return (best * block + jnp.argmax(inner, axis=-1)).astype(jnp.int32)


def gumbel_max_draw(key: jax.Array, z: jax.Array) -> jax.Array:
    """Tokens int32 [B] of ``jax.random.categorical(key, z, axis=-1)`` for processed logits
    ``z`` [B, V]: the same Gumbel noise (``jax.random.gumbel(key, z.shape, z.dtype)``, the noise
    ``categorical`` draws) and the same first-index argmax, via ``first_argmax``."""
    return first_argmax(z + jax.random.gumbel(key, z.shape, z.dtype))


def _first_above(cum: jax.Array, mass: jax.Array, target: jax.Array) -> jax.Array:
    """Per row, the first index whose inclusive cumulative mass ``cum`` exceeds ``target`` [B].

    Zero-mass entries never qualify: counting ``cum <= target`` steps over them, and a target at or
    past the total (fp32 rounding) falls back to the last entry with positive mass.
    """
    n = cum.shape[-1]
    idx = jnp.sum(cum <= target[:, None], axis=-1, dtype=jnp.int32)
    last = n - 1 - jnp.argmax((mass > 0)[:, ::-1], axis=-1).astype(jnp.int32)
    return jnp.minimum(idx, last)


def inverse_cdf_draw(z: jax.Array, u: jax.Array, block: int = INVERSE_CDF_BLOCK) -> jax.Array:
    """Tokens int32 [B] for uniforms ``u`` fp32 [B] in [0, 1) from processed logits ``z`` [B, V].

    Two-level: block masses [B, V / block] and their cumsum pick the block, then the cumsum of that
    block's ``block`` entries picks the token; two cumsums of ~sqrt(V) instead of one of V.
    """
    b, v = z.shape
    block = min(block, v)
    nb = -(-v // block)
    z = jnp.pad(z.astype(jnp.float32), ((0, 0), (0, nb * block - v)), constant_values=-jnp.inf)
    p = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True)).reshape(b, nb, block)
    mass = jnp.sum(p, axis=-1)  # [B, nb]
    cum = jnp.cumsum(mass, axis=-1)
    target = u * cum[:, -1]
    bi = _first_above(cum, mass, target)
    before = jnp.where(
        bi > 0, jnp.take_along_axis(cum, jnp.maximum(bi - 1, 0)[:, None], -1)[:, 0], 0
    )
    inner = jnp.take_along_axis(p, bi[:, None, None], axis=1)[:, 0]  # [B, block]
    ii = _first_above(jnp.cumsum(inner, axis=-1), inner, target - before)
    return bi * block + ii


def row_keys(key: jax.Array, rows: jax.Array, positions: jax.Array) -> jax.Array:
    """Per-row keys [B]: ``fold_in(fold_in(key, rows[b]), positions[b])``.

    A row's draw at a response position depends only on the call key, the row's id (``p * G + g``)
    and that position, not on the slot it decodes in or on the other rows of the batch.
    """
    fold = jax.random.fold_in
    return jax.vmap(lambda r, i: fold(fold(key, r), i))(rows, positions)


def uses_stop_controls(min_new_tokens, force_stop_at) -> bool:
    """Whether a sampling call's decode needs ``stop_bias``: an argument other than the scalar 0.

    Decided from the arguments' kind, not their per-row values, so every process of a multi-process
    call (which reads only its own rows' values) compiles the same program.
    """
    return any(np.ndim(x) > 0 or int(x) != 0 for x in (min_new_tokens, force_stop_at))


def stop_bias(stop_ids, num_new, min_new, stop_at, vocab: int) -> jax.Array:
    """fp32 [B, V] of 0 / ``-inf``: the row's stop ids (``stop_ids`` [B, J], -1 unused) are removed
    while ``num_new < min_new`` (transformers' ``MinNewTokensLengthLogitsProcessor``), and only its
    first stop id is left when the next token is its ``stop_at``-th new one (``stop_at > 0``).

    The stop ids are scattered into the [B, V] bias (O(B V), not a [B, J, V] comparison).
    """
    b = stop_ids.shape[0]
    rows = jnp.arange(b)[:, None]
    valid = stop_ids >= 0
    cols = jnp.where(valid, stop_ids, vocab)  # unused ids fall outside V and are dropped
    early = valid & (num_new < min_new)[:, None]  # [B, J]
    bias = jnp.zeros((b, vocab), jnp.float32)
    bias = bias.at[rows, cols].min(jnp.where(early, -jnp.inf, 0.0), mode="drop")
    force = (stop_at > 0) & (num_new + 1 >= stop_at) & valid[:, 0]
    only_first = jnp.full((b, vocab), -jnp.inf, jnp.float32)
    only_first = only_first.at[jnp.arange(b), cols[:, 0]].set(0.0, mode="drop")
    return jnp.where(force[:, None], only_first, bias)


def sample_step(
    logits: jax.Array, key: jax.Array, params: SamplingParams, *, bias=None, per_row: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Draws one token per row and returns ``(tokens int32 [B], logprobs fp32 [B])``.

    ``logits`` are the raw fp32 next-token logits [B, V]; the log-prob is that of
    ``params.logprobs`` (see the module docstring). ``bias`` (fp32 [B, V] of 0 / ``-inf``, or None)
    removes tokens before the processors (``min_new_tokens``, a forced stop); the policy log-prob
    stays that of the raw logits. ``per_row``: ``key`` holds one key per row (``row_keys``) and
    row ``b`` draws its noise from ``key[b]`` alone; otherwise one key draws the whole batch.
    """
    logits = logits.astype(jnp.float32)
    z = process_logits(logits if bias is None else logits + bias, params)
    if params.greedy:
        tokens = first_argmax(z)
    elif params.draw == "inverse_cdf":
        if per_row:
            u = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(key)
        else:
            u = jax.random.uniform(key, z.shape[:1], jnp.float32)
        tokens = inverse_cdf_draw(z, u)
    elif per_row:
        noise = jax.vmap(lambda k: jax.random.gumbel(k, z.shape[1:], z.dtype))(key)
        tokens = first_argmax(z + noise)
    else:
        tokens = gumbel_max_draw(key, z)
    source = logits if params.logprobs == "policy" or params.greedy else z
    logp = jax.nn.log_softmax(source, axis=-1)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]
