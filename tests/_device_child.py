"""Child process of ``conftest.run_with_devices``: imports a function by file and name, calls it
with the pickled arguments and pickles its result (numpy arrays and plain data)."""

import importlib.util
import os
import pickle
import sys


def main(inp: str, out: str) -> None:
    with open(inp, "rb") as f:
        path, name, args, kwargs = pickle.load(f)
    sys.path.insert(0, os.path.dirname(path))  # the test's folder: its sibling helpers import
    spec = importlib.util.spec_from_file_location("_device_child_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = getattr(module, name)(*args, **kwargs)
    with open(out, "wb") as f:
        pickle.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
