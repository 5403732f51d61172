"""The rendezvous ports of the multi-process tests (tests/_ranks.py): never one the kernel may hand to another process
between the test's check and rank 0's bind."""

import socket

from tests._ranks import _ephemeral_ports, free_port, port_pool


def test_a_free_port_lies_outside_the_kernels_ephemeral_range_and_is_bindable():
    ports = [free_port() for _ in range(3)]
    assert len(set(ports)) == 3  # the next one each time: a port just given is not given again at once
    for port in ports:
        assert port not in _ephemeral_ports() and 10000 <= port <= 65535, port
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_each_xdist_worker_draws_from_its_own_share(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    shares = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        shares.append(set(port_pool()))
    assert shares[0] and shares[1] and not shares[0] & shares[1]
    assert not (shares[0] | shares[1]) & set(_ephemeral_ports())
