import logging
import os
import stat
from pathlib import Path

import pytest

from cluster import cli
from cluster.keys import (
    KEY_PREFIX,
    ApiKey,
    KeyFileError,
    KeyLimits,
    KeyStore,
    add_key,
    bearer_token,
    digest,
    list_keys,
    new_key,
    remove_key,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _one_char_changed(key: str) -> str:
    last = "A" if key[-1] != "A" else "B"
    return key[:-1] + last


def _rewrite(path: Path, text: str) -> None:
    # os.replace gives a new inode, as `keys add` does, so the change is always visible
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_new_key_shape_and_digest() -> None:
    a, b = new_key(), new_key()
    assert a.startswith(KEY_PREFIX)
    assert a != b
    assert len(a) - len(KEY_PREFIX) >= 43  # 32 random bytes, base64url
    assert digest(a) == digest(a)
    assert len(digest(a)) == 64


def test_add_stores_only_a_hash_0600_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "keys.yaml"
    key = add_key(path, "alice")
    text = path.read_text()
    assert key not in text
    assert key[len(KEY_PREFIX) :] not in text
    assert digest(key) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["keys.yaml"]  # no temp file left
    store = KeyStore(path)
    found = store.lookup(key)
    assert found is not None
    assert found.name == "alice"
    assert found.key_id == digest(key)[:12]
    assert found.key_id not in key
    assert store.lookup(new_key()) is None
    assert store.lookup(_one_char_changed(key)) is None
    assert store.lookup(key + "x") is None
    assert store.lookup("") is None
    assert store.lookup(None) is None


def test_admin_and_limits_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    limits = KeyLimits(requests_per_min=60, tokens_per_min=100_000, max_streams=4)
    k_admin = add_key(path, "root", admin=True)
    k_user = add_key(path, "bob", limits=limits)
    store = KeyStore(path)
    root, bob = store.lookup(k_admin), store.lookup(k_user)
    assert root is not None
    assert bob is not None
    assert root.admin
    assert root.limits == KeyLimits()
    assert not bob.admin
    assert bob.limits == limits
    listed = list_keys(path)
    assert [k.name for k in listed] == ["root", "bob"]
    assert listed[1] == bob
    assert listed[1].created  # an ISO timestamp


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="requests_per_min"):
        KeyLimits(requests_per_min=0)
    with pytest.raises(ValueError, match="max_streams"):
        KeyLimits(max_streams=True)  # type: ignore[arg-type]


def test_duplicate_name_refused_unless_replace(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    old = add_key(path, "alice")
    with pytest.raises(KeyFileError, match="already exists"):
        add_key(path, "alice")
    new = add_key(path, "alice", replace=True, admin=True)
    store = KeyStore(path)
    assert store.lookup(old) is None
    found = store.lookup(new)
    assert found is not None
    assert found.admin
    assert len(list_keys(path)) == 1


def test_duplicate_name_in_file_refused(tmp_path: Path) -> None:
    sha = digest(new_key())
    path = tmp_path / "keys.yaml"
    entry = f"  - {{name: a, sha256: {sha}}}\n"
    path.write_text("keys:\n" + entry + entry.replace(sha, digest(new_key())))
    with pytest.raises(KeyFileError, match="twice"):
        KeyStore(path)


def test_plaintext_key_field_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys:\n  - name: alice\n    key: sk-llmfleet-abc\n")
    with pytest.raises(KeyFileError, match="never stored in clear"):
        KeyStore(path)
    with pytest.raises(KeyFileError, match="never stored in clear"):
        list_keys(path)
    with pytest.raises(KeyFileError, match="never stored in clear"):
        KeyStore(None, "keys: [{name: a, key: x}]")


def test_bad_fields_named(tmp_path: Path) -> None:
    sha = digest(new_key())
    cases = {
        "keys: [{name: a, sha256: nothex}]": "sha256",
        f"keys: [{{name: a, sha256: {sha}, admn: true}}]": "unknown fields",
        f"keys: [{{name: a, sha256: {sha}, limits: {{rpm: 3}}}}]": "unknown limits",
        f"keys: [{{name: a, sha256: {sha}, limits: {{max_streams: -1}}}}]": "max_streams",
        f"keys: [{{name: 'a b', sha256: {sha}}}]": "name",
        "other: 1": "top level",
        "keys: [": "YAML",
    }
    for text, match in cases.items():
        with pytest.raises(KeyFileError, match=match):
            KeyStore(None, text)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"keys\.yaml"):
        KeyStore(tmp_path / "keys.yaml")
    with pytest.raises(KeyFileError):
        list_keys(tmp_path / "keys.yaml")


