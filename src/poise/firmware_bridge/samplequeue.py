"""The threaded link's queue of decoded sensor samples: ``queue.Queue``'s interface without
its locks where nobody waits.

A control loop reads the port itself (:meth:`~poise.firmware_bridge.transport.SerialLink.
next_sensors`): the sample it decodes is put here and taken back at once, every cycle, by the
same thread. ``queue.Queue`` takes its mutex and signals a condition for each ``put``,
``get_nowait`` and ``qsize`` (~1.5 µs a cycle on the reference machine, several times that with
the cold caches of a loop that sleeps between frames). Here ``put_nowait`` and ``get_nowait``
are a ``deque``'s ``append`` and ``popleft``, atomic under the GIL; the condition is taken only
when a thread blocks in :meth:`SampleQueue.get` (while no loop reads the port).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class SampleQueue(Generic[T]):
    """A bounded FIFO for one consumer at a time (see the module docstring).

    Args:
        maxsize: capacity (> 0); :meth:`full` tells the producer to drop the oldest first.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError(f"SampleQueue needs a capacity > 0, got {maxsize}")
        self.maxsize = maxsize
        self._items: deque[T] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._waiting = 0  # threads blocked in get()

    def qsize(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def put_nowait(self, item: T) -> None:
        """Append ``item`` (the caller made room: :meth:`full`); wakes a blocked :meth:`get`.

        Raises:
            queue.Full: no room.
        """
        items = self._items
        if len(items) >= self.maxsize:
            raise queue.Full
        items.append(item)
        if self._waiting:  # read after the append: a getter either sees it or is counted
            with self._ready:
                self._ready.notify()

    def get_nowait(self) -> T:
        """The oldest item. Raises ``queue.Empty`` when there is none."""
        try:
            return self._items.popleft()
        except IndexError:
            raise queue.Empty from None

    def get(self, timeout: float | None = None) -> T:
        """The oldest item, waiting up to ``timeout`` s (``None``: forever).

        Raises:
            queue.Empty: nothing came in time.
        """
        items = self._items
        if items:
            return items.popleft()
        with self._ready:
            self._waiting += 1
            try:
                if not self._ready.wait_for(lambda: items, timeout):
                    raise queue.Empty
            finally:
                self._waiting -= 1
        try:
            return items.popleft()
        except IndexError:  # another consumer took it first
            raise queue.Empty from None


__all__ = ["SampleQueue"]
