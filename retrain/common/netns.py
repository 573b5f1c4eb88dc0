"""Several "hosts" on one machine: Linux network namespaces joined by veth pairs to a bridge.

Why: the production stack's Celery workers (retrain.orchestration.stack) and the
parameter-server cluster's placed roles (components.ctr.cluster) must talk over a real
network path, with its own addresses, that tests can slow down or cut (`tc` on a host's
veth, `ip link set ... down`), without a second machine. The bridge gets `<subnet>.1` in
this (the root) namespace; host n (1-based, in the order given) gets `<subnet>.(10 + n)` on
its `eth0`, its root-side veth is `<prefix>-<name>h`. Needs root. Stdlib only.

`PrivateNetwork` is the other use: a namespace with loopback alone, for processes that must
reach each other and nobody else (the local PS cluster: TensorFlow's gRPC servers bind
every address, so only the namespace keeps them private). It is held by a file descriptor
of this process, not a name under /run/netns: it goes away with its last process, so a
SIGKILLed launcher leaves nothing behind. Creating one needs CAP_SYS_ADMIN (root), not `ip`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import os
import socket
import struct
import shlex
import subprocess
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
_CLONE_NEWNET = 0x40000000
IFNAME_MAX = 15


class NetworkError(RuntimeError):
    """An `ip` command failed; the message names the command and its error output."""


def run_cmd(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run an iproute2 command; a failure raises NetworkError naming it."""
    done = subprocess.run(cmd, text=True, capture_output=True)
    if check and done.returncode != 0:
        raise NetworkError(f"{shlex.join(cmd)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-400:]}")
    return done


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_cmd(["ip", *args], check)


@dataclasses.dataclass(frozen=True)
class NetHost:
    """One namespace host: its namespace, its address and its root-side veth."""
    name: str
    netns: str
    address: str
    veth: str

    def placement(self) -> dict:
        """This host as a value of components.ctr.cluster.ClusterSpec.hosts."""
        return {"netns": self.netns, "address": self.address}


@dataclasses.dataclass(frozen=True)
class Network:
    """A bridge in the root namespace and one namespace per host name."""
    prefix: str                  # names: <prefix>-br, namespaces <prefix>-<host>
    subnet: str                  # first three octets of the /24: bridge .1, host n .(10 + n)
    hosts: tuple[str, ...] = ()

    def __post_init__(self):
        too_long = [n for n in (self.bridge, *(self.host(h).veth for h in self.hosts))
                    if len(n) > IFNAME_MAX]
        if too_long:
            raise ValueError(f"interface names longer than {IFNAME_MAX} characters: "
                             f"{too_long}; use a shorter prefix or host names")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (reachable from every host)."""
        return f"{self.subnet}.1"

    def host(self, name: str) -> NetHost:
        if name not in self.hosts:
            raise KeyError(f"no host {name!r} in network {self.prefix} ({list(self.hosts)})")
        return NetHost(name, f"{self.prefix}-{name}",
                       f"{self.subnet}.{10 + self.hosts.index(name) + 1}",
                       f"{self.prefix}-{name}h")

    def up(self) -> "Network":
        """Create what is missing (bridge, namespaces, veths); existing hosts stay as they are."""
        if os.geteuid() != 0:
            raise NetworkError("network namespaces need root")
        if ip("link", "show", self.bridge, check=False).returncode != 0:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for name in self.hosts:
            h = self.host(name)
            if ip("netns", "pids", h.netns, check=False).returncode == 0:
                continue                                   # already there (an earlier up)
            ip("netns", "add", h.netns)
            ip("link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            ip("link", "set", h.veth, "master", self.bridge, "up")
            ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
            ip("-n", h.netns, "link", "set", "eth0", "up")
            ip("-n", h.netns, "link", "set", "lo", "up")   # a host's own services use loopback
        return self

    def down(self) -> None:
        """Delete every host's namespace (its veth goes with it) and the bridge."""
        for name in self.hosts:
            ip("netns", "del", self.host(name).netns, check=False)
        ip("link", "del", self.bridge, check=False)


