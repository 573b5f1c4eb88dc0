"""Run the parameter-server trainer as a real local cluster of separate processes.

Why: the Airflow train task (and tests, benchmarks) need the same multi-process topology
as production - N parameter servers, M workers and a coordinator (the chief), each its
own OS process with its own `TF_CONFIG` - on one machine, on free 127.0.0.1 ports.
The launcher streams every process's output with its role as prefix (`[ps/0] ...`),
restarts a worker that dies (the coordinator reschedules its work), fails clearly when a
parameter server dies, and tears every process down on success, failure or when it is
itself terminated: each child runs in its own process group, is killed by group, and
also gets SIGKILL from the kernel if the launcher dies (PR_SET_PDEATHSIG), so nothing is
orphaned. Its own files (the chief's spec and result) sit beside the model's folder, in the
run's folder (`.<out_dir name>.cluster-<pid>-<host>-XXXX`), removed on every exit.

Nobody else reaches the cluster: TensorFlow's gRPC server binds `0.0.0.0:<port>` whatever
address TF_CONFIG names (tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc; the
literal is in libtensorflow_cc.so), so anyone who reached the host could read or write the
variables mid-training. With `isolation="auto"` (the default) an unplaced cluster runs in a
private network namespace of its own with loopback alone (retrain.common.netns
.PrivateNetwork): ps, workers and chief reach each other on 127.0.0.1 there, no other
namespace or host reaches them. Where no namespace can be made (not root, a container
without CAP_SYS_ADMIN) "auto" says so: a WARNING in the log and `isolation` in the result
name the reason and that the ports are open; `isolation="netns"` fails the run instead,
`"none"` opts out (logged too). Placed clusters (`hosts`) are isolated by their hosts'
namespaces; their chief and any unplaced role serve here, on every address of this one.

`ps_memory_limit_mb` enforces a per-parameter-server memory limit the way a container
runtime's OOM killer does: the launcher samples each ps's private (anonymous) resident
memory every 0.2 s and SIGKILLs a ps above the limit. Private, because the other ~0.4 GB
of a TensorFlow process's RSS are shared library pages every process on the host shares;
RLIMIT_AS cannot be used: TensorFlow reserves far more virtual address space than it
touches. Peak total RSS (VmHWM) and peak private memory per process are reported.

Roles can be placed on other hosts (`hosts`): network namespaces joined by a bridge
(retrain.common.netns), each role there started through `ip netns exec` (which execs, so
the role keeps its pid and process group and teardown reaches it) and serving on its
host's address; TF_CONFIG names every task's address. The chief stays here and serves on
`host`, which must then be an address the namespaces reach (the bridge's). A parameter
server behind a cut link does not die, its RPCs just stall: with
`ps_unreachable_timeout_s` the launcher dials each ps's port every second and fails the
run (ClusterFailed; a retry resumes from the last checkpoint) once one stayed unreachable
that long after it had answered (one that never answered fails after
`startup_timeout_s`). A worker behind a cut link is the coordinator's business: it reschedules
(but TensorFlow's coordinator can also wait forever on an RPC the cut lost, which happened
once in a 20 s worker cut here: with `stall_timeout_s` the launcher fails the run typed when
the trainer's progress file has not moved for that long, and the retry resumes from the last
checkpoint; set it above the time between two checkpoints).
`routes` makes every other process dial a task at another address (a proxy in between).

    python -m components.ctr.cluster --spec '{"train": {"preprocess_dir": "...",
        "out_dir": "..."}, "num_ps": 2, "num_workers": 2}'

Stdlib only: DAG files import the spec; TensorFlow loads only in the children.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from retrain.common.atomic import check_replaceable
from retrain.common.errors import BAD_DATA, BadData
from retrain.common.netns import NetworkError, PrivateNetwork, exec_prefix, in_netns
from retrain.common.paths import output_dir_of
from retrain.common.processes import die_with_parent, scratch_dir
from retrain.common.step import main

log = logging.getLogger("retrain.cluster")

TRAINER_MODULE = "components.ctr.ps_train"
ISOLATIONS = ("auto", "netns", "none")


class ClusterFailed(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Host:
    """Where a placed task runs: a network namespace and the address it serves on there."""
    netns: str
    address: str


@dataclasses.dataclass
class ClusterSpec:
    train: dict = dataclasses.field(default_factory=dict)  # ps_train.PsTrainSpec fields
    # Also accepted here, outside `train`, so a caller's run-folder logic (lineage
    # fingerprints, which ignore top-level output paths) sees them like any step's paths.
    preprocess_dir: str | None = None
    out_dir: str | None = None
    num_ps: int = 1
    num_workers: int = 1
    host: str = "127.0.0.1"
    max_worker_restarts: int = 3  # per worker
    ps_memory_limit_mb: int = 0   # 0: none; a ps above it (private RSS) is killed, like an OOM kill
    status_file: str | None = None  # JSON with pids/ports of every role, for tests and ops
    startup_timeout_s: float = 300.0
    ps_failure_grace_s: float = 60.0  # time the coordinator gets to report a dead ps itself
    # Placement: role ("ps", "worker") or task ("ps/1") -> {"netns": ..., "address": ...};
    # a task key wins over its role's. Unplaced tasks and the chief run here on `host`.
    hosts: dict[str, dict] = dataclasses.field(default_factory=dict)
    # Task -> "ip:port" the other processes dial instead of its own (a proxy in between).
    routes: dict[str, str] = dataclasses.field(default_factory=dict)
    ps_unreachable_timeout_s: float = 0.0  # 0: off; see the module docstring
    stall_timeout_s: float = 0.0  # 0: off; no new checkpointed step for this long fails the run
    # Who can reach the cluster's ports (module docstring): "auto" a private network
    # namespace where one can be made, else said loudly; "netns" that or fail; "none" off.
    isolation: str = "auto"


def placement(spec: ClusterSpec) -> dict[str, Host]:
    """Task name ("ps/0") -> its Host, for the placed tasks; a wrong key names itself."""
    tasks = [f"ps/{i}" for i in range(spec.num_ps)] + \
        [f"worker/{i}" for i in range(spec.num_workers)]
    out = {}
    for key, value in spec.hosts.items():
        if key not in ("ps", "worker") and key not in tasks:
            raise ValueError(f"ClusterSpec.hosts: {key!r} is not a role (ps, worker) or a "
                             f"task of this cluster (the chief runs where the launcher runs)")
        if not isinstance(value, dict) or set(value) != {"netns", "address"}:
            raise ValueError(f"ClusterSpec.hosts[{key!r}] needs exactly the keys netns and "
                             f"address")
    for task in tasks:
        value = spec.hosts.get(task) or spec.hosts.get(task.split("/")[0])
        if value:
            out[task] = Host(**value)
    if out and spec.host.startswith("127."):
        raise ValueError("ClusterSpec.host is a loopback address, which the namespace "
                         "hosts cannot reach: set it to the bridge's address")
    unknown = sorted(set(spec.routes) - set(tasks))
    if unknown:
        raise ValueError(f"ClusterSpec.routes: {unknown} are not tasks of this cluster")
    return out


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cluster_def(num_ps: int, num_workers: int, host: str = "127.0.0.1",
                placed: dict[str, Host] | None = None, private=None) -> dict:
    """Every task's address; a placed task's port is free in its own namespace, an unplaced
    one's in `private` (a PrivateNetwork) when given."""
    tasks = ["chief/0"] + [f"ps/{i}" for i in range(num_ps)] + \
        [f"worker/{i}" for i in range(num_workers)]
    groups: dict[tuple[str | None, str], list[str]] = {}
    for task in tasks:
        where = (placed or {}).get(task)
        groups.setdefault((where.netns, where.address) if where else (None, host),
                          []).append(task)
    address = {}
    for (netns, addr), names in groups.items():
        find = functools.partial(free_ports, len(names), addr)
        ports = private.call(find) if private and netns is None else in_netns(netns, find)
        address.update({name: f"{addr}:{port}" for name, port in zip(names, ports)})
    return {role: [address[f"{role}/{i}"] for i in range(n)]
            for role, n in (("chief", 1), ("ps", num_ps), ("worker", num_workers))}


