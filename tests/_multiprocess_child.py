"""One process of ``test_multiprocess.py``'s helper test (started by ``launch/local_cluster.py``).

Checks, on a real ``jax.distributed`` cluster of CPU processes, what ``mojax.distributed`` promises:
the all-gathers, reading a global array, and that the tools of a row run on the process owning its
prompt group while every process sees every row's result. Prints one JSON line (``RESULT {...}``).
"""

import json
import sys
import types

from absl import flags

_COORD = flags.DEFINE_string("coordinator_address", None, "")
_NUM = flags.DEFINE_integer("num_processes", None, "")
_ID = flags.DEFINE_integer("process_id", None, "")


def main():
    flags.FLAGS(sys.argv)
    from mojax import distributed

    distributed.initialize(_COORD.value, _NUM.value, _ID.value)
    import jax
    import numpy as np

    from mojax import sharding as shl
    from mojax.rollout.calls import ToolRunner
    from mojax.rollout.rows import Row
    from mojax.rollout.tools import ToolPool
    from mojax.rollout.tools.result import ToolResult

    me = jax.process_index()
    gathered = distributed.allgather_objects({"me": me, "text": "x" * (10 + 1000 * me)})
    mesh = shl.make_mesh(jax.device_count(), 1, 1)
    rows = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    global_rows = jax.device_put(rows, shl.batch_sharding(mesh, shl.logical_axis_rules(), 2))
    read = distributed.host_value(global_rows)

    # 4 prompt groups x 2 samples: every row calls the tool; the owner of its group answers
    owners = distributed.owner_of_groups(4)
    owned = np.repeat(owners, 2) == me
    spec = types.SimpleNamespace(
        multi_turn=True, stateful=False, overlap_tools=False, decode_segment=0, tool_timeout_s=5.0
    )

    def tool(text):
        return ToolResult(output=f"process {me} ran {text}")

    with ToolPool(max_workers=2, timeout_s=5.0) as pool:
        runner = ToolRunner(spec, tool, pool, owned, "test", gather=True)
        calls = [Row(call_budget=1) for _ in range(8)]
        for i, row in enumerate(calls):
            row.call = f"call {i}"
        runner.submit(calls, list(range(8)))
        results = runner.results(calls)
        runner.close()
    out_scores = _score_split(me)
    out_judge = _judge_split()
    out = {
        "judge": out_judge,
        "layout": _layouts(mesh, rows),
        "scores": out_scores,
        "process": me,
        "count": jax.process_count(),
        "gathered": [(g["me"], len(g["text"])) for g in gathered],
        "read_equal": bool(np.array_equal(read, rows)),
        "owners": owners.tolist(),
        "results": {str(i): r.output for i, r in sorted(results.items())},
    }
    try:
        distributed.assert_same("process index", me)
        out["assert_same"] = "passed"
    except RuntimeError as e:
        out["assert_same"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)


def _layouts(mesh, rows):
    """``row_layout`` of 8 rows sharded over the processes and of 8 rows every process holds;
    ``read_local``, ``put_rows`` and ``gather_rows`` of the sharded rows."""
    import jax
    import numpy as np

    from mojax import distributed
    from mojax import sharding as shl

    me = jax.process_index()
    sharding = shl.batch_sharding(mesh, shl.logical_axis_rules(), 2)
    split = distributed.row_layout(shl.batch_sharding(mesh, shl.logical_axis_rules(), 1), 8)
    every = distributed.row_layout(None, 8)
    uneven = distributed.row_layout(shl.batch_sharding(mesh, shl.logical_axis_rules(), 1), 3)
    mine = np.where(split.local[:, None], rows, -1.0)  # the other process's rows: garbage
    put = distributed.host_value(distributed.put_rows(mine, sharding))
    global_rows = jax.device_put(rows, sharding)
    read = distributed.read_local(global_rows)
    # a batch with a scalar (AWPO's clip_eps): rows sharded, the scalar replicated
    batch = shl.shard_batch(
        {"advantages": rows[:, 0], "clip_eps": np.asarray(0.15, np.float32)},
        mesh,
        shl.logical_axis_rules(),
    )
    scalar_ok = float(distributed.host_value(batch["clip_eps"])) == np.float32(0.15)
    scalar_ok &= batch["clip_eps"].sharding.is_fully_replicated
    scalar_ok &= bool(np.array_equal(distributed.host_value(batch["advantages"]), rows[:, 0]))
    gathered, objects = distributed.gather_rows(
        split, {"x": mine}, {"name": [f"row {i}" if split.local[i] else None for i in range(8)]}
    )
    return {
        "split": [split.local.tolist(), split.owner.tolist(), split.shared, split.gathers],
        "every": [every.local.tolist(), every.owner.tolist(), every.shared, every.gathers],
        "uneven": [uneven.local.tolist(), uneven.owner.tolist(), uneven.shared, uneven.whole],
        "read_local": bool(np.array_equal(read, np.where(split.local[:, None], rows, 0))),
        "put_rows": bool(np.array_equal(put, rows)),
        "shard_batch_scalar": bool(scalar_ok),
        "gather_rows": bool(np.array_equal(gathered["x"], rows)),
        "gather_objects": objects["name"] == [f"row {i}" for i in range(8)],
        "global_max": distributed.global_max([me, 10 - me]).tolist(),
    }


def _score_split(me):
    """``score_owned`` on 4 groups x 2 rows: each process scores its own rows (it records them),
    and every process gets every row's reward, validity and invalid count."""
    from mojax.rewards.scoring import score_owned
    from mojax.tasks.framework.base import Example, Objective, RewardStats, Task

    class Count(Task):
        name, objectives, scalar_weights = "count", (Objective("x", 0.0, 100.0),), (1.0,)
        scored_here: list = []

        def score(self, response, example):
            self.scored_here.append(response)
            if response == "r5":
                raise ValueError("unparseable")  # invalid, counted
            return [float(response[1:])]

    task = Count()
    examples = [Example(id=f"e{p}", messages=[], target=None) for p in range(4) for _ in range(2)]
    stats = RewardStats()
    sb = score_owned(task, [f"r{i}" for i in range(8)], examples, 2, stats=stats)
    return {
        "scored_here": task.scored_here,
        "rewards": sb.rewards[:, 0].tolist(),
        "valid": sb.valid.tolist(),
        "invalid": stats.invalid,
        "scored": stats.scored,
    }


def _judge_split():
    """``judge_owned`` on 4 groups x 2 rows: each process calls the judge for its own rows only (one
    of process 1's calls fails), and every process gets every score and the summed counts."""
    import math

    from mojax.rewards.judge import judge_owned
    from mojax.tasks.framework.judge import JudgeBudget

    seen = []

    class Recording:
        def score(self, prompt, response, reference):
            seen.append(response)
            if response == "r6":
                raise TimeoutError("judge timed out")
            return int(response[1:]) / 10

    scores, counts = judge_owned(
        Recording(), ["p"] * 8, [f"r{i}" for i in range(8)], ["g"] * 8, 2, JudgeBudget(workers=2)
    )
    return {
        "judged_here": sorted(seen),
        "scores": [None if math.isnan(x) else round(float(x), 4) for x in scores],
        "counts": counts,
    }


if __name__ == "__main__":
    main()
