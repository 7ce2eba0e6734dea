"""One process of ``test_multiprocess.py``'s rollout test (started by ``launch/local_cluster.py``).

The calculator rollout of ``test_rollout_sharding.py`` (every tool stop counts as a call) on a 2-process mesh (data = 2, one CPU
device each), serial and with decode segments + overlapping tools, and on the continuous engine
(one engine per process, over its own prompts, weights gathered from the 2-process mesh), against
the same rollout unsharded (static sampler) on this process's own device. During the 2-process rollouts it records:

* every ``process_allgather`` (the input's size): per round only a few ints may cross processes;
  the rows cross once, at the end (``gather_rows``, pickled bytes);
* that ``host_value`` (an all-gather of a whole global array) is never called;
* which process ran each tool call.

Prints one JSON line (``RESULT {...}``).
"""

import json
import sys

from absl import flags

_COORD = flags.DEFINE_string("coordinator_address", None, "")
_NUM = flags.DEFINE_integer("num_processes", None, "")
_ID = flags.DEFINE_integer("process_id", None, "")
_TMP = flags.DEFINE_string("tmp", None, "")


def _setup(tmp):
    import jax

    import mojax.models as mm
    from mojax.tasks.calculator import CalculatorTask, sft_demonstrations
    from mojax.tasks.framework.vocab import build_sentencepiece

    class EveryStopCalls(CalculatorTask):
        """Every tool stop is a call (a random model seldom writes a well-formed one); the
        calculator answers the unparseable ones with an error observation."""

        def parse_tool_call(self, text):
            return super().parse_tool_call(text) or text[-24:]

    task = EveryStopCalls()
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    texts = [
        chat.format(d.example.messages[0]["content"]) + d.response
        for d in sft_demonstrations(task.load("train", 200, seed=0))
    ]
    tags = ("<calc>", "</calc>", "<output>", "</output>", "<answer>", "</answer>")
    path = f"{tmp}/sp{jax.process_index()}.model"
    tok = mm.load_tokenizer(build_sentencepiece(texts, path, user_symbols=tags))
    vocab = -(-tok.vocab_size // 64) * 64
    cfg = mm.get_variant("tiny-qwen3", dtype="float32", vocab_size=vocab)
    with jax.default_device(jax.local_devices()[0]):
        model = mm.QwenModel(config=cfg, params=mm.init_params(cfg, jax.random.key(3)))
    prompts = [tok.encode(task.build_prompt(ex, tok)) for ex in task.load("validation", 8)]
    return task, tok, cfg, model, prompts


class _Recorder:
    """Patches the cross-process collectives and the calculator for the rollouts in between."""

    def __init__(self):
        from jax.experimental import multihost_utils

        from mojax import distributed
        from mojax.rollout.tools import Calculator

        self.gathers, self.host_values, self.ran = [], 0, []
        self._mu, self._d = multihost_utils, distributed
        self._orig = (multihost_utils.process_allgather, distributed.host_value)
        calc, me, ran = Calculator(), distributed.process_index(), self.ran

        def tool(text):
            ran.append([me, text])
            return calc.run(text)

        self.tool = tool

    def __enter__(self):
        gather, _ = self._orig

        def counted_gather(x, *a, **k):
            self.gathers.append(int(getattr(x, "size", 1)))
            return gather(x, *a, **k)

        def no_host_value(x):
            self.host_values += 1
            return self._orig[1](x)

        self._mu.process_allgather, self._d.host_value = counted_gather, no_host_value
        return self

    def __exit__(self, *exc):
        self._mu.process_allgather, self._d.host_value = self._orig


def _rows_counters(counters):
    """The counters of the rows' events (decode segments change the schedule's, not these)."""
    from mojax.rollout.agent import _SCHEDULE_COUNTERS

    schedule = (*_SCHEDULE_COUNTERS, "segments")  # the continuous engine's: its own schedule
    return {k: v for k, v in counters.items() if k not in schedule}


def main():
    flags.FLAGS(sys.argv)
    from mojax import distributed

    distributed.initialize(_COORD.value, _NUM.value, _ID.value)
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import mojax.models as mm
    from mojax.rollout import RolloutSpec, run_rollout
    from mojax.rollout.tools import Calculator
    from mojax.sampling.continuous.engine import ContinuousSampler

    task, tok, cfg, model, prompts = _setup(_TMP.value)
    mesh = Mesh(np.array(jax.devices()).reshape(2, 1, 1), ("data", "fsdp", "tensor"))
    sharded = model.replace(params=jax.device_put(model.params, mm.param_shardings(cfg, mesh)))
    spec = RolloutSpec.create(
        tok, task, max_new_tokens=32, max_turns=3, max_obs_tokens=16, temperature=1.0, top_p=0.95
    )
    kw = dict(key=jax.random.key(7), num_samples=4)
    with jax.default_device(jax.local_devices()[0]):
        ref = run_rollout(spec, model, tok, task, prompts, tool=Calculator(), **kw)
    out = {"process": jax.process_index(), "runs": {}}
    # one engine per process over its own prompts (weights gathered from the learner's mesh)
    continuous = ContinuousSampler(cfg, sharded.params, slots=4, mesh=mesh)
    runs = (
        ("serial", spec, sharded),
        ("overlap", spec.replace(decode_segment=8), sharded),
        ("continuous", spec, continuous),
    )
    for name, s, sampler in runs:
        s = s.replace(overlap_tools=name == "overlap")
        with _Recorder() as rec:
            got = run_rollout(s, sampler, tok, task, prompts, mesh=mesh, tool=rec.tool, **kw)
        out["runs"][name] = {
            "equal": bool(
                np.array_equal(got.tokens, ref.tokens)
                and np.array_equal(got.loss_mask, ref.loss_mask)
                and np.array_equal(got.n_calls, ref.n_calls)
                and got.texts == ref.texts
                and got.finish_reason == ref.finish_reason
                and _rows_counters(got.counters) == _rows_counters(ref.counters)
            ),
            "counters": got.counters,
            "ref_counters": ref.counters,
            "logprob_diff": float(np.abs(got.logprobs - ref.logprobs).max()),
            "gathers": rec.gathers,
            "host_values": rec.host_values,
            "ran": rec.ran,
            "calls_by_row": [[t.call for t in turns if t.call] for turns in got.turns],
            "tool_calls": got.counters.get("tool_calls", 0),
            "rows": len(got.texts),
        }
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
