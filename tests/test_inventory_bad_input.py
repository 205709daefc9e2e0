"""The hosts backend's inventory, second round of bad input (issue 25): what it must
refuse when it is read, before anything connects, because a later stage (ssh, torchrun,
the datapath) would fail on it, or, worse, run somewhere else than meant.

* ``data_addr``: every rank's rendezvous (``--master_addr``) and the datapath's address,
  so an address one host owns and the others reach: not 0.0.0.0, ::, loopback,
  multicast, broadcast, reserved, link-local IPv6 or zoned, nor an IPv4 address spelt as
  IPv4-mapped IPv6 (which would also hide a duplicate);
* ``ssh``: an IP address or a DNS name; ``10.0.0.256`` and ``999`` are neither;
* ``data_iface``: a name Linux can give an interface (not '.', '..', no ':');
* ``key``/``known_hosts``: files on this machine, relative to the inventory's directory,
  readable regular files when the inventory is read (not when ssh reads them), a key not
  open to others (ssh ignores it), a known_hosts holding keys (strict checking);
* ``python``: one path (the backend adds its flags);
* a UTF-8 BOM is read, not reported as a TOML syntax error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.hosts.inventory import load_inventory, parse_inventory


def _host(**kw: object) -> dict:
    base: dict[str, object] = {"name": "h1", "ssh": "10.0.0.1", "data_addr": "10.1.0.1",
                               "data_iface": "eth1"}
    base.update(kw)
    return base


def _refused(data: dict, field: str, words: str, directory: Path | None = None) -> str:
    with pytest.raises(SpecError) as err:
        parse_inventory(data, "inv.toml", directory)
    message = str(err.value)
    assert err.value.field == field, message
    assert words in message and "\n" not in message, message
    return message


@pytest.mark.parametrize(("addr", "words"), [
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("::1", "loopback"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("0.1.2.3", "reserved"),
    ("fe80::1", "link-local IPv6"),
    ("fe80::1%eth0", "has a zone (%eth0)"),
    ("fd00::1%2", "has a zone (%2)"),
    ("::ffff:10.1.0.1", 'write it as "10.1.0.1"'),
])
def test_an_address_no_host_can_have_is_refused(addr: str, words: str) -> None:
    """Each was accepted before and handed to torchrun and the datapath."""
    _refused({"hosts": [_host(data_addr=addr)]}, "hosts[0].data_addr", words)


@pytest.mark.parametrize("addr", ["10.1.0.1", "fd00::12", "2001:db8::5", "169.254.7.1",
                                  "192.168.50.255"])
def test_a_host_address_is_taken(addr: str) -> None:
    """Unique-local and global IPv6, IPv4 link-local and an address that only a prefix
    would make a broadcast: all can be a host's."""
    inv = parse_inventory({"hosts": [_host(data_addr=addr)]})
    assert inv.hosts[0].data_addr == addr


def test_an_ipv4_mapped_duplicate_is_refused_not_a_second_host() -> None:
    hosts = [_host(), _host(name="h2", data_addr="::ffff:10.1.0.1")]
    _refused({"hosts": hosts}, "hosts[1].data_addr", "written as IPv6")


def test_one_address_spelt_twice_is_a_duplicate() -> None:
    hosts = [_host(data_addr="fd00::1"), _host(name="h2", data_addr="fd00:0::0:1")]
    _refused({"hosts": hosts}, "hosts[1].data_addr", "is also hosts[0]'s")


@pytest.mark.parametrize(("ssh", "words"), [
    ("10.0.0.256", "four numbers of 0-255"),
    ("999", "last label is never all digits"),
    ("1.2.3", "neither an IP address"),
    ("gpu1.123", "last label is never all digits"),
    ("a" * 254, "254 characters: a host name has at most 253"),
    ("gpu1..lab", "neither"),
    ("-gpu1", "neither"),
    ("0.0.0.0", "not an address a host can have"),
    ("224.0.0.1", "not an address a host can have"),
])
def test_an_ssh_name_that_is_neither_address_nor_name_is_refused(ssh: str, words: str) -> None:
    _refused({"hosts": [_host(ssh=ssh)]}, "hosts[0].ssh", words)


@pytest.mark.parametrize("ssh", ["gpu1", "gpu1.lab.example", "gpu1.lab.example.", "10.0.0.11",
                                 "fd00::11", "fe80::1%eth0", "127.0.0.1", "a1b2"])
def test_an_ssh_address_or_name_is_taken(ssh: str) -> None:
    """ssh is reached from this machine, so a zone (an interface here) and loopback (one
    machine, several hosts) are meaningful for it, unlike for data_addr."""
    assert parse_inventory({"hosts": [_host(ssh=ssh)]}).hosts[0].ssh == ssh