def tf_config(cluster: dict, role: str, index: int, routes: dict[str, str] | None = None) -> str:
    """TF_CONFIG of one task: the others at their routed address, itself at its own."""
    view = {r: [(routes or {}).get(f"{r}/{i}", a) if (r, i) != (role, index) else a
                for i, a in enumerate(addrs)] for r, addrs in cluster.items()}
    return json.dumps({"cluster": view, "task": {"type": role, "index": index}})


_die_with_parent = die_with_parent(signal.SIGKILL)


def _rss_kb(pid: int) -> tuple[int, int]:
    """(private RSS, peak total RSS) in kB from /proc, (0, 0) if the process is gone.

    Private = RssAnon: the process's own memory. The rest of its RSS is file-backed
    (TensorFlow's ~0.4 GB of shared libraries), shared by every process on the host.
    """
    anon = peak = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return anon, peak


def _reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class _PsProbe:
    """Dials every parameter server's port once a second; `lost()` names the first one
    unreachable for `timeout_s` since it last answered (a cut link: the process lives, its
    RPCs just stall). One that never answered yet is starting: it gets `startup_s`."""

    def __init__(self, cluster: dict, timeout_s: float, startup_s: float, dial=None):
        self.addresses = {f"ps/{i}": a for i, a in enumerate(cluster["ps"])}
        self.dial = dial or _reachable
        self.timeout_s, self.startup_s = timeout_s, max(startup_s, timeout_s)
        self.last_seen: dict[str, float] = {}
        self.started = time.time()
        self.next_probe = 0.0

    def lost(self) -> str | None:
        now = time.time()
        if not self.timeout_s or now < self.next_probe:
            return None
        self.next_probe = now + 1.0
        for name, address in self.addresses.items():
            if self.dial(address):
                self.last_seen[name] = time.time()
            elif name in self.last_seen and now - self.last_seen[name] >= self.timeout_s:
                return (f"parameter server {name} unreachable at {address} for "
                        f"{self.timeout_s:g} s")
            elif name not in self.last_seen and now - self.started >= self.startup_s:
                return (f"parameter server {name} never reachable at {address} in "
                        f"{self.startup_s:g} s")
        return None


