"""A production-shaped Airflow on one machine: what the project runs in production, small.

PostgreSQL and Redis from Debian's packages on the stack's own addresses; Airflow on
PostgreSQL with the CeleryExecutor; api-server, scheduler, dag-processor and triggerer as
separate processes; and Celery workers as separate *hosts*: each in its own network
namespace with its own address on a bridge (`ip netns` + veth), serving its own task logs,
all mounting the same artifact root as NFS would be mounted. Airflow runs from the
environment without TensorFlow, Beam or great-expectations (`.venv-airflow`, from
requirements-airflow.lock); tasks hand their steps to the ML environment's interpreter
(RETRAIN_STEP_PYTHON). Everything the stack starts is recorded by PID in its state folder
and stopped by `down`. Needs root (network namespaces; CI runs as root).

    retrain stack up [--root var/stack]   # prints the UI's address and the admin password's
                                          # file (never the password: it would land in CI
                                          # and terminal logs)
                                          # (also `python -m retrain.orchestration.stack up`: Airflow's
                                          # environment has no console script of ours)
    retrain stack status
    retrain stack down [--purge]

Secrets (database and broker passwords, fernet key, JWT and session secrets, the admin
password) are generated into `<root>/secrets/` (mode 600) and reach Airflow through its
`_CMD` settings, so no secret is in an environment value, the repo, a task log or the
stack's own output. Before anything starts, every RETRAIN_* setting the Airflow processes
will get is checked (`retrain settings check` in Airflow's environment): a bad one stops
`up` with the variable named.
The standard library and the settings (pydantic-settings) only.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from retrain.common.atomic import pid_alive
from retrain.common.errors import ConfigError
from retrain.common.netns import Network, NetworkError, exec_prefix
from retrain.common.settings import settings

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
STATE = "stack.json"


class StackError(RuntimeError):
    """The stack cannot start as configured; the message says what to do."""


@dataclass
class StackSpec:
    root: str = str(REPO / "var" / "stack")       # state, logs, secrets, AIRFLOW_HOME
    retrain_home: str = str(REPO / "var")         # the artifact root every host mounts
    airflow_venv: str = str(REPO / ".venv-airflow")
    ml_python: str = str(REPO / ".venv" / "bin" / "python")
    subnet: str = "10.213.7"                      # bridge .1, worker i at .(10 + i)
    prefix: str = "rtstk"                         # names of the bridge, namespaces, veths
    workers: int = 2
    worker_concurrency: int = 2
    api_port: int = 8080
    pg_port: int = 15432
    redis_port: int = 16379
    env: dict = field(default_factory=dict)       # extra settings for every Airflow process

    @property
    def host_ip(self) -> str:
        return self.network().gateway

    def network(self) -> Network:
        """The bridge and one namespace host per Celery worker ("w1", "w2", ...)."""
        return Network(self.prefix, self.subnet,
                       tuple(f"w{i}" for i in range(1, self.workers + 1)))

    def worker_ip(self, i: int) -> str:
        return self.network().host(f"w{i}").address

    def netns(self, i: int) -> str:
        return self.network().host(f"w{i}").netns

    @property
    def base_url(self) -> str:
        return f"http://{self.host_ip}:{self.api_port}"


# ---------------------------------------------------------------- helpers

def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("check", True)
    try:
        return subprocess.run(cmd, text=True, capture_output=True, **kw)
    except subprocess.CalledProcessError as e:
        raise StackError(f"{shlex.join(cmd)} failed ({e.returncode}): "
                         f"{(e.stderr or e.stdout or '').strip()[-800:]}") from None


def _secret(root: Path, name: str, make=lambda: secrets.token_urlsafe(24)) -> Path:
    """`<root>/secrets/<name>`: created once with mode 600, then reused."""
    path = root / "secrets" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(make())
    return path


def _put_secret(root: Path, name: str, value: str) -> Path:
    """A secret derived from others (a URL with a password): rewritten at every start."""
    path = root / "secrets" / name
    path.unlink(missing_ok=True)
    return _secret(root, name, lambda: value)


def _wait(what: str, ready, timeout: float, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while not ready():
        if time.time() > deadline:
            tail = ""
            if log and log.exists():
                tail = "\n" + log.read_text(errors="replace")[-2000:]
            raise StackError(f"{what} not ready after {timeout:.0f} s{tail}")
        time.sleep(1)


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    if not found:
        raise StackError("PostgreSQL is not installed: apt-get install postgresql "
                         "(`retrain stack up` without --no-install does it)")
    return found[-1].parent


def install_packages() -> None:
    """PostgreSQL and Redis from Debian's packages, where missing (root only)."""
    missing = []
    if not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        missing.append("postgresql")
    if not shutil.which("redis-server"):
        missing.append("redis-server")
    if not shutil.which("ip"):
        missing.append("iproute2")
    if not missing:
        return
    print(f"stack: installing {' '.join(missing)} from Debian's packages", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "-y", "-qq", *missing], env=env)