@pytest.mark.parametrize(("iface", "words"), [
    (".", "not an interface name"),
    ("..", "not an interface name"),
    ("eth0:1", "address label"),
    ("a/b", "not a valid name"),
    ("eth 1", "not a valid name"),
    ("", "not a valid name"),
    ("x" * 16, "not a valid name"),
])
def test_an_interface_name_linux_refuses_is_refused(iface: str, words: str) -> None:
    _refused({"hosts": [_host(data_iface=iface)]}, "hosts[0].data_iface", words)


@pytest.mark.parametrize("python", ["/opt/my venv/python", "/opt/mltcp/bin/python -u",
                                    "python3\t"])
def test_python_is_one_path(python: str) -> None:
    _refused({"defaults": {"python": python}, "hosts": [_host()]}, "defaults.python",
             "whitespace")


# -- files on this machine -----------------------------------------------------------


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    """An inventory's directory with a private key and a known_hosts beside it."""
    (tmp_path / "id_lab").write_text("key\n")
    (tmp_path / "id_lab").chmod(0o600)
    (tmp_path / "known").write_text("# hosts\n10.0.0.1 ssh-ed25519 AAAA\n")
    return tmp_path


def _write(directory: Path, defaults: str) -> Path:
    path = directory / "inv.toml"
    path.write_text(f"[defaults]\n{defaults}\n[[hosts]]\nname = \"h1\"\nssh = \"10.0.0.1\"\n"
                    "data_addr = \"10.1.0.1\"\ndata_iface = \"eth1\"\n")
    return path


def test_key_and_known_hosts_are_taken_from_the_inventorys_directory(
        inv_dir: Path, tmp_path_factory, monkeypatch) -> None:
    """Not from the working directory: there ssh would read another file, or none."""
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    host = load_inventory(_write(inv_dir, 'key = "id_lab"\nknown_hosts = "known"')).hosts[0]
    assert (host.key, host.known_hosts) == (str(inv_dir / "id_lab"), str(inv_dir / "known"))


def test_a_key_under_home_is_expanded(inv_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(inv_dir))
    host = load_inventory(_write(inv_dir, 'key = "~/id_lab"')).hosts[0]
    assert host.key == str(inv_dir / "id_lab")


@pytest.mark.parametrize(("defaults", "field", "words"), [
    ('key = "nosuch"', "defaults.key", "no such file"),
    ('key = "."', "defaults.key", "is a directory"),
    ('key = "/dev/null"', "defaults.key", "not a regular file"),
    ('known_hosts = "nosuch"', "defaults.known_hosts", "no such file"),
    ('known_hosts = "."', "defaults.known_hosts", "is a directory"),
    ('known_hosts = "/dev/null"', "defaults.known_hosts", "not a regular file"),
    ('known_hosts = "empty"', "defaults.known_hosts", "holds no host keys"),
    ('key = "open"', "defaults.key", "open to others"),
])
def test_a_key_or_known_hosts_that_ssh_cannot_use_is_refused(
        inv_dir: Path, defaults: str, field: str, words: str) -> None:
    (inv_dir / "empty").write_text("# nothing yet\n\n")
    (inv_dir / "open").write_text("key\n")
    (inv_dir / "open").chmod(0o644)
    with pytest.raises(SpecError) as err:
        load_inventory(_write(inv_dir, defaults))
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_a_hosts_own_key_is_checked_too(inv_dir: Path) -> None:
    path = inv_dir / "inv.toml"
    path.write_text('[[hosts]]\nname = "h1"\nssh = "10.0.0.1"\ndata_addr = "10.1.0.1"\n'
                    'data_iface = "eth1"\nkey = "missing_key"\n')
    with pytest.raises(SpecError, match=r"^hosts\[0\]\.key: missing_key \(.*\): no such file"):
        load_inventory(path)


def test_an_unreadable_key_is_refused(inv_dir: Path, monkeypatch) -> None:
    """As root every file is readable, so the access check is made to say no for the
    key (as it does for another user's 0600 key)."""
    (inv_dir / "id_lab").chmod(0)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False
                        if str(path).endswith("id_lab") else real(path, mode))
    with pytest.raises(SpecError, match=r"^defaults\.key: .*cannot be read by this user"):
        load_inventory(_write(inv_dir, 'key = "id_lab"'))


def test_a_bom_is_read_not_reported_as_a_syntax_error(inv_dir: Path) -> None:
    path = _write(inv_dir, 'user = "root"')
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_inventory(path).hosts[0].user == "root"
