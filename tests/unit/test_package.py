"""The package imports without side effects and exposes its subpackages lazily."""

import subprocess
import sys


def test_import_mojax_has_no_side_effects():
    code = "import sys, mojax; assert 'jax' not in sys.modules, sorted(sys.modules); print(mojax.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.1.0"


def test_unknown_attribute_is_a_clear_error():
    import mojax

    try:
        mojax.not_a_module  # noqa: B018
    except AttributeError as e:
        assert "not_a_module" in str(e)
    else:
        raise AssertionError("expected AttributeError")