# ---------------------------------------------------------------- the stack

class Stack:
    def __init__(self, spec: StackSpec):
        self.spec = spec
        self.root = Path(spec.root).resolve()
        self.logs = self.root / "logs"
        self.pids = self.root / "pids"
        self.airflow_home = self.root / "airflow"
        # PostgreSQL refuses to run as root and needs a folder its own user can reach; a
        # root-owned checkout under /root or a pytest tmp folder (mode 700) is not one.
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        self.pg_data = (Path("/var/tmp") / f"retrain-stack-{digest}" / "pgdata"
                        if os.geteuid() == 0 else self.root / "pgdata")

    # -- state
    def _save(self) -> None:
        (self.root / STATE).write_text(json.dumps({"spec": asdict(self.spec)}, indent=2) + "\n")

    @classmethod
    def load(cls, root: str | Path) -> "Stack":
        state = json.loads((Path(root) / STATE).read_text())
        return cls(StackSpec(**state["spec"]))

    def admin_password(self) -> str:
        return json.loads(self._passwords_file().read_text())["admin"]

    def admin_password_file(self) -> Path:
        """The file (mode 600) holding the UI's admin password: what `up` prints."""
        return self.root / "secrets" / "admin_password"

    def write_passwords_file(self) -> Path:
        """SimpleAuthManager's {"admin": password} file, from the admin password's secret:
        written afresh with mode 600 from its creation (no moment readable by others)."""
        pwfile = self._passwords_file()
        pwfile.parent.mkdir(parents=True, exist_ok=True)
        pwfile.unlink(missing_ok=True)
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"admin": self.admin_password_file().read_text()}) + "\n")
        return pwfile

    def check_settings(self, python: str | None = None) -> list[str]:
        """Check every RETRAIN_* setting the Airflow processes will get, with Airflow's own
        interpreter, before anything starts; StackError naming each bad one. Returns the
        warnings (variables nothing reads)."""
        python = python or str(Path(self.spec.airflow_venv) / "bin" / "python")
        proc = subprocess.run([python, "-m", "retrain.orchestration.settings_cli", "check",
                               "--quiet"], cwd=REPO, env=self.airflow_env(),
                              capture_output=True, text=True)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        if proc.returncode:
            raise StackError("the settings check failed, nothing was started:\n  "
                             + "\n  ".join(lines[-40:]))
        return lines

    def _passwords_file(self) -> Path:
        return self.airflow_home / "simple_auth_manager_passwords.json.generated"

    # -- environment
    def airflow_env(self) -> dict:
        """Every Airflow process's environment: scripts/airflow-env.sh (the one place for
        the settings) evaluated over the stack's overrides, secrets as _CMD settings."""
        s = self.spec
        sec = self.root / "secrets"
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW_", "AIRFLOW__", "RETRAIN_"))}
        base.update({
            "RETRAIN_AIRFLOW_HOME": str(self.airflow_home),
            "RETRAIN_HOME": str(Path(s.retrain_home).resolve()),
            "VENV": str(Path(s.airflow_venv).resolve()),
            "RETRAIN_STEP_PYTHON": str(Path(s.ml_python).absolute()),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__API__HOST": s.host_ip,
            "AIRFLOW__API__PORT": str(s.api_port),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": f"cat {sec / 'sql_alchemy_conn'}",
            "AIRFLOW__CELERY__BROKER_URL_CMD": f"cat {sec / 'broker_url'}",
            "AIRFLOW__CELERY__RESULT_BACKEND_CMD": f"cat {sec / 'result_backend'}",
            "AIRFLOW__CORE__FERNET_KEY_CMD": f"cat {sec / 'fernet_key'}",
            "AIRFLOW__API_AUTH__JWT_SECRET_CMD": f"cat {sec / 'jwt_secret'}",
            "AIRFLOW__API__SECRET_KEY_CMD": f"cat {sec / 'api_secret_key'}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(s.worker_concurrency),
            # One task at a time per free slot: a worker does not hoard queued tasks.
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
        })
        base.update({k: str(v) for k, v in s.env.items()})
        out = _run(["bash", "-c", "source scripts/airflow-env.sh && env -0"], cwd=REPO,
                   env=base).stdout
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    # -- network: a bridge on this host, one namespace + veth per worker
    def _network_up(self) -> None:
        if os.geteuid() != 0:
            raise StackError("the stack puts each Celery worker in its own network "
                             "namespace, which needs root (CI runs as root)")
        try:
            self.spec.network().up()
        except NetworkError as e:
            raise StackError(str(e)) from None

    def _network_down(self) -> None:
        self.spec.network().down()

    # -- services
    def _as_pg_user(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd

    def _postgres_up(self) -> None:
        s, bin_dir = self.spec, _postgres_bin()
        pw = _secret(self.root, "postgres_password")
        if not (self.pg_data / "PG_VERSION").exists():
            self.pg_data.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.pg_data.parent, "postgres")
                shutil.chown(self.pg_data, "postgres")
            pwfile = self.pg_data.parent / ".pwfile"
            pwfile.write_text(pw.read_text())
            if os.geteuid() == 0:
                shutil.chown(pwfile, "postgres")
            pwfile.chmod(0o600)
            try:
                _run(self._as_pg_user([str(bin_dir / "initdb"), "-D", str(self.pg_data),
                                       "-U", "airflow", "--auth=scram-sha-256",
                                       f"--pwfile={pwfile}", "-E", "UTF8"]))
            finally:
                pwfile.unlink()
            conf = self.pg_data / "postgresql.conf"
            with conf.open("a") as f:
                f.write(f"\nlisten_addresses = '127.0.0.1,{s.host_ip}'\nport = {s.pg_port}\n"
                        f"unix_socket_directories = ''\nmax_connections = 200\n")
            with (self.pg_data / "pg_hba.conf").open("a") as f:
                f.write(f"host all airflow {s.subnet}.0/24 scram-sha-256\n")
        # Beside the data: the server's user may not reach the stack's own log folder.
        log = self.pg_data.parent / "postgres.log"
        _run(self._as_pg_user([str(bin_dir / "pg_ctl"), "-D", str(self.pg_data), "-l",
                               str(log), "-w", "-t", "60", "start"]))
        client = {**os.environ, "PGPASSWORD": pw.read_text()}
        if _run(self._as_pg_user([str(bin_dir / "psql"), "-h", "127.0.0.1", "-p",
                                  str(s.pg_port), "-U", "airflow", "-d", "postgres", "-tAc",
                                  "SELECT 1 FROM pg_database WHERE datname='airflow'"]),
                env=client).stdout.strip() != "1":
            _run(self._as_pg_user([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p",
                                   str(s.pg_port), "-U", "airflow", "airflow"]), env=client)
        where = f"airflow:{pw.read_text()}@{s.host_ip}:{s.pg_port}/airflow"
        _put_secret(self.root, "sql_alchemy_conn", f"postgresql+psycopg2://{where}")
        _put_secret(self.root, "result_backend", f"db+postgresql://{where}")

    def _postgres_down(self) -> None:
        if (self.pg_data / "postmaster.pid").exists():
            _run(self._as_pg_user([str(_postgres_bin() / "pg_ctl"), "-D", str(self.pg_data),
                                   "-m", "fast", "-w", "stop"]), check=False)

    def _redis_up(self) -> None:
        s = self.spec
        pw = _secret(self.root, "redis_password").read_text()
        conf = self.root / "redis.conf"
        conf.write_text(f"bind 127.0.0.1 {s.host_ip}\nport {s.redis_port}\n"
                        f"daemonize no\nsave \"\"\nappendonly no\n"
                        f"dir {self.root}\ninclude {self.root / 'secrets' / 'redis_auth.conf'}\n")
        _put_secret(self.root, "redis_auth.conf", f"requirepass {pw}\n")
        _put_secret(self.root, "broker_url", f"redis://:{pw}@{s.host_ip}:{s.redis_port}/0")
        self._spawn("redis", [shutil.which("redis-server") or "redis-server", str(conf)],
                    env=dict(os.environ))
        # The password through the environment: an argument would show in `ps`.
        _wait("redis", lambda: _run(["redis-cli", "-h", "127.0.0.1", "-p", str(s.redis_port),
                                     "ping"], check=False,
                                    env={**os.environ, "REDISCLI_AUTH": pw}).stdout.strip()
              == "PONG",
              30, self.logs / "redis.log")

    # -- processes
    def _spawn(self, name: str, cmd: list[str], env: dict, netns: str | None = None) -> int:
        cmd = [*exec_prefix(netns), *cmd]
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        (self.pids / f"{name}.pid").write_text(f"{proc.pid}\n")
        return proc.pid

    def pids_by_name(self) -> dict[str, int]:
        return {p.stem: int(p.read_text()) for p in sorted(self.pids.glob("*.pid"))}

    def up(self, install: bool = False, timeout: float = 240) -> "Stack":
        s = self.spec
        for d in (self.root, self.logs, self.pids, self.airflow_home):
            d.mkdir(parents=True, exist_ok=True)
        if self.pids_by_name():
            raise StackError(f"a stack is already recorded in {self.root}: "
                             "`retrain stack down` first")
        airflow = Path(s.airflow_venv) / "bin" / "airflow"
        if not airflow.exists():
            raise StackError(f"no Airflow environment at {s.airflow_venv}: "
                             "`make venv-airflow` creates it from requirements-airflow.lock")
        if not Path(s.ml_python).exists():
            raise StackError(f"no ML environment interpreter at {s.ml_python}: `make venv`")
        if install:
            install_packages()
        _secret(self.root, "fernet_key", lambda: base64.urlsafe_b64encode(
            os.urandom(32)).decode())
        for name in ("jwt_secret", "api_secret_key"):
            _secret(self.root, name)
        _secret(self.root, "admin_password")
        for line in self.check_settings():
            print(line, file=sys.stderr)
        self._save()
        try:
            self._network_up()
            self._postgres_up()
            self._redis_up()
            self._airflow_up(timeout)
        except BaseException:
            self.down()
            raise
        return self

    def _airflow_up(self, timeout: float) -> None:
        s = self.spec
        env = self.airflow_env()
        self.write_passwords_file()
        migrate = ("mkdir -p \"$AIRFLOW_HOME\" && airflow db migrate >/dev/null "
                   "&& airflow pools import scripts/pools.json >/dev/null")
        with open(self.logs / "setup.log", "ab") as log:
            code = subprocess.run(["bash", "-c", migrate], cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT).returncode
        if code:
            raise StackError(f"airflow db migrate failed; see {self.logs / 'setup.log'}")
        for c in AIRFLOW_COMPONENTS:
            cmd = ["airflow", c]
            if c == "api-server":
                cmd += ["--host", s.host_ip, "--port", str(s.api_port)]
            elif c in ("scheduler", "triggerer"):
                cmd.append("--skip-serve-logs")      # their log servers would bind 0.0.0.0
            self._spawn(c, cmd, env)
        for i in range(1, s.workers + 1):
            self._spawn(f"worker-{i}", ["airflow", "celery", "worker",
                                        "--celery-hostname", f"worker-{i}@{s.worker_ip(i)}"],
                        self.worker_env(i, env), netns=s.netns(i))
        _wait("the API server", self._api_ready, timeout, self.logs / "api-server.log")
        for name, pid in self.pids_by_name().items():
            if not pid_alive(pid):
                raise StackError(f"{name} exited at start; see {self.logs / (name + '.log')}")

    def worker_env(self, i: int, env: dict) -> dict:
        """Worker i's environment: recorded under its own address, and its task logs on its
        own disk, as on separate machines (the API server reads them from the worker's log
        server, port 8793 on that address)."""
        return {**env, "RETRAIN_HOSTNAME": self.spec.worker_ip(i),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.worker_logs(i))}

    def worker_logs(self, i: int) -> Path:
        """Worker i's own task-log folder (its host's local disk)."""
        return self.root / "hosts" / f"worker-{i}" / "logs"

    def _api_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.spec.base_url}/api/v2/monitor/health",
                                        timeout=5) as r:
                health = json.loads(r.read())
            return health.get("metadatabase", {}).get("status") == "healthy"
        except (OSError, ValueError):
            return False

    def down(self, purge: bool = False) -> None:
        """Stop what `up` started (by PID: each process group, SIGTERM then SIGKILL),
        PostgreSQL, and the network; --purge also deletes the state and the database."""
        pids = self.pids_by_name() if self.pids.exists() else {}
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + 60
        while any(_group_alive(p) for p in pids.values()) and time.time() < deadline:
            time.sleep(0.5)
        for pid in pids.values():
            if _group_alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for name in pids:
            (self.pids / f"{name}.pid").unlink(missing_ok=True)
        self._postgres_down()
        if os.geteuid() == 0:
            self._network_down()
        if purge:
            shutil.rmtree(self.pg_data.parent if os.geteuid() == 0 else self.pg_data,
                          ignore_errors=True)
            shutil.rmtree(self.root, ignore_errors=True)

    def status(self) -> dict:
        return {name: ("running" if _group_alive(pid) else "exited") + f" (pid {pid})"
                for name, pid in self.pids_by_name().items()}


