"""Asynchronous generation: the rollout of step ``t + k`` is generated while step ``t`` updates.

``rollout.staleness = k``. The rollout that RL step ``s`` trains on is generated with the weights
after ``max(0, s - k)`` updates (its *policy version*; the behaviour policy of the off-policy
correction, ``mojax.learner.correction``), so the weights are at most ``k`` updates old. Step ``t``
of the :class:`Pipeline`::

    consume     the oldest in-flight rollout (step t, version t - k): advantages, batch, and, with
                ppo.old_logprobs="recompute", π_old from the learner with the mismatch and the
                correction against the behaviour log-probs
    transfer    θ_t, the learner's weights, to the sampler (a copy on the sampler's mesh: the update
                donates the learner's buffers); timed
    update      dispatched (JAX dispatch is asynchronous: the call returns before the update ends)
    generate    the rollout of step t + k with θ_t on the sampler, while the update runs (on the
                sampler's own devices with ``mesh.sampler > 0``, else queued behind the update on
                the same devices: the host's work, tool calls and scoring, still overlaps)
    wait        the update's metrics

At a fresh start the rollouts of steps ``t .. t + k - 1`` are generated first with θ_t; no rollout
is generated for a step past ``steps``. The schedule depends on nothing but ``(seed, step)``, so
two runs, or the processes of one run, make the same rollouts.

Checkpoints: the in-flight rollouts are *checkpointed* (``HostState.inflight``,
``mojax.rl.state``): the host state a checkpoint stores is the one after the steps it has
trained (the in-flight rollouts' data position, reward sources' state and reward stats travel with
each rollout and are applied when it is consumed), and a resumed run consumes the saved rollouts
exactly as the uninterrupted run does. A saved rollout that fails its checksum or validation is
moved aside and generated again (``mojax.rl.state.valid_prefix``). Every rollout is consumed through its JSON form, in either
run. A signal during the generation that follows an update (``mojax.rl.trainer``) keeps the
update and drops the rollout being generated: the step is saved with its after-step phases
pending (:class:`InterruptedAfterUpdate`), and the resumed run generates the missing rollouts first,
with the weights it resumed with (so from there on it differs from the uninterrupted run).

Several processes: the same rules as the synchronous loop (``docs/architecture.md``): the sampler's
mesh (``mojax.sharding.split_devices``) takes devices from every process, so each process holds
rows of both meshes, runs the tools of the rows its sampler devices hold and scores the groups it
owns; the rollout and its rewards are all-gathered, so the in-flight rollouts and the host state are
identical everywhere. Across processes the generation starts once the update has finished: the
rollout's host agreements (``mojax.distributed``, the preemption poll) are device all-gathers, and
on the CPU they share the cross-process collectives' channel with an update in flight, where they
would interleave in a different order on each process; so there the overlap is the host's work
only. ``rollout.staleness = 0`` with ``mesh.sampler = 0`` is the synchronous loop
(``mojax.rl.step.rl_step``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import jax

from mojax import distributed, learner
from mojax import rewards as rewards_lib
from mojax import sharding as sharding_lib
from mojax.infra.preemption import Interrupted
from mojax.models import param_shardings
from mojax.rewards.registry import migrate_host_dict
from mojax.rl import state as inflight_lib
from mojax.rl.episodes import rollout_metrics
from mojax.rl.state import HostState
from mojax.rl.step import Run, advantages, assemble, collect, rl_step, with_advantages
from mojax.tasks.framework.types import RewardStats


def make_step_fn(run: Run) -> Callable:
    """``(run, host, state, key) -> (host, state, metrics, episodes)``: ``rl_step`` for the
    synchronous loop on one mesh, else a :class:`Pipeline`."""
    if run.spec.rollout.staleness == 0 and run.spec.mesh.sampler == 0:
        return rl_step
    return Pipeline.build(run)


def step_key(seed: int, step: int) -> jax.Array:
    """The key of RL step ``step`` (the loop's ``fold_in(PRNGKey(seed), step)``)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), step)


def _host_fields(host: HostState) -> dict[str, Any]:
    """What collecting a rollout changes in the host state, as state dicts."""
    return {
        "data": dict(host.data),
        "reward_state": {
            name: {"train": state}
            for name, state in rewards_lib.split_states(host.reward_state, "train").items()
        },
        "train_stats": host.reward_stats["train"].state_dict(),
    }


def _with_fields(host: HostState, fields: dict[str, Any], **kw) -> HostState:
    """``host`` with the data position, the reward sources' training state and the training reward
    stats of ``fields`` (fresh objects: collecting mutates the stats in place; fields written
    before the reward sources are migrated, ``mojax.rewards.registry.migrate_host_dict``)."""
    stats = {**host.reward_stats, "train": RewardStats.from_state_dict(fields["train_stats"])}
    train = rewards_lib.split_states(migrate_host_dict(fields)["reward_state"], "train")
    return dataclasses.replace(
        host,
        data=dict(fields["data"]),
        reward_state=rewards_lib.with_split_states(host.reward_state, "train", train),
        reward_stats=stats,
        **kw,
    )


class InterruptedAfterUpdate(Interrupted):
    """A signal stopped the generation after step ``host.step``'s update: the updated ``state``,
    the ``host`` after it (without the dropped rollout), the step's ``metrics`` and ``episodes``."""

    def __init__(self, cause: Interrupted, host: HostState, state, metrics: dict, episodes):
        super().__init__(cause.signum, cause.signal_time, cause.grace_s)
        self.host, self.state, self.metrics, self.episodes = host, state, metrics, episodes


@dataclasses.dataclass
class Pipeline:
    """The asynchronous step (see the module docstring); build it with :meth:`build`.

    Attributes:
      gen_run: the run with the training rollouts' episode runner on the sampler's mesh;
      shardings: the sampler's param shardings; same_mesh: the sampler shares the learner's mesh;
      examples: the training split's examples by id (to decode in-flight rollouts).
    """

    gen_run: Run
    shardings: Any
    same_mesh: bool
    examples: dict[str, Any]

    @classmethod
    def build(cls, run: Run) -> Pipeline:
        """The run's sampler (``sampler.engine``: ``mojax.rl.builders.build_sampler``) on
        ``mesh.sampler`` devices (``mojax.sharding.sampler_mesh_from_config``) or on the
        learner's mesh."""
        from mojax.rl.builders import build_sampler

        own = sharding_lib.sampler_mesh_from_config(run.spec.mesh.as_dict())
        mesh = run.learner.mesh if own is None else own
        sampler = build_sampler(run.spec, run.learner.model_config, mesh, run.learner.rules)
        runner = dataclasses.replace(run.runner, sampler=sampler)
        examples = {str(ex.id): ex for ex in run.splits.train}
        if len(examples) != len(run.splits.train):
            raise ValueError(
                "rollout.staleness / mesh.sampler: the training split's example ids are not unique "
                "(in-flight rollouts are checkpointed by example id)"
            )
        shardings = param_shardings(run.learner.model_config, mesh, run.learner.rules)
        return cls(dataclasses.replace(run, runner=runner), shardings, own is None, examples)

    def transfer(self, params) -> tuple[Any, float]:
        """A copy of the learner's ``params`` on the sampler's mesh, and the seconds it took."""
        t0 = time.perf_counter()
        if self.same_mesh:
            out = jax.tree.map(lambda x: x.copy(), params)
        elif jax.process_count() == 1:
            out = jax.device_put(params, self.shardings)
        else:
            out = sharding_lib.copy_across_processes(
                params, self.shardings, self.gen_run.learner.mesh
            )
        jax.block_until_ready(out)
        return out, time.perf_counter() - t0

    def generate(self, host: HostState, fields: dict, params, step: int, version: int) -> dict:
        """The rollout of RL step ``step`` with the sampler's ``params`` (generated by the weights
        of RL step ``version``), collected from the host ``fields`` left by the rollout before it;
        returns its JSON form (``mojax.rl.state.encode``)."""
        gen = _with_fields(host, fields, step=step)
        roll_key, _ = jax.random.split(step_key(self.gen_run.spec.seed, step))
        gen, episodes = collect(self.gen_run, gen, params, roll_key)
        item = inflight_lib.InFlight(step, version, episodes, _host_fields(gen))
        return inflight_lib.encode(item)

    def __call__(self, run: Run, host: HostState, state, key) -> tuple:
        """One RL step (see the module docstring); returns the new host and train state, the step's
        metrics and its episodes (for transcripts)."""
        k, t, t0 = run.spec.rollout.staleness, host.step, time.time()
        g = run.spec.rollout.num_samples
        expect = lambda j: inflight_lib.Expect(t + j, t, k, g)  # noqa: E731
        queue = inflight_lib.valid_prefix(list(host.inflight), self.examples, expect, run.workdir)
        times = {}
        want = min(t + max(k, 1), run.spec.steps) - t  # rollouts of steps t .. t + k - 1
        if len(queue) < want:  # a fresh start, or a rollout dropped on a signal: fill up
            params, times["time/weight_transfer_s"] = self.transfer(learner.policy_params(state))
            fields = queue[-1]["host"] if queue else _host_fields(host)
            for s in range(t + len(queue), t + want):
                queue.append(self.generate(host, fields, params, s, version=t))
                fields = queue[-1]["host"]
        t_fill = time.time() - t0
        item = inflight_lib.decode(queue.pop(0), self.examples)
        host, episodes = _with_fields(host, item.host), item.episodes
        _, adv_key = jax.random.split(key)
        host, out, metrics = advantages(run, host, episodes, adv_key)
        episodes = with_advantages(episodes, out)
        batch = assemble(run, episodes, out)
        offpolicy = {}
        if (
            run.learner.recompute is not None
        ):  # π_old by the learner's forward: measured and corrected
            batch, offpolicy = run.learner.recompute(learner.policy_params(state), batch)
        if k:  # θ_t to the sampler before the update donates the learner's buffers
            params, times["time/weight_transfer_s"] = self.transfer(learner.policy_params(state))
        t1 = time.time()
        state, train_metrics = run.learner.train_step(state, batch)  # dispatched, not waited for
        if jax.process_count() > 1:  # the rollout's host collectives must not interleave with it
            jax.block_until_ready(train_metrics)
        stopped = None
        if k and t + k < run.spec.steps:  # the last steps generate nothing past the run
            fields = queue[-1]["host"] if queue else _host_fields(host)
            try:
                queue.append(self.generate(host, fields, params, t + k, version=t))
            except Interrupted as e:  # the update is kept, the rollout ahead dropped
                stopped = e
        t2 = time.time()
        train_metrics = jax.device_get({**offpolicy, **train_metrics})
        metrics = {**episodes.metrics, **rollout_metrics(episodes), **metrics}
        metrics.update({name: float(v) for name, v in train_metrics.items()})
        metrics.update(host.reward_stats["train"].as_metrics("reward_invalid/train"))
        if k:
            metrics["async/policy_lag"] = float(t - item.version)
        times["time/rollout_s"] = t_fill + (t2 - t1 if k else 0.0)
        times["time/train_s"], times["time/update_wait_s"] = time.time() - t1, time.time() - t2
        metrics.update(times)
        host = dataclasses.replace(host, step=t + 1, inflight=queue)
        if os.environ.get("MOJAX_DEBUG_HOST_STATE") == "1":  # multi-process: a divergence is a bug
            distributed.assert_same(f"host state after step {host.step}", host.to_dict())
        if stopped is not None:
            raise InterruptedAfterUpdate(stopped, host, state, metrics, episodes)
        return host, state, metrics, episodes
