"""Continuous batching: the ``Sampler`` calls over a fixed number of decode slots.

``ContinuousSampler`` takes the calls of ``mojax.sampling.static.engine.Sampler`` (``generate``,
``append_and_continue``) with the arguments of ``mojax.sampling.generate``, and returns the same
``SamplingOutput`` (rows prompt-major, [B, R] buffers), but decodes the B rows in N slots
(``slots``), each with its own cache write position (``mojax.sampling.continuous.slots``):

* ``generate`` prefills the prompts in chunks of ``prefill_prompts`` (default enough to fill the
  slots), each when its first row enters a slot and kept until its last one has; rows queue in
  row order; a free slot takes the next row with a copy of its prompt's cache rows and logits
  (the G samples share one prefill);
* the slots decode in segments (one compiled ``lax.while_loop``) that end when a slot frees while
  rows wait, or when a running slot's write position reaches the segment's cache prefix; between
  segments the host moves finished rows (stop id, budget, full buffers) out of their slots into
  the host-side ``ContinuousState`` and places waiting rows in the freed slots;
* ``append_and_continue`` queues the resumed rows (a tool row whose observation is ready): each
  enters a free slot with the prefill of its whole context (prompt, response so far, observation),
  and decodes on. A row waiting for its tool holds no slot.
* ``open`` returns the call as a ``ContinuousSession`` (``mojax.sampling.continuous.session``)
  that the caller steps segment by segment, requeueing finished rows with appended tokens while
  the others decode on: a multi-turn rollout's tool rows enter the running decode as soon as
  their observations are ready (``mojax.rollout.continuous_agent``).

Each row draws with ``processors.row_keys`` (call key, row id, response position), so its draws do
not depend on its slot or on the rows beside it, and its tokens are those of the static sampler
(``tests/integration/sampling/test_continuous.py``, ``tests/integration/rollout/test_rollout_continuous.py``). The logits
may differ from the static sampler's in the last fp32 bits: XLA CPU's matmuls round differently
for different row counts (a one-row product takes another kernel than a two-row one), and a
resumed row's context is one prefill here where the static sampler appends it chunk by chunk; a
draw whose two best candidates tie within that rounding could then differ.

Memory: the slot cache is N x C (``max_total_len``) slots (``kv_cache="dense"``), plus the prompt
prefill of the chunk (or two) whose rows are being placed, and the prefill of the resumed rows
placed at a segment boundary. With
``kv_cache="paged"`` the slots share a pool of ``num_pages`` pages of ``page_size`` tokens
(``mojax.models.paged_cache``): a running row owns the pages of its live tokens plus one segment
(at most ``segment_tokens`` steps, default one page's worth) and returns them when it ends; a
queued row enters when the free pages hold its context plus one segment, and when the running
rows outgrow the pool the newest ones are preempted and requeued (``mojax.sampling.continuous.pages``), so
the pool can be smaller than N x C.

Mesh (one process): with ``mesh`` the slots lie over the mesh axes of logical "batch" (the static
sampler's row axes; ``slots`` a multiple of their size), the weights on their learner shardings
(``param_shardings``), and every segment is one SPMD program over the mesh: data-parallel decode,
with the slots' stop checks reduced across devices each step. The host loop stays one loop: it reads
the slots' small state (``done``, ``end``) and the finished rows' buffers, all addressable in one
process, and ``row_sharding`` stays None (its outputs are host arrays of every row). A paged cache
on a mesh is one pool per shard of slots (``mojax.models.paged_cache``: each device holds and
reads its own slots' pages; ``num_pages`` splits evenly), read by the gather path (the Pallas
kernels run on one device's pool).

Several processes: each process runs its own engine, on its own devices, over its own rows.
* Weights: ``update_weights`` (every process together) gathers the learner's global weights
  (``mesh``, the learner's mesh) into a full copy on each of this process's devices, in the
  compute dtype (``compute_copy``; ``sharding.copy_across_processes``: one jitted all-gather). The engine's mesh is this
  process's devices, all on "data" (``sharding.process_local_mesh``; one device: no mesh), so
  its weights are replicated over them and its slots split over them.
* Rows: each process queues the rows of its own block of prompt groups
  (``distributed.own_groups``; ``_open(own=...)``), with their global row ids, so each row draws
  from the stream it would draw from in one process: the same tokens. Its host loop reads only
  its own slots; nothing crosses processes while it decodes.
* ``generate`` and ``append_and_continue`` all-gather the finished rows once at the end
  (``distributed.gather_rows``), so they return every row on every process, as in one process.
  A rollout (``mojax.rollout.continuous_agent``) gathers once, after its last turn.
* Files: none.

Shape legend: P prompts, G samples per prompt, B = P*G rows, N slots, Tb prompt bucket, R response
slots, C cache slots, J stop ids per row.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from mojax import distributed
from mojax import sharding as sharding_lib
from mojax.models import fused
from mojax.models import layouts as layouts_lib
from mojax.models.qwen import (
    DEFAULT_LOGICAL_AXIS_RULES,
    QwenModel,
    param_shardings,
    unstack_layers,
)
from mojax.sampling.continuous import pages as pages_lib
from mojax.sampling.continuous import rows as continuous_rows
from mojax.sampling.continuous import slots
from mojax.sampling.continuous.config import KV_CACHES, ContinuousConfig
from mojax.sampling.continuous.rows import ContinuousState, Work
from mojax.sampling.continuous.session import ContinuousSession
from mojax.sampling.protocol import Requests, cache_slots

#: Each process's rows sit in its own decode slots, padded to ``continuous.slots`` (a multiple of
#: the devices they spread over, ``config_errors``): the rollout's B rows need not divide the mesh's
#: batch axes (``protocol.splits_rows``, the run spec's batch rule).
SPLITS_ROWS = False

#: The engine's own config section, ``config.continuous`` (``protocol.engine_sections``).
CONFIG = ContinuousConfig


class ContinuousSampler:
    """The ``Sampler`` seam over ``slots`` decode slots (see the module docstring).

    Args:
      config: the policy's ``QwenConfig`` (layouts resolved here).
      params: the initial weights (or None until ``update_weights``).
      slots: N, decode slots (the dense cache holds N x ``max_total_len`` slots).
      segment_tokens: most decode steps per segment (0: no limit, one page's worth with a paged
        cache; a segment still ends when a slot frees while rows wait).
      mesh, rules: the device mesh the slots and weights lie over (one process; module
        docstring) and its logical axis rules; None: one device.
      kv_cache: ``"dense"`` or ``"paged"`` (module docstring).
      page_size: tokens per page of a paged cache.
      num_pages: pages in a paged cache's pool (0: N x ceil(C / page_size), the dense capacity).
      prefill_prompts: prompts per prompt prefill (0: enough rows to fill every slot, ceil(N /
        G)); a chunk is prefilled when its first row enters a slot and dropped after its last.
      refill: while rows wait, a segment ends when this many slots have freed (1: at the first;
        more: fewer segment boundaries, each a host round trip and a placement, for slots left
        idle until the boundary). The tokens do not depend on it.
    """

    row_sharding = None
    rounds = False  # a rollout steps its sessions (``open``)

    def __init__(
        self,
        config,
        params=None,
        *,
        slots: int,
        segment_tokens: int = 0,
        mesh=None,
        rules=DEFAULT_LOGICAL_AXIS_RULES,
        kv_cache: str = "dense",
        page_size: int = 16,
        num_pages: int = 0,
        prefill_prompts: int = 0,
        refill: int = 1,
    ):
        # several processes: ``mesh`` is the learner's (weights come from it); the engine runs
        # on this process's devices
        self.source_mesh = mesh if distributed.process_count() > 1 else None
        self.local_mesh = None
        if distributed.process_count() > 1:
            self.local_mesh = sharding_lib.process_local_mesh(mesh)
            mesh = self.local_mesh if self.local_mesh.devices.size > 1 else None
        _check_mesh(mesh, rules, int(slots), kv_cache, int(num_pages))
        if int(slots) < 1 or int(segment_tokens) < 0 or not 1 <= int(refill) <= int(slots):
            raise ValueError(
                f"slots must be >= 1, segment_tokens >= 0, 1 <= refill <= slots; got {slots}, "
                f"{segment_tokens}, {refill}"
            )
        if kv_cache not in KV_CACHES or int(page_size) < 1 or int(num_pages) < 0:
            raise ValueError(
                f"kv_cache must be one of {KV_CACHES}, page_size >= 1, num_pages >= 0; got "
                f"{kv_cache!r}, {page_size}, {num_pages}"
            )
        self.config = layouts_lib.resolve(config)
        self.mesh, self.rules = mesh, tuple(rules)
        self.num_slots, self.segment_tokens = int(slots), int(segment_tokens)
        self.kv_cache, self.page_size, self.num_pages = kv_cache, int(page_size), int(num_pages)
        self.prefill_prompts, self.refill = int(prefill_prompts), int(refill)
        self.pages: pages_lib.PagedSlots | None = None  # the last call's pages (its log)
        self.model = self.decode_model = None
        if params is not None:
            self.update_weights(params)

    @classmethod
    def of(cls, model: QwenModel, *, slots: int, **kwargs) -> ContinuousSampler:
        """A sampler over an existing model (its class kept: a subclass's forward is used);
        ``kwargs``: the constructor's keywords."""
        sampler = cls(model.config, slots=slots, **kwargs)
        sampler._set_model(model.replace(config=sampler.config))
        return sampler

    def update_weights(self, params) -> None:
        """Samples from ``params`` from the next call on (the decode layout's unstacked view is
        made here, once per update)."""
        if self.model is None:
            self._set_model(QwenModel(config=self.config, params=params))
        else:
            self._set_model(self.model.replace(params=params))

    def _set_model(self, model: QwenModel) -> None:
        leaves = jax.tree.leaves(model.params)
        spread = any(isinstance(x, jax.Array) and not x.is_fully_addressable for x in leaves)
        if spread:  # several processes: a full copy on this process's devices (all together)
            if self.source_mesh is None:
                raise ValueError(
                    "ContinuousSampler: the weights span several processes; pass the learner's "
                    "mesh as mesh= so they can be gathered"
                )
            shardings = param_shardings(self.config, self.local_mesh, self.rules)
            params = sharding_lib.copy_across_processes(
                model.params, shardings, self.source_mesh, cast=self.compute_copy
            )
            model = model.replace(params=params)
        elif self.mesh is not None:  # a no-op for weights already on their learner shardings
            shardings = param_shardings(self.config, self.mesh, self.rules)
            model = model.replace(params=jax.device_put(model.params, shardings))
        self.model = model
        per_layer = layouts_lib.of(self.config).decode_per_layer
        self.decode_model = fused.for_decode(unstack_layers(model) if per_layer else model)

    def compute_copy(self, params):
        """``params`` as this process's engine holds them (``compute_dtype_params``)."""
        return compute_dtype_params(self.config, params)

    def _prefill(self, model, tokens, mask, last_index, *, cache_dtype=None):
        """``slots.prefill_rows`` on this sampler's mesh (rows split over its batch axes)."""
        return slots.prefill_rows(
            model, tokens, mask, last_index, cache_dtype=cache_dtype, mesh=self.mesh,
            rules=self.rules,
        )  # fmt: skip

    def _check_model(self):
        if self.model is None:
            raise ValueError("ContinuousSampler: call update_weights(params) before sampling")

    def open(self, requests: Requests, sampling) -> ContinuousSession:
        """The rows of ``requests`` as a ``ContinuousSession`` the caller steps (the protocol's
        ``Sampler.open``; rows queued, nothing decoded yet): a multi-turn rollout steps it and
        requeues each tool row as its observation is ready (``mojax.rollout.continuous_agent``).
        ``sampling``: the sampling keywords of ``generate``. A slot's cache holds
        ``protocol.cache_slots(requests.prompt_bucket, requests.limits)`` slots. With several
        processes the session decodes this process's prompt groups (``own_groups``)."""
        return self._open(
            requests.prompt_tokens,
            key=requests.key,
            max_new_tokens=requests.max_new_tokens,
            num_samples=requests.num_samples,
            stop_token_ids=requests.stop_token_ids,
            prompt_lengths=requests.prompt_lengths,
            pad_id=requests.pad_id,
            max_response_len=requests.max_response_len,
            max_total_len=cache_slots(requests.prompt_bucket, requests.limits),
            cache_dtype=requests.cache_dtype,
            min_prompt_bucket=requests.min_prompt_bucket,
            **sampling,
        )

    def _open(self, prompt_tokens, *, key, max_new_tokens, num_samples=1, own=None, **kwargs):
        """A ``generate`` call as a ``ContinuousSession`` the caller steps (rows queued, nothing
        decoded yet); same arguments as ``generate``.
        ``own``: the prompts ``[lo, hi)`` whose rows this session decodes (default all; with
        several processes this process's block, ``distributed.own_groups``)."""
        self._check_model()
        if own is None and self.source_mesh is not None:
            own = distributed.own_groups(len(prompt_tokens))
        checked = []  # the page pool ``_pages`` built and checked before the prefill (or None)
        state, work, params, caps = continuous_rows.start(
            self.model, prompt_tokens, key, max_new_tokens, num_samples, kwargs,
            lambda st, wk: checked.append(self._pages(st, wk)), self._prefill,
            self.prefill_prompts or -(-self.num_slots // max(int(num_samples), 1)), own,
        )  # fmt: skip
        return ContinuousSession(self, state, work, params, caps, checked[0])

    def generate(self, prompt_tokens, *, key, max_new_tokens, num_samples=1, **kwargs):
        """``mojax.sampling.generate`` (same arguments and output) over the slots; with several
        processes each decodes its own prompts' rows, then every row is all-gathered."""
        session = self._open(
            prompt_tokens, key=key, max_new_tokens=max_new_tokens, num_samples=num_samples, **kwargs
        )
        session.run()
        return self._gathered(session.state).output()

    def append_and_continue(self, state, obs_tokens, obs_lengths, resume, **kwargs):
        """``mojax.sampling.append_and_continue`` (same arguments and output) over the slots; the
        resumed rows enter slots with the prefill of their whole context (with several
        processes each resumes its own prompts' rows, then every row is all-gathered)."""
        self._check_model()
        state, work, params, caps = continuous_rows.resume(
            self.model, state, obs_tokens, obs_lengths, resume, kwargs
        )
        if self.source_mesh is not None:
            mine = distributed.group_layout(state.batch, state.num_samples).local
            work.queue = [r for r in work.queue if mine[r]]
        ContinuousSession(self, state, work, params, caps, self._pages(state, work)).run()
        return self._gathered(state).output()

    def _gathered(self, state: ContinuousState) -> ContinuousState:
        """``state`` with every process's rows (one all-gather; one process: as is)."""
        if self.source_mesh is None:
            return state
        layout = distributed.group_layout(state.batch, state.num_samples)
        arrays, _ = distributed.gather_rows(
            layout, {k: getattr(state, k) for k in continuous_rows.ROW_BUFFERS}, {}
        )
        for k, v in arrays.items():
            setattr(state, k, v)
        return state

    def _pages(self, state: ContinuousState, work: Work) -> pages_lib.PagedSlots | None:
        """The call's page pool (a paged cache), checked against the queued rows; None (dense).

        ``num_pages`` 0 sizes the pool as the dense cache (slots x ceil(C / page size)); a segment
        runs at most ``segment_tokens`` steps (0: one page's worth)."""
        if self.kv_cache != "paged":
            return None
        c = state.max_total_len
        per_slot = -(-c // self.page_size)
        num_pages = self.num_pages or self.num_slots * per_slot
        shards = 1 if self.mesh is None else sharding_lib.num_shards(self.mesh, self.rules, "batch")
        pool = pages_lib.PagePool(num_pages, self.page_size, self.num_slots, c, shards)
        self.pages = pages_lib.PagedSlots(pool, self.segment_tokens or self.page_size, c)
        self.pages.check(state, work)
        return self.pages


def build(model_config, rollout, options: ContinuousConfig, mesh, rules) -> ContinuousSampler:
    """The continuous engine of a run (``protocol.SAMPLERS['continuous']``) from its section
    ``options`` (``config.continuous``): ``slots`` slots over the mesh's row axes, a dense or paged
    KV cache (``kv_cache``, ``page_size``, ``num_pages``), ``prefill_prompts``, ``refill_slots``;
    one device: no mesh (``rollout``, the ``config.rollout`` section, sets nothing here).
    With several processes ``mesh`` is the learner's, which the weights are gathered from, and
    each process runs its own engine over its own devices and rows (module docstring)."""
    one_device = (mesh is None or mesh.devices.size == 1) and distributed.process_count() == 1
    return ContinuousSampler(
        model_config,
        mesh=None if one_device else mesh,
        rules=rules,
        slots=options.slots,
        kv_cache=options.kv_cache,
        page_size=options.page_size,
        num_pages=options.num_pages,
        prefill_prompts=options.prefill_prompts,
        refill=options.refill_slots,
    )


def memory_report(
    spec, options: ContinuousConfig, mesh, rules, state, mc, prompt_len, out
) -> tuple[int, int]:
    """``(held, transient)`` bytes per device of the continuous engine in the dry run
    (``mojax.sampling.memory``; ``continuous.slots`` = N): the prefill + decode program of N rows
    (ceil(N / G) prompts of G samples), one more N-row cache, two prompt prefill chunks
    (``continuous.prefill_prompts``, default ceil(N / G) prompts), or that program's own peak when
    larger. With several processes, on this process's own engine, whose copy of the weights is
    held."""
    import dataclasses

    from mojax.sampling import memory

    held = 0
    if jax.process_count() > 1:
        mesh, state = _per_process_engine(state, mc)
        held = sharding_lib.bytes_per_device(state.params)
        out["engine_weights_gib_per_device"] = held / memory.GIB
    rc = spec.rollout
    rows, g = int(options.slots), int(rc.num_samples)
    shaped = dataclasses.replace(
        spec, rollout=dataclasses.replace(rc, prompts_per_step=-(-rows // g))
    )
    transient = memory.program_bytes(shaped, mesh, rules, state, mc, prompt_len, out, rows)
    chunk = int(options.prefill_prompts) or -(-rows // g)
    pm = memory.compile_prompt_prefill(spec, mesh, rules, state, mc, prompt_len, chunk)
    pm = pm.memory_analysis()
    prefill = 2 * pm.output_size_in_bytes
    out["prompt_prefill_gib_per_device"] = prefill / memory.GIB
    return held, max(transient + prefill, pm.temp_size_in_bytes + prefill)


def _per_process_engine(state, mc):
    """``(mesh, state)`` of each process's own engine in the dry run: this process's devices, all
    on "data" (``sharding.process_local_mesh``), and the policy's weights replicated on each of
    them in the compute dtype (``compute_dtype_params``)."""
    from mojax import learner

    local = sharding_lib.process_local_mesh()
    replicated = sharding_lib.replicated(local)
    shapes = jax.eval_shape(lambda p: compute_dtype_params(mc, p), learner.policy_params(state))
    params = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), shapes
    )
    return local, state.replace(params=params, frozen=None)


def compute_dtype_params(config, params):
    """``params`` with floating weights in the compute dtype (``config.dtype``; every use casts a
    weight to it, so the forward is unchanged), except under LoRA (its quantised base
    dequantises from its own dtypes). Also on abstract values (``jax.eval_shape``)."""
    if config.lora is not None:
        return params
    floating = lambda x: jnp.issubdtype(x.dtype, jnp.floating)
    return jax.tree.map(lambda x: x.astype(config.jnp_dtype) if floating(x) else x, params)


def _check_mesh(mesh, rules, num_slots: int, kv_cache: str, num_pages: int = 0) -> None:
    """One clear error for a setting the continuous sampler cannot run (module docstring)."""
    if mesh is None:
        return
    shards = sharding_lib.num_shards(mesh, rules, "batch")
    for key, message in _slot_errors(num_slots, kv_cache, num_pages, shards, ""):
        raise ValueError(f"config.{key}={message}")


def _slot_errors(slots, kv_cache, num_pages, shards, where) -> list[tuple[str, str]]:
    """The engine's one mesh rule: ``continuous.slots`` (and a paged cache's ``num_pages``)
    a multiple of the ``shards`` devices its rows spread over (the logical "batch" axes)."""
    over = "devices the mesh spreads rows over"
    errors = []
    if slots % shards:
        message = f"{slots} must be a multiple of the {shards} {over} (its 'batch' axes{where})"
        errors.append(("continuous.slots", message))
    if kv_cache == "paged" and num_pages % shards:
        message = (
            f"{num_pages} must be a multiple of the {shards} {over} (one pool of pages per device)"
        )
        errors.append(("continuous.num_pages", message))
    return errors


def config_errors(rollout, options: ContinuousConfig, rules, sizes) -> list[tuple[str, str]]:
    """``protocol.config_errors`` of this engine: a fixed page pool holds one of the rollout's rows
    (``ContinuousConfig.row_errors``), and its mesh rule on the run's mesh ``sizes`` (axis ->
    devices; with several processes, one process's devices, all on "data": each runs its own
    engine; None: not known, not checked)."""
    errors = options.row_errors(rollout.max_prompt_len, rollout.max_response_len)
    if sizes is None:
        return errors
    axes = dict(rules).get("batch") or ()
    shards = math.prod(sizes[a] for a in ((axes,) if isinstance(axes, str) else axes))
    where = f", mesh {dict(sizes)}"
    return errors + _slot_errors(options.slots, options.kv_cache, options.num_pages, shards, where)


def describe(rollout, options: ContinuousConfig) -> str:
    """The dry run's line for this engine."""
    del rollout
    return f"continuous engine: {options.slots} decode slots of T tokens"