def _group_alive(pgid: int) -> bool:
    """Whether a process group still has a live member (zombies count as gone)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


# ---------------------------------------------------------------- command line

def add_cli(subparsers) -> None:
    """Register `retrain stack up|status|down`."""
    d = StackSpec()
    p = subparsers.add_parser(
        "stack", help="a production-shaped Airflow on this machine: PostgreSQL, Redis, "
                      "Celery workers on two network-namespace hosts (root)",
        description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="stack_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="install what is missing, start everything, print the UI")
    up.add_argument("--root", default=d.root, help="state, logs, secrets (default %(default)s)")
    up.add_argument("--retrain-home", default=None,
                    help="the artifact root every host mounts (default $RETRAIN_HOME, else "
                         f"{d.retrain_home})")
    up.add_argument("--airflow-venv", default=d.airflow_venv,
                    help="Airflow's environment, without TensorFlow (default %(default)s)")
    up.add_argument("--ml-python", default=d.ml_python,
                    help="the ML environment's interpreter that runs steps (default %(default)s)")
    up.add_argument("--workers", type=int, default=d.workers, help="worker hosts (default 2)")
    up.add_argument("--api-port", type=int, default=d.api_port, help="default %(default)s")
    up.add_argument("--subnet", default=d.subnet,
                    help="first three octets of the hosts' /24 (default %(default)s)")
    up.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting for every Airflow process, e.g. RETRAIN_SCHEDULE=none or "
                         "AIRFLOW__CELERY__WORKER_CONCURRENCY=4 (repeatable; docs/configuration.md)")
    up.add_argument("--no-install", action="store_true",
                    help="do not apt-get install PostgreSQL / Redis where missing")
    for name, text in (("status", "each recorded process and whether it runs"),
                       ("down", "stop everything the stack started, by PID")):
        q = sub.add_parser(name, help=text)
        q.add_argument("--root", default=d.root, help="default %(default)s")
        if name == "down":
            q.add_argument("--purge", action="store_true",
                           help="also delete the state folder and the database")
    p.set_defaults(func=_cli)


def parse_env(pairs: list[str]) -> dict:
    """`NAME=VALUE` pairs; a malformed one is an error naming it."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not name.replace("_", "").isalnum():
            raise StackError(f"--env {pair!r}: expected NAME=VALUE")
        env[name.strip()] = value
    return env


