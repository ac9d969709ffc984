"""Work objects: torch's view of an op in flight. A Work holds the client handles of its op, the
tensors the sidecar may still write, and a finish step (the results copied where torch wants
them). wait() blocks in the client (GIL released) up to a deadline; get_future() hands the Work to
one completion thread that completes torch futures in submission order, so DDP comm hooks and
`.then` chains run without anyone polling."""
import atexit
import collections
import threading
import time

import torch
from torch._C import _distributed_c10d as _c10d

import korovod.session  # noqa: F401 - its atexit (closing the session) must run after ours
from korovod.torch.distributed import errors

_WorkBase = _c10d.Work


def _seconds(timeout):
    """A timeout as torch hands it (timedelta, milliseconds or None; zero or negative: none) in
    seconds, or None."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout) / 1000
    return s if s > 0 else None


class KorovodWork(_WorkBase):
    """handles: client handles; finish() -> the op's outputs (a list of tensors), run once after
    every handle completed; keep: what must outlive the op (staging tensors, CUDA events)."""

    def __init__(self, desc, handles, finish, timeout_s, keep=None):
        super().__init__()
        self._desc = desc
        self._handles = list(handles)
        self._finish = finish
        self._timeout_s = timeout_s
        self._keep = keep
        self._lock = threading.Lock()
        self._done = False
        self._result = None
        self._error = None
        self._future = None

    def _complete(self, timeout_s=None):
        """Waits (at most timeout_s, else the group's timeout) and finishes the op once; raises
        its error. A wait that times out leaves the op in flight (a later wait may still see it
        complete)."""
        limit = timeout_s if timeout_s is not None else self._timeout_s
        deadline = None if limit is None else time.monotonic() + limit
        if not self._lock.acquire(timeout=-1 if limit is None else limit):
            raise errors.timed_out(self._desc, limit)
        try:
            if not self._done:
                self._wait_handles(deadline, limit)
            if self._error is not None:
                raise self._error
            return self._result
        finally:
            self._lock.release()

    def _wait_handles(self, deadline, limit):
        """Under _lock."""
        error = None
        for h in self._handles:
            left = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                h.wait(left)
            except RuntimeError as e:
                if not h.poll():  # still in flight: our deadline, not the op's failure
                    raise errors.timed_out(self._desc, limit) from None
                error = error or e
        self._done = True
        if error is not None:
            self._error = errors.failed(self._desc, error)
        else:
            try:
                self._result = self._finish()
            except Exception as e:  # a result that cannot be written back (shape, device)
                self._error = errors.failed(self._desc, e)
        self._handles, self._keep, self._finish = [], None, None

    # ---- torch's Work interface ----

    def wait(self, timeout=None):
        self._complete(_seconds(timeout))
        return True

    def is_completed(self):
        if self._done:
            return True
        return all(h.poll() for h in list(self._handles))

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        return self._complete()

    def synchronize(self):
        self._complete()

    def get_future(self):
        if self._future is None:
            self._future = torch.futures.Future()
            _completer.add(self)
        return self._future

    def __repr__(self):
        return "KorovodWork(%s, %s)" % (self._desc, "done" if self._done else "in flight")


class CompletedWork(KorovodWork):
    """An op with nothing in flight (an empty group, a world of one): its result is ready."""

    def __init__(self, desc, result):
        super().__init__(desc, [], lambda: result, None)
        self._done = True
        self._result = result


class _Completer:
    """One daemon thread completing the futures of Works in the order they were asked for
    (ops of a group complete in that order anyway); it blocks in the client, never polls."""

    def __init__(self):
        self._queue = collections.deque()
        self._cv = threading.Condition()
        self._thread = None
        self._closing = False

    def add(self, work):
        with self._cv:
            self._queue.append(work)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="korovod-ptd-futures",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self, timeout_s=30.0):
        """At exit, before the session closes: the thread finishes what it was given and ends.
        A daemon thread still inside the client when the interpreter finalizes is ended by
        pthread_exit through pybind11's frames, which aborts the process ("terminate called
        without an active exception", seen at the exit of DDP runs with comm hooks)."""
        with self._cv:
            self._closing = True
            thread = self._thread
            self._cv.notify()
        if thread is not None:
            thread.join(timeout_s)

    def _run(self):
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                work = self._queue.popleft()
            try:
                result = work._complete()
            except BaseException as e:  # noqa: B902 - handed to the future's waiter
                work._future.set_exception(e)
            else:
                work._future.set_result(result)


_completer = _Completer()
# Registered after korovod.session's (imported above), so it runs before the session closes.
atexit.register(_completer.close)