class _StallWatch:
    """Reads the trainer's progress file once a second; `stalled()` says so once the step in
    it has not moved for `timeout_s` since it last moved in this run (a resumed run's old
    file does not start the clock, so start-up and restore are not counted)."""

    def __init__(self, path: Path, timeout_s: float, clock=time.monotonic):
        self.path, self.timeout_s, self.clock = path, timeout_s, clock
        self.step, self.since, self.next_read = self._read(), None, 0.0

    def _read(self):
        try:
            return json.loads(self.path.read_text()).get("step")
        except (OSError, ValueError, AttributeError):
            return None

    def stalled(self) -> str | None:
        now = self.clock()
        if not self.timeout_s or now < self.next_read:
            return None
        self.next_read = now + 1.0
        step = self._read()
        if step != self.step:
            self.step, self.since = step, now
        elif self.since is not None and now - self.since >= self.timeout_s:
            return (f"no training progress for {self.timeout_s:g} s after step {step} "
                    "(a coordinator waiting on a lost RPC never ends by itself)")
        return None


class _Proc:
    def __init__(self, name: str, cmd: list[str], env: dict, sink, enter=None):
        self.name, self.cmd, self.env, self.sink = name, cmd, env, sink
        self.enter = enter              # preexec step that moves it into its namespace
        self.restarts = 0
        self.peak_kb = 0
        self.peak_private_kb = 0
        self.popen: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.popen = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, errors="replace",
                                      start_new_session=True, preexec_fn=self._preexec)
        self.thread = threading.Thread(target=self._pump, args=(self.popen,), daemon=True)
        self.thread.start()
        log.info("started %s pid %d", self.name, self.popen.pid)

    def _preexec(self) -> None:         # in the child, between fork and exec
        _die_with_parent()
        if self.enter is not None:
            self.enter()

    def _pump(self, popen) -> None:
        for line in popen.stdout:
            self.sink(f"[{self.name}] {line.rstrip()}")

    def poll(self):
        return self.popen.poll() if self.popen else None

    def sample(self) -> int:
        cur, peak = _rss_kb(self.popen.pid) if self.popen else (0, 0)
        self.peak_kb = max(self.peak_kb, peak)
        self.peak_private_kb = max(self.peak_private_kb, cur)
        return cur

    def kill(self, sig=signal.SIGTERM) -> None:
        if self.popen and self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass


