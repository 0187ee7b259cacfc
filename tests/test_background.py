"""The background thread of the tests that only start processes (tests/background.py): each job's value or
exception reaches the test that asks, a hold keeps jobs from starting (a job the holder asks for, it runs itself),
the front runs queued jobs rather than wait idle, and a job's processes may not write to pytest's file
descriptors."""

import subprocess
import sys
import threading

import pytest

from background import Runner


def test_each_outcome_is_the_jobs_value_or_its_exception_in_order():
    runner, order = Runner(), []

    def ok():
        order.append("ok")
        return 1

    def bad():
        order.append("bad")
        raise AssertionError("the body's own message")

    runner.start([("ok", ok, None), ("bad", bad, None)])
    try:
        assert runner.outcome("ok") == 1
        with pytest.raises(AssertionError, match="the body's own message"):
            runner.outcome("bad")
        assert order == ["ok", "bad"]
        with pytest.raises(RuntimeError, match="never: not made on the background thread"):
            runner.outcome("never")
    finally:
        runner.stop()


def test_a_hold_keeps_jobs_from_starting_until_released():
    runner, ran = Runner(), threading.Event()
    runner.hold()
    runner.start([("job", ran.set, None)])
    try:
        assert not ran.wait(0.5)  # (a broken hold might still not have started it: this cannot fail wrongly)
        runner.release()
        assert ran.wait(60)
    finally:
        runner.stop()


def test_a_holder_asking_for_a_queued_job_runs_it_itself():
    runner = Runner()
    runner.hold()
    runner.start([("resource", lambda: threading.current_thread().name, None)])
    try:
        assert runner.outcome("resource") == threading.current_thread().name
    finally:
        runner.release()
        runner.stop()


def test_the_front_runs_the_last_job_while_the_one_it_needs_runs_on_the_thread():
    """The front asks for the job on the thread: it runs the queue's last job meanwhile, the thread the others;
    a job on the thread may wait for one the front runs. Every job runs once."""
    runner, ran, started = Runner(), [], threading.Event()
    front = threading.current_thread().name
    release = threading.Event()

    def on_thread():
        started.set()
        assert release.wait(60)
        return "slow"

    def last():
        release.set()  # the thread goes on (to "needs_resource") while this runs in front
        ran.append("last")
        return threading.current_thread().name

    def needs_resource():
        return runner.outcome("resource")  # made in front below, or already made: never an error

    def resource():
        return "made"

    runner.start([("slow", on_thread, None), ("resource", resource, None), ("needs", needs_resource, None),
                  ("last", last, None)])
    try:
        assert started.wait(60)
        assert runner.outcome("slow") == "slow"
        assert runner.outcome("last") == front and ran == ["last"]
        assert runner.outcome("needs") == "made"
        assert runner.summary()[0] == 4 and runner.summary()[2] >= 1
    finally:
        runner.stop()


def test_a_jobs_processes_must_capture_their_output():
    def inherits():
        subprocess.run([sys.executable, "-c", "pass"], timeout=60)

    def captures():
        return subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True, timeout=60).stdout

    runner = Runner()
    runner.start([("inherits", inherits, None), ("captures", captures, None)])
    try:
        with pytest.raises(RuntimeError, match="with its output on pytest's file descriptors: capture it"):
            runner.outcome("inherits")
        assert runner.outcome("captures") == "7\n"
    finally:
        runner.stop()
