"""Network faults between namespace hosts (retrain.common.netns), for tests and benchmarks.

Why: a cluster that only ever ran on a perfect loopback says nothing about a slow switch,
a flaky path or a cut cable. This kernel has no `netem` qdisc, so delay and connection
resets come from a small TCP proxy (`FaultProxy`) put in the path, and bandwidth from a
`tbf` qdisc on a veth (`limit_rate`); a cut is `ip link set <veth> down` (`set_link`).
Needs root for tc and links; the proxy needs nothing. Stdlib only.
"""
from __future__ import annotations

import contextlib
import queue
import random
import socket
import struct
import threading
import time
from typing import Callable, Iterator

from retrain.common.netns import NetHost, ip, run_cmd


def limit_rate(dev: str, rate: str, netns: str | None = None, burst: str = "32kb",
               latency: str = "400ms") -> None:
    """Cap what `dev` sends to `rate` (tc syntax: "2mbit") with a token bucket."""
    where = ["-n", netns] if netns else []
    run_cmd(["tc", *where, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
             "burst", burst, "latency", latency])


def clear_rate(dev: str, netns: str | None = None) -> None:
    where = ["-n", netns] if netns else []
    run_cmd(["tc", *where, "qdisc", "del", "dev", dev, "root"], check=False)


def set_link(dev: str, up: bool) -> None:
    """Bring a (root-side) link up or down: down is a cut cable, nothing passes."""
    ip("link", "set", dev, "up" if up else "down")


@contextlib.contextmanager
def slow_lossy_path(host: NetHost, listen: str, target: Callable[[], str], rate: str,
                    delay_s: float, reset_every_s: float, max_resets: int,
                    seed: int = 0) -> Iterator["FaultProxy"]:
    """The path to `host` made slow (`rate` both ways on its link) and lossy (a FaultProxy
    on `listen` in front of `target`, which callers route through it); undone on exit."""
    proxy = FaultProxy(listen, target, delay_s=delay_s, reset_every_s=reset_every_s,
                       max_resets=max_resets, seed=seed)
    try:
        limit_rate(host.veth, rate)
        limit_rate("eth0", rate, netns=host.netns)
        yield proxy
    finally:
        proxy.close()
        clear_rate(host.veth)
        clear_rate("eth0", netns=host.netns)


class FaultProxy:
    """A TCP proxy that delays every byte by `delay_s` each way and, at most once per
    `reset_every_s` (jittered) and at most `max_resets` times, resets a connection that is
    carrying data (RST, as a dying middlebox does) - only after `arm_resets()`: a reset
    while a cluster starts is a start-up failure, not the path fault being tested. The target is asked for at each new connection (`target()` -> "ip:port"), so it
    can be started before the server it fronts has its port. Seeded: the same faults each run.
    """

    def __init__(self, listen: str, target: Callable[[], str], delay_s: float = 0.0,
                 reset_every_s: float = 0.0, max_resets: int = 0, seed: int = 0):
        self.target, self.delay_s, self.reset_every_s = target, delay_s, reset_every_s
        self.max_resets = max_resets   # 0: no cap
        self.resets = self.connections = 0
        self._rng = random.Random(seed)
        self._next_reset = 0.0
        self._armed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._open: set[socket.socket] = set()
        self._server = socket.create_server((listen, 0))
        self.address = f"{listen}:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    def arm_resets(self) -> None:
        """Start resetting connections (the first reset comes about `reset_every_s` later);
        calling it again changes nothing."""
        with self._lock:
            if not self._armed:
                self._armed = True
                self._schedule_next(time.monotonic())

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            for s in list(self._open):
                _close(s)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                host, _, port = self.target().rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=5)
                upstream.settimeout(None)
            except (OSError, ValueError):
                _close(client)
                continue
            with self._lock:
                self.connections += 1
                self._open.update((client, upstream))
            pair = (client, upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                line: queue.Queue = queue.Queue()
                threading.Thread(target=self._read, args=(src, line, pair), daemon=True).start()
                threading.Thread(target=self._write, args=(dst, line, pair), daemon=True).start()

    def _read(self, src, line: queue.Queue, pair) -> None:
        """Timestamp every chunk; the writer sends it `delay_s` later (a delay line, so
        latency grows but throughput does not shrink)."""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            line.put((time.monotonic() + self.delay_s, data))
            if not data:
                return
            if self._due_reset():
                self._reset(pair)

    def _write(self, dst, line: queue.Queue, pair) -> None:
        while True:
            due, data = line.get()
            if not data:
                _shutdown(dst)
                return
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                self._reset(pair)
                return

    def _due_reset(self) -> bool:
        if not (self._armed and self.reset_every_s):
            return False
        with self._lock:
            now = time.monotonic()
            if now < self._next_reset or (self.max_resets and self.resets >= self.max_resets):
                return False
            self.resets += 1
            self._schedule_next(now)
            return True

    def _schedule_next(self, now: float) -> None:
        """Jittered gaps (0.5-1.5 x reset_every_s): resets do not keep the trainer's rhythm."""
        self._next_reset = now + self.reset_every_s * (0.5 + self._rng.random())

    def _reset(self, pair) -> None:
        with self._lock:
            for s in pair:
                if s in self._open:
                    self._open.discard(s)
                    _close(s, rst=True)


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close(s: socket.socket, rst: bool = False) -> None:
    """Close; with rst the peer sees "connection reset" (SO_LINGER 0), and a thread
    blocked reading it wakes up (SHUT_RD) so the socket is really released."""
    try:
        if rst:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