def _default_sink(line: str) -> None:
    print(line, flush=True)


def run(spec: ClusterSpec, sink=None) -> dict:
    """Start ps + workers + coordinator, supervise them, always tear everything down."""
    if spec.num_ps < 1 or spec.num_workers < 1:
        raise ValueError(f"need at least 1 ps and 1 worker, got {spec.num_ps} ps, "
                         f"{spec.num_workers} workers")
    train = dict(spec.train)
    for key in ("preprocess_dir", "out_dir"):
        if getattr(spec, key):
            if train.get(key, getattr(spec, key)) != getattr(spec, key):
                raise ValueError(f"{key} given twice with different values")
            train[key] = getattr(spec, key)
        if key not in train:
            raise ValueError(f"train spec needs {key!r}")
    check_replaceable(train["out_dir"])   # before the cluster starts, not at the export
    sink = sink or _default_sink
    # The chief's spec and result: beside the model's folder, in the run's own folder
    # (removed on every exit; a SIGKILLed launcher leaves it inside that run, never in
    # the system temp dir, and the next launcher there removes it).
    with scratch_dir(output_dir_of({"out_dir": train["out_dir"]}), "cluster") as tmp:
        return _run_cluster(spec, train, sink, tmp)


def _private_network(spec: ClusterSpec, placed: dict, sink) -> tuple[PrivateNetwork | None, str]:
    """The cluster's own network namespace, or None; and the isolation it gives, in words
    (what the result and the status file record)."""
    if spec.isolation not in ISOLATIONS:
        raise ValueError(f"ClusterSpec.isolation must be one of {ISOLATIONS}, "
                         f"got {spec.isolation!r}")
    open_here = ("the chief's gRPC server listens on every address of this host"
                 if placed and len(placed) == spec.num_ps + spec.num_workers else
                 "the chief's and every unplaced role's gRPC servers listen on every address "
                 "of this host")
    if spec.isolation == "none":
        why = "isolation='none'"
    elif placed or spec.routes:
        if spec.isolation == "netns":
            raise ValueError("ClusterSpec.isolation='netns' is for an unplaced cluster: with "
                             "hosts or routes the roles must reach this namespace")
        return None, f"hosts: placed roles in their hosts' namespaces; {open_here}"
    elif not spec.host.startswith("127."):
        if spec.isolation == "netns":
            raise ValueError(f"ClusterSpec.isolation='netns' needs a loopback host, got "
                             f"{spec.host!r}")
        why = f"host {spec.host} is not a loopback address"
    else:
        try:
            net = PrivateNetwork.create()
        except (NetworkError, OSError) as e:
            if spec.isolation == "netns":
                raise ClusterFailed(f"isolation='netns' asked for and {e}") from None
            why = str(e)
        else:
            sink(f"[launcher] INFO cluster isolated in a private network namespace "
                 f"(net:[{net.inode}], loopback only): no other namespace or host reaches "
                 f"its ports")
            return net, "private network namespace (loopback only)"
    msg = (f"NOT isolated ({why}): TensorFlow's gRPC servers of every role listen on all "
           f"addresses of this host, so anyone who reaches it can read or write the model's "
           f"variables; run as root (network namespaces) or behind a firewall")
    sink(f"[launcher] WARNING {msg}")
    log.warning("%s", msg)
    return None, f"none: {why}"


