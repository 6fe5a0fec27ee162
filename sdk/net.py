"""The one network policy of every cloud and price call, and the command's deadline.

Every client gpuprov makes (boto3, google-cloud-compute and -billing, azure-mgmt-compute and
azure-identity, the ``requests`` sessions of the anonymous price feeds) takes its settings from
here, through each SDK's own retry configuration (``sdk/aws.py``, ``sdk/gcp.py``,
``sdk/azure.py``, ``sdk/http.py``):

* a connect timeout and a read timeout (``network: {connect_timeout: 5, read_timeout: 20}`` in
  the config file, in seconds), each cut to what is left of the command's deadline;
* a connection that fails (refused, no DNS answer, the proxy refused or failed, TLS failed,
  no answer to connect in time) is tried again ``connect_retries`` times (default 2) with
  backoff, then the call fails as "cannot reach <cloud> <endpoint>" (``UnreachableError``,
  exit 4);
* a server that accepted the connection and then says nothing for the read timeout is not
  asked again (it is hung; asking again would only double the wait): "<endpoint> did not
  answer within N s" (``UnreachableError``);
* throttling and 5xx answers are retried by the SDK's own policy as before (botocore's standard
  mode, google-api-core's Retry, azure-core's RetryPolicy), and, for launches, paced by the
  apply engine's AIMD pacer: they are never reported as "cannot reach".

The deadline (``--deadline`` on ``status``, ``destroy``, ``apply``, ``rebalance``, ``commitments
discover``, ``pricing refresh``, ``pricing spot-advisor refresh``) is a wall-clock budget for
the whole command, started by the command: clients are made with timeouts no longer than it
leaves, retries stop when it has passed, every cloud is asked in its own thread and the
command stops waiting for one when it passes (``ask``), and the CLI's alarm ends a command
that is still running then: it releases the fleet's lease and says what it did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gpuprov.errors import DeadlineError

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0
CONNECT_RETRIES = 2
THROTTLE_ATTEMPTS = 5  # throttling and 5xx: attempts in all, the SDK's own backoff between them

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
PROCESS_START = time.monotonic()  # imported by gpuprov.cli at start: a deadline counts from here
ASK_MARGIN_S = 1.0  # a question gives up this long before the deadline, so the command can report


@dataclass(frozen=True, slots=True)
class Network:
    """The config file's ``network`` section."""

    connect_timeout: float = CONNECT_TIMEOUT_S
    read_timeout: float = READ_TIMEOUT_S
    connect_retries: int = CONNECT_RETRIES


class Deadline:
    """A wall-clock budget (``time.monotonic``) and a note of what the command has done so far."""

    def __init__(self, seconds: float, command: str, started: float | None = None) -> None:
        self.seconds = seconds
        self.command = command
        self.ends = (time.monotonic() if started is None else started) + seconds
        self._done: list[str] = []
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.ends

    def did(self, what: str) -> None:
        """Note progress, for the message when the deadline passes (the last note per kind wins)."""
        kind = what.split(" ", 1)[0]
        with self._lock:
            self._done = [d for d in self._done if d.split(" ", 1)[0] != kind] + [what]

    def error(self, doing: str = "") -> DeadlineError:
        with self._lock:
            done = "; ".join(self._done) or "nothing was changed"
        during = f" while {doing}" if doing else ""
        return DeadlineError(
            f"{self.command} stopped at its deadline of {self.seconds:g} s{during}: {done}",
            hint="run it again (it takes up where it stopped), or pass a longer --deadline",
        )

    def check(self, doing: str = "") -> None:
        if self.expired():
            raise self.error(doing)


_policy = Network()
_deadline: Deadline | None = None
_abandoned = False
_armed = False
_own_process = False  # set by the console script: the deadline counts from the process's start, the alarm rings


def configure(network: Network) -> None:
    """The config file's settings, for every client made from now on."""
    global _policy
    _policy = network


def policy() -> Network:
    return _policy


def claim_process() -> None:
    """The console script runs this process: deadlines count from its start and ring an alarm."""
    global _own_process
    _own_process = True


