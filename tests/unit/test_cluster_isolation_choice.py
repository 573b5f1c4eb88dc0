"""Who can reach a local PS cluster, decided before anything starts: the private network
namespace (retrain.common.netns.PrivateNetwork) where one can be made, and a fallback that
says so where none can (components.ctr.cluster). The cluster itself, attacked from another
namespace: tests/integration/test_cluster_isolation.py."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

from components.ctr import cluster
from components.ctr.cluster import ClusterFailed, ClusterSpec, _private_network
from retrain.common.netns import NetworkError, PrivateNetwork

HOST = {"netns": "a", "address": "10.9.9.11"}


def _cannot(monkeypatch):
    def refuse():
        raise NetworkError("cannot create a network namespace: unshare(CLONE_NEWNET) failed: "
                           "Operation not permitted")
    monkeypatch.setattr(cluster.PrivateNetwork, "create", staticmethod(refuse))


def test_without_a_namespace_auto_runs_but_says_the_ports_are_open(monkeypatch, caplog):
    _cannot(monkeypatch)
    lines = []
    net, isolation = _private_network(ClusterSpec(), {}, lines.append)
    assert net is None
    assert isolation.startswith("none: cannot create a network namespace")
    assert len(lines) == 1 and lines[0].startswith("[launcher] WARNING NOT isolated")
    assert "listen on all addresses" in lines[0] and "Operation not permitted" in lines[0]
    assert "NOT isolated" in caplog.text          # the task log's logger too, not only stdout


def test_isolation_netns_fails_where_no_namespace_can_be_made(monkeypatch):
    _cannot(monkeypatch)
    with pytest.raises(ClusterFailed, match="isolation='netns'.*Operation not permitted"):
        _private_network(ClusterSpec(isolation="netns"), {}, print)


@pytest.mark.parametrize("kw, expected", [
    ({"isolation": "none"}, "none: isolation='none'"),
    ({"host": "10.1.2.3"}, "none: host 10.1.2.3 is not a loopback address"),
])
def test_an_opt_out_is_logged_as_not_isolated(kw, expected):
    lines = []
    net, isolation = _private_network(ClusterSpec(**kw), {}, lines.append)
    assert net is None and isolation == expected
    assert [line for line in lines if "WARNING NOT isolated" in line], lines


def test_placed_clusters_name_what_stays_open_here():
    spec = ClusterSpec(host="10.9.9.1", num_ps=1, num_workers=1, hosts={"ps": HOST})
    net, isolation = _private_network(spec, cluster.placement(spec), print)
    assert net is None and isolation.startswith("hosts:")
    assert "unplaced role" in isolation                      # worker/0 serves here
    spec = ClusterSpec(host="10.9.9.1", num_ps=1, num_workers=1,
                       hosts={"ps": HOST, "worker": HOST})
    assert "chief's gRPC server listens" in _private_network(spec, cluster.placement(spec),
                                                             print)[1]


@pytest.mark.parametrize("kw, match", [
    ({"isolation": "firewall"}, "isolation must be one of"),
    ({"isolation": "netns", "host": "10.9.9.1", "hosts": {"ps": HOST}}, "unplaced cluster"),
    ({"isolation": "netns", "host": "10.1.2.3"}, "loopback host"),
])
def test_a_wrong_isolation_is_refused_naming_itself(kw, match):
    spec = ClusterSpec(**kw)
    with pytest.raises(ValueError, match=match):
        _private_network(spec, cluster.placement(spec), print)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")


@needs_root
def test_a_private_network_has_loopback_alone_and_nothing_outside_reaches_in():
    net = PrivateNetwork.create()
    try:
        assert net.inode != os.stat("/proc/self/ns/net").st_ino
        server = net.call(lambda: socket.create_server(("0.0.0.0", 0)))   # like TF's bind
        port = server.getsockname()[1]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        net.call(lambda: socket.create_connection(("127.0.0.1", port), timeout=2)).close()
        # A child started with its preexec step is inside, with loopback up and nothing else.
        links = subprocess.run(["cat", "/proc/net/dev"], capture_output=True, text=True,
                               preexec_fn=net.enter).stdout
        names = [line.split(":")[0].strip() for line in links.splitlines()[2:]]
        assert names == ["lo"], links
        inode = subprocess.run(["stat", "-L", "-c", "%i", "/proc/self/ns/net"],
                               capture_output=True, text=True, preexec_fn=net.enter).stdout
        assert int(inode) == net.inode
        server.close()
    finally:
        net.close()
    with pytest.raises(NetworkError, match="closed"):
        net.call(lambda: None)