def _run_cluster(spec: ClusterSpec, train: dict, sink, tmp: Path) -> dict:
    placed = placement(spec)
    private, isolation = _private_network(spec, placed, sink)
    try:
        return _run_isolated(spec, train, sink, tmp, placed, private, isolation)
    finally:
        if private is not None:
            private.close()


def _run_isolated(spec: ClusterSpec, train: dict, sink, tmp: Path, placed: dict,
                  private: PrivateNetwork | None, isolation: str) -> dict:
    cluster = cluster_def(spec.num_ps, spec.num_workers, spec.host, placed, private)
    enter = private.enter if private else None
    base_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                "PYTHONUNBUFFERED": "1"}
    base_env.pop("TF_CONFIG", None)
    py = sys.executable
    spec_file, result_file = tmp / "train_spec.json", tmp / "result.json"
    spec_file.write_text(json.dumps(train))

    servers: list[_Proc] = []
    for role, n in (("ps", spec.num_ps), ("worker", spec.num_workers)):
        for i in range(n):
            env = {**base_env, "TF_CONFIG": tf_config(cluster, role, i, spec.routes)}
            if role == "ps":
                env["CUDA_VISIBLE_DEVICES"] = ""   # parameter servers never need a GPU
            where = placed.get(f"{role}/{i}")
            servers.append(_Proc(f"{role}/{i}", [*exec_prefix(where and where.netns), py, "-m",
                                                 TRAINER_MODULE, "--serve"], env, sink,
                                 None if where else enter))
    chief = _Proc("chief", [py, "-m", TRAINER_MODULE, "--spec", f"@{spec_file}",
                            "--result-file", str(result_file)],
                  {**base_env, "TF_CONFIG": tf_config(cluster, "chief", 0, spec.routes)}, sink,
                  enter)
    procs = servers + [chief]
    probe = _PsProbe(cluster, spec.ps_unreachable_timeout_s, spec.startup_timeout_s,
                     (lambda a: private.call(lambda: _reachable(a))) if private else None)
    stall = _StallWatch(_progress_path(train), spec.stall_timeout_s)
    hosts = {name: h.netns for name, h in placed.items()}

    # Turn SIGTERM (Airflow killing the task) into an exception so `finally` tears down.
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        def _on_term(signum, frame):
            raise ClusterFailed(f"launcher received signal {signum}; cluster torn down")
        old_handler = signal.signal(signal.SIGTERM, _on_term)
    started = time.time()
    failure = None
    try:
        for p in procs:
            p.start()
        _write_status(spec.status_file, cluster, procs, hosts, spec.routes, isolation)
        dead_ps_since = None
        while True:
            chief.sample()
            code = chief.poll()
            if code is not None:
                break
            for p in servers:
                cur_kb = p.sample()
                if p.name.startswith("ps/") and spec.ps_memory_limit_mb and \
                        cur_kb > spec.ps_memory_limit_mb * 1024:
                    sink(f"[launcher] ERROR {p.name} uses {cur_kb // 1024} MB private memory > limit "
                         f"{spec.ps_memory_limit_mb} MB: killing it (out of memory)")
                    failure = failure or (f"{p.name} exceeded its memory limit of "
                                          f"{spec.ps_memory_limit_mb} MB")
                    p.kill(signal.SIGKILL)
                rc = p.poll()
                if rc is None:
                    continue
                if p.name.startswith("worker/"):
                    if p.restarts >= spec.max_worker_restarts:
                        failure = failure or (f"{p.name} died (exit {rc}) more than "
                                              f"{spec.max_worker_restarts} times")
                        break
                    p.restarts += 1
                    sink(f"[launcher] WARNING {p.name} exited with {rc}; restarting it "
                         f"(restart {p.restarts})")
                    p.start()
                    _write_status(spec.status_file, cluster, procs, hosts, spec.routes,
                                  isolation)
                else:
                    failure = failure or f"parameter server {p.name} died (exit {rc})"
                    if dead_ps_since is None:
                        dead_ps_since = time.time()
                        sink(f"[launcher] ERROR {failure}; waiting for the coordinator to fail")
            if failure and ("memory" in failure or "more than" in failure):
                break
            lost = probe.lost() or stall.stalled()
            if lost:
                failure = failure or lost
                sink(f"[launcher] ERROR {lost}: failing the run")
                break
            if dead_ps_since and time.time() - dead_ps_since > spec.ps_failure_grace_s:
                break
            time.sleep(0.2)
        chief.sample()
        code = chief.poll()
        if code is None:
            chief.kill(signal.SIGKILL)
            chief.popen.wait()
            code = chief.popen.returncode
    finally:
        for p in procs:
            p.sample()
        _teardown(procs)
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    peaks = {p.name: round(p.peak_kb / 1024, 1) for p in procs}
    private_mb = {p.name: round(p.peak_private_kb / 1024, 1) for p in procs}
    restarts = {p.name: p.restarts for p in servers if p.restarts}
    if code != 0 or failure:
        msg = result.get("error") or f"coordinator exit code {code}"
        if not failure and result.get("error_kind") == BAD_DATA:
            # The chief refused its input (one class, no rows): a retry cannot help.
            raise BadData(f"PS training refused its input: {msg}")
        raise ClusterFailed(f"PS training failed: {failure + '; ' if failure else ''}{msg}")
    result["cluster"] = {"ps": spec.num_ps, "workers": spec.num_workers,
                         "worker_restarts": restarts, "peak_rss_mb": peaks,
                         "peak_private_mb": private_mb, "isolation": isolation,
                         "seconds": round(time.time() - started, 1)}
    sink(f"[launcher] INFO done in {result['cluster']['seconds']}s; peak RSS MB {peaks}; "
         f"peak private (anonymous) MB {private_mb}; "
         f"worker restarts {restarts or 0}")
    return result