def _cli(args) -> int:
    try:
        if args.stack_command == "up":
            try:    # read here, not when the parser is built: `retrain --help` never fails
                home = args.retrain_home or settings().home or StackSpec().retrain_home
            except ConfigError as e:
                raise StackError(f"the settings check failed, nothing was started: {e}") \
                    from None
            stack = Stack(StackSpec(root=args.root, retrain_home=home,
                                    airflow_venv=args.airflow_venv, ml_python=args.ml_python,
                                    workers=args.workers, api_port=args.api_port,
                                    subnet=args.subnet, env=parse_env(args.env)))
            print(f"stack: starting in {stack.root} (about 30 s)", flush=True)
            stack.up(install=not args.no_install)
            print(f"stack up: Airflow UI {stack.spec.base_url}/  user admin  password in "
                  f"{stack.admin_password_file()} (mode 600)\n  logs {stack.logs}\n"
                  f"  stop: retrain stack down --root {stack.root}")
            for name, state in stack.status().items():
                print(f"  {name:14s} {state}")
        elif not (Path(args.root) / STATE).exists():
            print(f"no stack recorded in {args.root}", file=sys.stderr)
            return 0 if args.stack_command == "down" else 1
        elif args.stack_command == "status":
            for name, state in Stack.load(args.root).status().items():
                print(f"{name:14s} {state}")
        else:
            Stack.load(args.root).down(purge=args.purge)
            print("stack down")
    except StackError as e:
        print(f"retrain stack: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m retrain.orchestration.stack")
    add_cli(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(["stack", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
