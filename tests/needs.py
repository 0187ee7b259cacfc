"""What a test needs from the machine: missing test dependencies are a failure under CI=true, a skip elsewhere."""

import os

import pytest

# CI runs with CI=true (.ci/run): there, a test dependency or compiler that is missing would hide every test that
# needs it behind a skip, and a green run would mean less than it says. A developer without them may skip.
IN_CI = os.environ.get("CI", "").lower() == "true"


def skip_unless_ci(reason: str):
    """Skips the calling test (or module, at import) with ``reason``; under CI=true fails with it instead."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing test dependency is a failure, not a skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str, extra: str = "test"):
    """``import module``, or ``skip_unless_ci`` naming it and the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        skip_unless_ci(f"{module} is not importable ({error}); it is in the '{extra}' extra: "
                       f"pip install -e '.[{extra}]'")


def require_compiler():
    """The C++ compiler the custom kernels build with (xlnet_tf.ops' own choice), or ``skip_unless_ci``."""
    from xlnet_tf import ops

    compiler = ops._compiler()  # pylint: disable=protected-access - the build's own choice ($CXX, else PATH)
    if compiler is None:
        skip_unless_ci("no C++ compiler on PATH (c++, g++, clang++) and no $CXX: the custom kernels cannot be "
                       "built here (the plain ops run instead)")
    return compiler