def _progress_path(train: dict) -> Path:
    """Where the trainer records its last checkpointed step (components.ctr.ps_train)."""
    from components.ctr.ps_train import PROGRESS_FILE, PsTrainSpec, checkpoint_dir
    names = {f.name for f in dataclasses.fields(PsTrainSpec)}
    return checkpoint_dir(PsTrainSpec(**{k: v for k, v in train.items() if k in names})) / \
        PROGRESS_FILE


def _write_status(path, cluster, procs, hosts=None, routes=None, isolation=None) -> None:
    if not path:
        return
    from retrain.common.atomic import write_json
    status = {"cluster": cluster, "pids": {p.name: p.popen.pid for p in procs if p.popen},
              "restarts": {p.name: p.restarts for p in procs}, "isolation": isolation}
    if hosts or routes:
        status.update({"netns": hosts or {}, "routes": routes or {}})
    write_json(path, status)


def _teardown(procs: list[_Proc], grace: float = 5.0) -> None:
    for p in procs:
        p.kill(signal.SIGTERM)
    deadline = time.time() + grace
    for p in procs:
        if p.popen is None:
            continue
        try:
            p.popen.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill(signal.SIGKILL)
            p.popen.wait()
    for p in procs:
        if p.thread is not None:
            p.thread.join(timeout=2)


if __name__ == "__main__":
    sys.exit(main(ClusterSpec, run, description=(
        "Start N parameter servers, M workers and the coordinator of the PS trainer as "
        "local processes on free 127.0.0.1 ports (in a private network namespace where one "
        "can be made); stream their logs; tear all down.")))
