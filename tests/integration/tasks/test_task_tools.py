"""The math task's tool (``MathTask.make_tool``) gets ``rollout.sandbox`` as its
``PythonSandbox(mode=...)``: the default fails closed with bwrap, and a bad value names the key."""

import types

import pytest

from mojax.rollout.tools import SandboxUnavailableError
from mojax.tasks.math import MathTask


def rollout(sandbox="bwrap"):
    return types.SimpleNamespace(tool_timeout_s=5.0, retrieval_url="", sandbox=sandbox)


class builders:  # noqa: N801 - the tool a run builds for a task name
    @staticmethod
    def build_tool(name, rollout_spec):
        assert name == "math"
        return MathTask().make_tool(rollout_spec, None)


def test_math_sandbox_mode_comes_from_rollout_sandbox():
    tool = builders.build_tool("math", rollout(sandbox="bwrap"))
    assert tool.requested_mode == "bwrap" and tool.mode == "bwrap"
    assert tool.run("print(6 * 7)").output.strip() == "42"
    # the base config's default is the fail-closed mode
    from mojax import defaults

    assert defaults.base_config().rollout.sandbox == "bwrap"


def test_math_sandbox_unsafe_fallback_only_by_name(caplog):
    # on a root host whose interpreter uid 65534 cannot read, the fallback refuses at construction;
    # either way the configured mode is the one the sandbox got
    try:
        with caplog.at_level("WARNING"):
            tool = builders.build_tool("math", rollout(sandbox="unsafe_fallback"))
    except SandboxUnavailableError as e:
        assert "PythonSandbox(mode='unsafe_fallback')" in str(e)
        return
    assert tool.mode == "unsafe_fallback"
    assert any("UNSAFE" in m for m in caplog.messages)


def test_bad_sandbox_value_names_the_key():
    with pytest.raises(ValueError, match=r"mode \(rollout.sandbox\) must be one of"):
        builders.build_tool("math", rollout(sandbox="none"))
