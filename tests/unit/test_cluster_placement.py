"""Placement of PS-cluster roles on namespace hosts, without starting anything: the spec's
checks, the TF_CONFIG each task gets, and the fault proxy on loopback."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from components.ctr.cluster import ClusterSpec, Host, cluster_def, placement, tf_config
from retrain.common.netfaults import FaultProxy
from retrain.common.netns import Network


def test_roles_and_tasks_map_to_hosts_and_a_task_key_wins():
    spec = ClusterSpec(num_ps=2, num_workers=1, host="10.9.9.1",
                       hosts={"ps": {"netns": "a", "address": "10.9.9.11"},
                              "ps/1": {"netns": "b", "address": "10.9.9.12"}})
    assert placement(spec) == {"ps/0": Host("a", "10.9.9.11"), "ps/1": Host("b", "10.9.9.12")}


@pytest.mark.parametrize("kw, named", [
    ({"hosts": {"chief": {"netns": "a", "address": "10.9.9.11"}}}, "'chief'"),
    ({"hosts": {"ps": {"netns": "a"}}}, "hosts['ps']"),
    ({"hosts": {"ps": {"netns": "a", "address": "10.9.9.11"}}, "host": "127.0.0.1"}, "loopback"),
    ({"routes": {"worker/3": "10.9.9.1:5"}}, "worker/3"),
])
def test_a_wrong_placement_is_refused_naming_the_key(kw, named):
    spec = ClusterSpec(**{"host": "10.9.9.1", **kw})
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        placement(spec)


def test_unplaced_cluster_is_all_on_host_and_routes_change_only_the_others_view():
    cluster = cluster_def(2, 2)
    addresses = [a for role in ("chief", "ps", "worker") for a in cluster[role]]
    assert len(set(addresses)) == 5 and all(a.startswith("127.0.0.1:") for a in addresses)
    routes = {"worker/0": "10.0.0.1:9"}
    own = json.loads(tf_config(cluster, "worker", 0, routes))["cluster"]
    other = json.loads(tf_config(cluster, "chief", 0, routes))["cluster"]
    assert own == cluster
    assert other["worker"] == ["10.0.0.1:9", cluster["worker"][1]]


def test_network_names_fit_the_kernel_limit():
    net = Network("pfx", "10.9.9", ("ps", "wk"))
    assert net.host("wk").address == "10.9.9.12" and net.host("wk").veth == "pfx-wkh"
    with pytest.raises(ValueError, match="longer than 15"):
        Network("a-very-long-prefix", "10.9.9", ("ps",))


def test_fault_proxy_delays_and_resets_only_once_armed():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo():
        conn, _ = server.accept()
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:     # the proxy's reset
            pass
        finally:
            conn.close()
    threading.Thread(target=echo, daemon=True).start()
    with FaultProxy("127.0.0.1", lambda: f"127.0.0.1:{port}", delay_s=0.05,
                    reset_every_s=0.1, max_resets=1) as proxy:
        client = socket.create_connection(("127.0.0.1", int(proxy.address.rsplit(":", 1)[1])))
        started = time.monotonic()
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"
        assert time.monotonic() - started >= 0.1          # 50 ms each way
        proxy.arm_resets()
        with pytest.raises(OSError):
            for _ in range(100):
                client.sendall(b"ping")
                if not client.recv(16):
                    raise ConnectionResetError("closed")
                time.sleep(0.02)
        assert proxy.resets == 1
        client.close()
    server.close()


def test_the_stall_watch_fires_only_after_progress_stopped_moving(tmp_path):
    """A resumed run's old progress file does not start the clock; a step that moved and
    then stayed for the timeout does."""
    from components.ctr.cluster import _StallWatch

    now = [1000.0]                              # a clock the test moves: no sleeping
    f = tmp_path / "progress.json"
    f.write_text('{"step": 8}')
    watch = _StallWatch(f, 0.2, clock=lambda: now[0])
    assert watch.stalled() is None
    now[0] += 0.3
    assert watch.stalled() is None              # read at most once a second
    now[0] += 1.0
    assert watch.stalled() is None              # never moved in this run: start-up, restore
    f.write_text('{"step": 16}')
    now[0] += 1.0
    assert watch.stalled() is None              # moved: the clock starts now
    now[0] += 0.1
    assert watch.stalled() is None              # within the second: not read again
    now[0] += 1.0
    assert "no training progress for 0.2 s after step 16" in watch.stalled()
    assert _StallWatch(f, 0).stalled() is None  # off
