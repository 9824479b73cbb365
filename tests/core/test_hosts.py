"""One rule for "is this machine only", shared by memtap proxy, memtap ui and memtap mcp."""

from __future__ import annotations

import pytest

from memtap.sdk.server import host_name, is_loopback_host, is_loopback_name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("LocalHost:8080", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:4000", "127.0.0.1"),
        ("[::1]:4000", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),  # a bare IPv6 address has several colons: no port to remove
        (" devbox.lan ", "devbox.lan"),
    ],
)
def test_host_name_drops_port_brackets_and_case(value: str, name: str) -> None:
    assert host_name(value) == name


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("app.localhost:8080", True),
        ("127.0.0.1", True),
        ("127.8.9.10:1", True),
        ("[::1]:4000", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("localhost.evil.com", False),
        ("evil.com", False),
        ("", False),
    ],
)
def test_loopback_means_this_machine_only(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
    assert is_loopback_name(host_name(host)) is loopback
