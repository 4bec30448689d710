"""An interrupt during start-up stops it, even when Python cannot raise it where it lands."""

from __future__ import annotations

import gc
import signal
import sys
import time
import weakref

import pytest

from ces_eval import cli


class _Held:
    """Something a weakref can watch."""


def _run_a_while() -> None:
    """Bytecode for the interpreter to run pending signal handlers in."""
    for _ in range(50):
        time.sleep(0.001)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_inside_a_weakref_callback_comes_again(
    signum: signal.Signals, capsys: pytest.CaptureFixture[str]
) -> None:
    watchers: list[weakref.ref[_Held]] = []

    # The import system's module locks drop their entries in weakref callbacks; a signal whose
    # handler runs there raises into a place where Python prints and drops the exception.
    def drop_a_watched_object() -> weakref.ref[_Held]:
        held = _Held()
        watcher = weakref.ref(held, lambda _: signal.raise_signal(signum))
        del held
        gc.collect()
        _run_a_while()
        return watcher

    with pytest.raises(cli.StartupInterrupted) as caught, cli._interruptible():
        watchers.append(drop_a_watched_object())
    assert caught.value.signal == signum.name
    assert watchers == []  # raised before the function returned
    assert "Exception ignored" not in capsys.readouterr().err


def test_other_unraisable_exceptions_reach_the_hook_before() -> None:
    seen: list[BaseException | None] = []
    before = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: seen.append(unraisable.exc_value)
    try:
        with cli._interruptible():
            held = _Held()
            watcher = weakref.ref(held, lambda _: 1 / 0)
            del held
            gc.collect()
            _run_a_while()
    finally:
        sys.unraisablehook = before
    assert watcher() is None
    assert [type(error) for error in seen] == [ZeroDivisionError]


def test_the_hooks_are_put_back() -> None:
    interrupts = (signal.SIGINT, signal.SIGTERM)
    hook, handlers = sys.unraisablehook, [signal.getsignal(signum) for signum in interrupts]
    with cli._interruptible():
        assert sys.unraisablehook is not hook
        assert [signal.getsignal(signum) for signum in interrupts] == [cli._interrupt] * 2
    assert sys.unraisablehook is hook
    assert [signal.getsignal(signum) for signum in interrupts] == handlers