def test_configured(tmp_path: Path) -> None:
    assert not KeyStore(None).configured()
    path = tmp_path / "keys.yaml"
    path.write_text("")
    empty = KeyStore(path)
    assert empty.configured()  # auth on, everything refused
    assert empty.lookup(new_key()) is None
    path.write_text("keys: []\n")
    assert KeyStore(path).configured()
    assert KeyStore(None, "keys: []").configured()


def test_reload_picks_up_added_and_removed_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    alice = add_key(path, "alice")
    clock = Clock()
    store = KeyStore(path, clock=clock, reload_period_s=1.0)
    bob = add_key(path, "bob")
    clock.now = 0.5
    assert store.lookup(bob) is None  # not yet time to look at the file
    clock.now = 1.0
    assert store.lookup(bob) is not None
    assert remove_key(path, "alice")
    assert not remove_key(path, "alice")
    assert store.lookup(alice) is not None
    clock.now = 2.5
    assert store.lookup(alice) is None
    assert store.lookup(bob) is not None


def test_invalid_rewrite_keeps_old_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.yaml"
    alice = add_key(path, "alice")
    clock = Clock()
    store = KeyStore(path, clock=clock)
    _rewrite(path, "keys:\n  - name: alice\n    key: " + alice + "\n")
    clock.now = 5.0
    with caplog.at_level(logging.WARNING, logger="cluster.keys"):
        assert store.lookup(alice) is not None
    assert "keeping previous keys" in caplog.text
    assert alice not in caplog.text
    path.unlink()
    clock.now = 10.0
    assert store.lookup(alice) is not None  # a vanished file never opens the API
    bob = add_key(path, "bob")
    clock.now = 15.0
    assert store.lookup(alice) is None
    assert store.lookup(bob) is not None


def test_env_text_source_and_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_key = new_key()
    env_text = f"keys:\n  - name: ci\n    sha256: {digest(env_key)}\n    admin: true\n"
    only_env = KeyStore(None, env_text)
    assert only_env.configured()
    found = only_env.lookup(env_key)
    assert found is not None
    assert found.admin
    path = tmp_path / "keys.yaml"
    file_key = add_key(path, "alice")
    monkeypatch.setenv("LLMFLEET_API_KEYS", env_text)
    both = KeyStore.from_config(path)
    assert both.lookup(env_key) == found
    assert both.lookup(file_key) is not None
    add_key(path, "ci")
    with pytest.raises(KeyFileError, match="'ci' appears twice"):
        KeyStore.from_config(path)


def test_bearer_token() -> None:
    assert bearer_token("Bearer sk-llmfleet-x") == "sk-llmfleet-x"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("BEARER abc") == "abc"
    for bad in [None, "", "Bearer", "Bearer ", "Basic abc", "abc", "Bearer a b", "Token abc"]:
        assert bearer_token(bad) is None


def test_cli_add_prints_key_once_and_list_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.yaml"
    assert cli.main(["keys", "add", "alice", "--file", str(path), "--rpm", "60"]) == 0
    out, err = capsys.readouterr()
    key = out.strip()
    assert key.startswith(KEY_PREFIX)
    assert out.count(key) == 1
    assert key not in err
    assert "not stored" in err
    assert str(path) in err
    found = KeyStore(path).lookup(key)
    assert found == ApiKey("alice", False, KeyLimits(requests_per_min=60), digest(key)[:12])

    assert cli.main(["keys", "add", "alice", "--file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--replace" in err

    assert cli.main(["keys", "list", "--file", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "alice" in out
    assert found.key_id in out
    assert key not in out + err
    assert key[len(KEY_PREFIX) :] not in out + err

    assert cli.main(["keys", "remove", "alice", "--file", str(path)]) == 0
    assert cli.main(["keys", "remove", "alice", "--file", str(path)]) == 2
    assert list_keys(path) == []


def test_cli_file_from_config_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys_file = tmp_path / "fleet-keys.yaml"
    config = tmp_path / "fleet.yaml"
    config.write_text(f"server:\n  api_keys_file: {keys_file}\n")
    assert cli.main(["keys", "add", "ops", "--admin", "--config", str(config)]) == 0
    capsys.readouterr()
    assert [(k.name, k.admin) for k in list_keys(keys_file)] == [("ops", True)]
    assert cli.main(["keys", "list", "--file", str(tmp_path / "none.yaml")]) == 2
    out, err = capsys.readouterr()
    assert "none.yaml" in err
    assert out == ""  # no table header before the error
    assert cli.main(["keys", "add", "x", "--file", str(keys_file), "--tpm", "0"]) == 2
    assert "tokens_per_min" in capsys.readouterr().err