def start(seconds: float, command: str, alarm: bool = True, started: float | None = None) -> Deadline:
    """Start the command's deadline, counted from the process's start (from now when the CLI runs
    inside another program, such as a test). In the console script's own process, with
    ``alarm``, SIGALRM raises its ``DeadlineError`` in the main thread when it passes, wherever
    the command is then (a ``with`` lease is released on the way out)."""
    global _deadline, _armed, _abandoned
    if started is None:
        started = PROCESS_START if _own_process else time.monotonic()
    _deadline = Deadline(seconds, command, started=started)
    _abandoned = False
    if alarm and _own_process and threading.current_thread() is threading.main_thread():
        import signal

        def ring(_sig: int, _frame: object) -> None:
            if _armed and _deadline is not None:
                abandon()
                raise _deadline.error()

        signal.signal(signal.SIGALRM, ring)
        _armed = True
        signal.setitimer(signal.ITIMER_REAL, max(0.01, _deadline.remaining()))
    return _deadline


def disarm() -> None:
    """The command is over: its alarm must not ring (the deadline itself stays, for ``check``)."""
    global _armed
    if _armed:
        _armed = False
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)


def stop() -> None:
    """No deadline any more (tests)."""
    global _deadline
    disarm()
    _deadline = None


def abandon() -> None:
    """A worker thread was left waiting on the network: the process must not wait for it at exit."""
    global _abandoned
    _abandoned = True


def abandoned() -> bool:
    return _abandoned


def own_process() -> bool:
    return _own_process


def deadline() -> Deadline | None:
    return _deadline


def check(doing: str = "") -> None:
    if _deadline is not None:
        _deadline.check(doing)


def did(what: str) -> None:
    if _deadline is not None:
        _deadline.did(what)


def remaining(default: float) -> float:
    """What is left of the deadline, or ``default`` without one (never below 0.1 s)."""
    if _deadline is None:
        return default
    return max(0.1, min(default, _deadline.remaining()))


def waited() -> str:
    """How long a call that got no answer waited, for its error line."""
    connect, read = timeouts()
    return f"in time (connect {connect:g} s, read {read:g} s)"


def timeouts() -> tuple[float, float]:
    """(connect, read) seconds for a client made now: the policy's, cut to the deadline."""
    p = _policy
    return remaining(p.connect_timeout), remaining(p.read_timeout)


def ask_all(questions: Mapping[K, Callable[[], T]], what: Callable[[K], str]) -> dict[K, T | BaseException]:
    """Every question at once, each in its own daemon thread, all waited for until the same end
    (``ask``'s budget): each answer, or the exception it raised, or an ``UnreachableError`` for
    one that did not answer in time (its thread is abandoned)."""
    from gpuprov.errors import UnreachableError

    budget = None if _deadline is None else max(0.1, _deadline.remaining() - ASK_MARGIN_S)
    ends = None if budget is None else time.monotonic() + budget
    boxes: dict[K, dict[str, object]] = {k: {} for k in questions}
    events: dict[K, threading.Event] = {k: threading.Event() for k in questions}

    def run(key: K) -> None:
        try:
            boxes[key]["value"] = questions[key]()
        except BaseException as exc:  # handed to the caller's thread
            boxes[key]["error"] = exc
        finally:
            events[key].set()

    for key in questions:
        threading.Thread(target=run, args=(key,), name=f"gpuprov-ask-{what(key)[:20]}", daemon=True).start()
    out: dict[K, T | BaseException] = {}
    for key in questions:
        if not events[key].wait(None if ends is None else max(0.0, ends - time.monotonic())):
            abandon()
            out[key] = UnreachableError(f"{what(key)} did not answer before the command's deadline")
        elif "error" in boxes[key]:
            out[key] = boxes[key]["error"]  # type: ignore[assignment]
        else:
            out[key] = boxes[key]["value"]  # type: ignore[assignment]
    return out


def ask(fn: Callable[[], T], what: str) -> T:
    """One question as ``ask_all`` asks it."""
    answer = ask_all({0: fn}, lambda _k: what)[0]
    if isinstance(answer, BaseException):
        raise answer
    return answer
