"""The hosts backend's inventory file: what it accepts and the one line it refuses with."""

from __future__ import annotations

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.hosts.inventory import load_inventory, parse_inventory

GOOD = """
[defaults]
user = "mltcp"
key = "~/.ssh/lab"
python = "/opt/mltcp/.venv/bin/python"

[[hosts]]
name = "gpu1"
ssh = "10.0.0.11"
data_addr = "192.168.50.11"
data_iface = "ens1f0"
gpus = 8

[[hosts]]
name = "gpu2"
ssh = "gpu2.lab.example"
port = 2222
user = "root"
data_addr = "fd00::12"
data_iface = "ens1f0"
"""


def _home_key(tmp_path, monkeypatch) -> str:
    """GOOD's key, ~/.ssh/lab, in a home of the test's own (a key must exist)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    key = tmp_path / ".ssh" / "lab"
    key.parent.mkdir()
    key.write_text("key\n")
    key.chmod(0o600)
    return str(key)


def test_a_two_host_inventory_with_defaults(tmp_path, monkeypatch) -> None:
    key = _home_key(tmp_path, monkeypatch)
    path = tmp_path / "inv.toml"
    path.write_text(GOOD)
    inv = load_inventory(path)
    assert inv.names == ("gpu1", "gpu2")
    g1, g2 = inv.hosts
    assert (g1.user, g1.port, g1.key, g1.gpus) == ("mltcp", 22, key, 8)
    assert (g2.user, g2.port, g2.data_addr, g2.gpus) == ("root", 2222, "fd00::12", 0)
    assert g2.python == "/opt/mltcp/.venv/bin/python" and g2.destination == "root@gpu2.lab.example"
    assert inv.host("gpu2") is g2
    with pytest.raises(SpecError, match=r"placement: no host named 'gpu3'.*gpu1, gpu2"):
        inv.host("gpu3")


def _host(**kw: object) -> dict:
    base: dict[str, object] = {"name": "h1", "ssh": "10.0.0.1", "data_addr": "10.1.0.1",
                               "data_iface": "eth1"}
    base.update(kw)
    return base


@pytest.mark.parametrize("data,match", [
    ({}, r"^hosts: at least one \[\[hosts\]\]"),
    ({"hosts": []}, r"^hosts: at least one"),
    ({"hosts": [_host(), _host()]}, r"^hosts\[1\]\.name: 'h1' is listed twice"),
    ({"hosts": [_host(), _host(name="h2")]}, r"^hosts\[1\]\.data_addr: 10\.1\.0\.1 is also"),
    ({"hosts": [_host(data_addr="gpu1")]}, r"^hosts\[0\]\.data_addr: 'gpu1' is not an IP"),
    ({"hosts": [_host(ssh="bad host")]}, r"^hosts\[0\]\.ssh: 'bad host' is neither"),
    ({"hosts": [_host(port=70000)]}, r"^hosts\[0\]\.port: "),
    ({"hosts": [_host(gpus=-1)]}, r"^hosts\[0\]\.gpus: must be between 0 and 64"),
    ({"hosts": [_host(data_iface="a-very-long-interface-name")]}, r"^hosts\[0\]\.data_iface"),
    ({"hosts": [_host(adress="x")]}, r"^hosts\[0\]\.adress: unknown key"),
    ({"hosts": [{"name": "h1", "ssh": "10.0.0.1", "data_iface": "eth1"}]},
     r"^hosts\[0\]\.data_addr: missing"),
    ({"defaults": {"usr": "root"}, "hosts": [_host()]}, r"^defaults\.usr: unknown key.*'user'"),
    ({"defaults": {"user": "Root!"}, "hosts": [_host()]}, r"^defaults\.user: 'Root!' is not"),
    ({"extra": 1, "hosts": [_host()]}, r"^extra: unknown key"),
])
def test_bad_inventories_are_refused_naming_the_field(data: dict, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_inventory(data)


def test_unreadable_and_broken_files_are_one_line(tmp_path) -> None:
    with pytest.raises(SpecError, match=r"^--inventory: cannot read .*missing\.toml"):
        load_inventory(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[hosts]\nname=")
    with pytest.raises(SpecError, match=r"^--inventory: .*bad\.toml is not valid TOML"):
        load_inventory(bad)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(SpecError, match=r"is not UTF-8"):
        load_inventory(binary)


def test_one_rank_per_gpu_with_nccl_one_per_host_otherwise(tmp_path, monkeypatch) -> None:
    from mltcp.lab.scenario.hosts.training import ranks_on
    from mltcp.lab.scenario.spec import Workload

    _home_key(tmp_path, monkeypatch)
    path = tmp_path / "inv.toml"
    path.write_text(GOOD)
    eight, none = load_inventory(path).hosts
    nccl, gloo = Workload("resnet18", backend="nccl"), Workload("resnet18", backend="gloo")
    assert (ranks_on(eight, nccl), ranks_on(eight, gloo)) == (8, 1)
    assert ranks_on(none, nccl) == 1           # no GPUs listed: one rank