def exec_prefix(netns: str | None) -> list[str]:
    """The command prefix that runs a program inside `netns`. `ip netns exec` execs the
    program in its own process (same pid), so signals and process groups reach it."""
    return ["ip", "netns", "exec", netns] if netns else []


def netns_pids(netns: str) -> list[int]:
    """Processes inside `netns` ([] when it has none or does not exist)."""
    out = ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split()]


def free_subnet(first_two: str = "10.214") -> str:
    """A `<first_two>.X` /24 that no interface or route here uses yet."""
    used = ip("-4", "addr").stdout + ip("-4", "route").stdout
    for x in range(20, 250):
        if f"{first_two}.{x}." not in used:
            return f"{first_two}.{x}"
    raise NetworkError(f"no free /24 under {first_two}.0.0/16")


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """fn() called from inside `netns` (None: here). It runs in a short-lived thread that
    alone enters the namespace, so this process's own namespace never changes."""
    if not netns:
        return fn()

    def enter():
        with open(f"/run/netns/{netns}") as f:
            _setns(f.fileno(), netns)
    return _in_thread(enter, fn, f"netns-{netns}")


def _libc():
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(fd: int, what: str, libc=None) -> None:
    if (libc or _libc()).setns(fd, _CLONE_NEWNET) != 0:
        raise NetworkError(f"setns into {what} failed: {os.strerror(ctypes.get_errno())}")


def _in_thread(enter: Callable[[], None], fn: Callable[[], T], name: str) -> T:
    """fn() in a short-lived thread that alone has run enter() (which changes its network
    namespace): this process's other threads never change namespace."""
    box: dict = {}

    def target():
        try:
            enter()
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e
    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    """`ip link set lo up` without `ip`: an ioctl on a socket of the calling thread's
    namespace (a new namespace's loopback starts down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", ifreq)[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


class PrivateNetwork:
    """A fresh network namespace with only loopback, held by this process (see the module
    docstring). `call(fn)` runs fn inside it; `enter` is a preexec_fn that puts a child
    there before it execs; `close()` lets it go once its processes have exited."""

    def __init__(self, fd: int):
        self.fd = fd
        self._libc = _libc()            # loaded here: a preexec_fn must not load libraries

    @classmethod
    def create(cls) -> "PrivateNetwork":
        """A new namespace, loopback up; NetworkError (saying why) where none can be made:
        without CAP_SYS_ADMIN (not root, or a container without it) unshare is refused."""
        def make() -> int:
            libc = _libc()
            if libc.unshare(_CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise NetworkError(f"cannot create a network namespace: unshare(CLONE_NEWNET) "
                                   f"failed: {os.strerror(err)} (needs CAP_SYS_ADMIN: root, "
                                   f"outside a container that withholds it; euid here "
                                   f"{os.geteuid()})")
            fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _loopback_up()
            except OSError as e:
                os.close(fd)
                raise NetworkError(f"cannot bring up loopback in a new namespace: {e}") from e
            return fd
        return cls(_in_thread(lambda: None, make, "netns-private"))

    @property
    def inode(self) -> int:
        """Its identity (what /proc/<pid>/ns/net of a process inside it stats to)."""
        return os.fstat(self.fd).st_ino

    def call(self, fn: Callable[[], T]) -> T:
        if self.fd < 0:
            raise NetworkError("private network namespace already closed")
        return _in_thread(lambda: _setns(self.fd, "the private namespace"), fn, "netns-private")

    def enter(self) -> None:
        """preexec_fn: the child joins the namespace (async-signal-safe: one syscall). The
        descriptor is close-on-exec, so the program itself does not hold it."""
        if self._libc.setns(self.fd, _CLONE_NEWNET) != 0:
            os._exit(126)   # never run a role outside the namespace it was meant for

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
