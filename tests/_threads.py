"""Which thread a sync method of a journal or store was called on."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def noting_this_thread(method: Callable[P, T], calls: list[bool]) -> Callable[P, T]:
    """`method`, appending to `calls`, at each call, whether it runs on this thread.

    Made from a test running on an event loop, it tells which calls the loop's thread
    made itself.
    """
    here = threading.get_ident()

    @functools.wraps(method)
    def noted(*args: P.args, **kwargs: P.kwargs) -> T:
        calls.append(threading.get_ident() == here)
        return method(*args, **kwargs)

    return noted
