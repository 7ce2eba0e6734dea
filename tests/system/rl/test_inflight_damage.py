"""Damaged in-flight rollouts in a checkpoint (``mojax.rl.state``; issue 49): each kind of
damage is named (never a bare ``KeyError`` / ``ValueError`` / ``binascii.Error``), including the
ones that used to decode silently, and ``valid_prefix`` moves the record aside to
``<workdir>/inflight.corrupt`` (numbered if taken) with one warning, keeping the records before it.

Each damage but the checksum and the schema cases is re-sealed (a correct checksum over damaged
contents: what a writer bug would leave), so the validation behind the checksum is exercised.
A damaged record in a real checkpoint of the golden run is ``tests/system/test_inflight_resume.py``'s.
"""

import copy
import json
import logging

import numpy as np
import pytest
from test_async_loop import _episodes

from mojax.infra.checkpoint import decode_host_state, encode_host_state
from mojax.rl import state as inflight

EXPECT = inflight.Expect(step=5, current=4, staleness=1, num_samples=2)


def _record(step=5, version=4):
    eps, by_id = _episodes()
    host = {"data": {"position": 3}, "tracker": {}, "train_stats": {"scored": 4}}
    d = inflight.encode(inflight.InFlight(step, version, eps, host))
    return decode_host_state(json.loads(json.dumps(encode_host_state(d)))), by_id  # checkpointed


def _b64(a):
    import base64

    return base64.b64encode(np.ascontiguousarray(a)).decode()


def _missing_key(d):
    del d["rewards"]


def _bad_base64(d):
    d["rollout"]["tokens"]["b64"] = d["rollout"]["tokens"]["b64"][:-3] + "!!="


def _num_samples_changed(d):
    d["num_samples"] = 1


def _num_samples_not_the_configs(d):  # consistent shapes, but 1 x 4 instead of the config's 2
    d["example_ids"], d["prompt_ids"], d["num_samples"] = ["e0"], [[1, 2]], 4
    for k, shape in (("rewards", (1, 4, 2)), ("valid", (1, 4)), ("kept", (1,))):
        a = np.zeros(shape, np.dtype(d[k]["dtype"]))
        d[k].update(shape=list(shape), b64=_b64(a))
    d["goal_weights"] = None


def _lengths_past_the_buffer(d):
    d["rollout"]["lengths"]["b64"] = _b64(np.array([6, 3, 7, 0], np.int32))


def _step_and_version_swapped(d):
    d["step"], d["version"] = d["version"], d["step"]


DAMAGE = {  # name: (damage, re-seal, what the error says)
    "missing key": (_missing_key, True, "key 'rewards' is missing"),
    "bad base64": (_bad_base64, True, "does not decode (Error: "),
    "num_samples changed": (_num_samples_changed, True, "do not hold 2 prompts x num_samples 1"),
    "num_samples not the config's": (_num_samples_not_the_configs, True, "num_samples 4, the"),
    "lengths past the buffer": (_lengths_past_the_buffer, True, "lengths 0..7 lie outside the"),
    "step and version swapped": (_step_and_version_swapped, True, "for RL step 4 where step 5"),
    "checksum mismatch": (lambda d: d["metrics"].update(x=1.0), False, "checksum mismatch"),
    "older schema": (lambda d: [d.pop("schema"), d.pop("sha256")], False, "schema 1 (written"),
}


def test_an_undamaged_record_passes_every_check():
    d, by_id = _record()
    item = inflight.decode(d, by_id, EXPECT)
    assert (item.step, item.version, item.episodes.num_samples) == (5, 4, 2)
    refill = inflight.Expect(step=5, current=5, staleness=1, num_samples=2)  # generated on resume
    assert inflight.decode(_record(5, 5)[0], by_id, refill).version == 5


@pytest.mark.parametrize("case", list(DAMAGE))
def test_each_damage_is_named(case):
    damage, reseal, says = DAMAGE[case]
    d, by_id = _record()
    damage(d)
    if reseal:
        inflight.seal(d)
    with pytest.raises(inflight.InFlightError) as info:
        inflight.decode(d, by_id, EXPECT)
    assert says in str(info.value)


@pytest.mark.parametrize("case", ["lengths past the buffer", "checksum mismatch"])
def test_a_damaged_record_is_moved_aside_once_with_one_warning(tmp_path, caplog, case):
    damage, reseal, says = DAMAGE[case]
    first, by_id = _record(5, 4)
    second, _ = _record(6, 5)
    bad = copy.deepcopy(second)
    damage(bad)
    if reseal:
        inflight.seal(bad)
    (tmp_path / "inflight.corrupt").write_text("{}\n")  # an earlier one: numbered
    expect = lambda j: inflight.Expect(5 + j, 4, 2, 2)  # noqa: E731
    with caplog.at_level(logging.WARNING):
        kept = inflight.valid_prefix([first, bad], by_id, expect, str(tmp_path))
    assert kept == [first]
    aside = tmp_path / "inflight.corrupt-1"
    assert json.loads(aside.read_text()) == json.loads(json.dumps(encode_host_state(bad)))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and says in warnings[0].getMessage()
    assert f"moved aside to {aside}" in warnings[0].getMessage()
    # the first record damaged: nothing kept, the rest dropped with it (built on its host state)
    assert inflight.valid_prefix([bad, first], by_id, lambda j: inflight.Expect(6 + j, 5, 2, 2),
                                 str(tmp_path)) == []  # fmt: skip
    assert (tmp_path / "inflight.corrupt-2").is_file()
