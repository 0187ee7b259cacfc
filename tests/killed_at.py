"""``python tests/killed_at.py [--group] [--once=MARKER] [--signal=NAME] STEP SCRIPT ARGS...``: runs the entry point
``SCRIPT ARGS`` (run_pretrain.py, run_classifier.py, run_squad.py) and SIGKILLs it once a host loop ends at or after
``STEP``. Nothing is saved at that step (the kill comes before the checkpoint of a save step); the checkpoints before
it are. ``--signal=INT`` (or TERM) sends that signal instead, once, as a user's Ctrl-C or a preemption would: the run
handles it.

``--group`` kills the process group instead (a job runner and its run, as a scheduler ending the job would);
``--once=MARKER`` kills only while the file MARKER does not exist, creating it first (a job's rerun of the same
script then runs to the end).

The tests kill from inside, at a fixed step, rather than from the test once a checkpoint appears: the steps left
after one take about a second, and the test process polling for it can be held longer than that (its garbage
collector, the in-process tests beside it)."""

import argparse
import importlib.abc
import importlib.util
import os
import runpy
import signal
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` once the module ``name`` is imported: not before the script imports it, which
    would import TensorFlow before the script sets its environment (run_pretrain.py's --deterministic does)."""

    def __init__(self, name, patch):
        self.name, self.patch = name, patch

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.patch(module)

        spec.loader.exec_module = exec_module
        return spec


def main(argv):
    parser = argparse.ArgumentParser(prog="killed_at.py")
    parser.add_argument("--group", action="store_true")
    parser.add_argument("--once", metavar="MARKER")
    parser.add_argument("--signal", default="KILL", choices=["KILL", "INT", "TERM"])
    parser.add_argument("step", type=int)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)  # the script's, flags included
    parsed = parser.parse_args(argv)
    kill_at, group, once, script = parsed.step, parsed.group, parsed.once, os.path.abspath(parsed.script)
    signum = signal.Signals["SIG" + parsed.signal]
    sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` would have it

    def patch(setup):
        run_host_loops = setup.run_host_loops

        def killing(host_loop, **kwargs):
            step, sent = kwargs["start_step"], False

            def loop(steps, state):
                nonlocal step, sent
                out = host_loop(steps, state)
                step += int(steps)
                if step >= kill_at and not sent and not (once and os.path.exists(once)):
                    sent = True
                    if once:
                        open(once, "w").close()
                    if group:
                        os.killpg(0, signum)
                    os.kill(os.getpid(), signum)
                return out

            return run_host_loops(loop, **kwargs)

        setup.run_host_loops = killing

    sys.meta_path.insert(0, _AfterImport("xlnet_tf.training.setup", patch))
    sys.argv = [script, *parsed.args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
