"""The key pair that signs rules: a public key file of another pair is refused where the pair is used, and two
processes creating the pair at once make one pair (found by hostile testing).

- ``signing_key.pub`` beside a ``signing_key.pem`` of another pair (two creations at once, a file copied over it) was
  not noticed: only a *missing* public key was derived. Rules signed on the machine were then refused by its own
  ``triage`` ("not a trusted key").
- Two first certifications at once on a fresh machine (or two ``monai-unc keys --create``) were not locked against each
  other: A wrote its private key, B wrote both of its files, A wrote its public key: a mismatched pair.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.io.files import output_lock
from monai_unc.io.provenance import check_signature, write_signed_json
from monai_unc.io.signing import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    KeyPairMismatchError,
    Trust,
    check_key_pair,
    complete_key_pair,
    default_signing_key,
    generate_key_pair,
    key_fingerprint,
    load_private_key,
    load_public_key,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh configuration folder (nothing in it yet)."""
    for name in ("MONAI_UNC_CONFIG_DIR", "MONAI_UNC_SIGNING_KEY", "MONAI_UNC_TRUSTED_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "monai-unc"


def _fingerprint(path: Path) -> str:
    return key_fingerprint(load_private_key(path).public_key()) if path.suffix == ".pem" else \
        key_fingerprint(load_public_key(path))


def _mismatched(folder: Path, tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A pair in ``folder`` whose public key file is that of another pair; returns the files and its bytes."""
    priv, pub = generate_key_pair(folder)
    other = generate_key_pair(tmp_path / "other")[1].read_bytes()
    pub.write_bytes(other)
    return priv, pub, other


def _assert_names_the_pair(text: str, priv: Path, pub: Path) -> None:
    assert str(priv) in text and str(pub) in text and "monai-unc keys --create --overwrite" in text, text
    assert "\n" not in text.strip(), text


def test_signing_with_a_mismatched_default_pair_is_refused(config, tmp_path):
    priv, pub, other = _mismatched(config, tmp_path)
    with pytest.raises(KeyPairMismatchError) as e:
        default_signing_key()
    _assert_names_the_pair(str(e.value), priv, pub)
    assert isinstance(e.value, ValueError)
    with pytest.raises(KeyPairMismatchError):  # not written unsigned with a warning: nothing is written
        write_signed_json(tmp_path / "rule.json", {"a": 1})
    assert not (tmp_path / "rule.json").exists()
    assert pub.read_bytes() == other  # the user's public key file is never replaced silently
    with pytest.raises(KeyPairMismatchError):
        complete_key_pair(priv)
    with pytest.raises(KeyPairMismatchError):  # not "a key pair exists": the pair is broken
        generate_key_pair(config)
    assert pub.read_bytes() == other


def test_a_public_key_file_that_is_no_key_is_a_mismatch(config, tmp_path):
    priv, pub = generate_key_pair(config)
    pub.write_text("not a key\n")
    with pytest.raises(KeyPairMismatchError, match="no readable Ed25519 public key") as e:
        check_key_pair(priv)
    _assert_names_the_pair(str(e.value), priv, pub)


def test_a_named_signing_key_with_a_mismatched_public_key_is_refused(config, tmp_path, monkeypatch):
    priv, pub, _ = _mismatched(tmp_path / "dept", tmp_path)
    monkeypatch.setenv("MONAI_UNC_SIGNING_KEY", str(priv))
    with pytest.raises(KeyPairMismatchError) as e:
        default_signing_key()
    assert f"'{priv.parent}'" in str(e.value)  # the remedy names the pair's folder
    _assert_names_the_pair(str(e.value), priv, pub)
    pub.unlink()  # a named key without a public key beside it signs as before
    assert default_signing_key() == priv


def test_a_matching_pair_is_kept(config):
    priv, pub = generate_key_pair(config)
    assert default_signing_key() == priv and check_key_pair(priv) == pub
    with pytest.raises(FileExistsError):
        generate_key_pair(config)
    assert _fingerprint(priv) == _fingerprint(pub)


def test_keys_refuses_a_mismatched_pair_in_one_line(config, tmp_path, capsys):
    priv, pub, other = _mismatched(config, tmp_path)
    for args in (["keys"], ["keys", "--create"]):
        assert cli.main(args) == 2, args
        out = capsys.readouterr()
        _assert_names_the_pair(out.err, priv, pub)
        assert len(out.err.strip().splitlines()) == 1, out.err
    assert pub.read_bytes() == other
    assert cli.main(["keys", "--create", "--overwrite"]) == 0  # the remedy it names
    assert _fingerprint(config / PRIVATE_KEY_FILE) == _fingerprint(config / PUBLIC_KEY_FILE)
    capsys.readouterr()
    assert cli.main(["keys"]) == 0


def test_a_rule_signed_before_the_mismatch_says_why_it_is_refused(config, tmp_path):
    """A rule this machine signed, refused by its own triage once its public key file is another key's: the message
    says that the key is this machine's and how to mend the pair."""
    priv, pub = generate_key_pair(config)
    doc = json.loads(write_signed_json(tmp_path / "rule.json", {"a": 1}).read_text())
    pub.write_bytes(generate_key_pair(tmp_path / "other")[1].read_bytes())
    with pytest.raises(ValueError, match="not a trusted key") as e:
        check_signature(doc, Trust(), "rule.json")
    assert f"it is the key of {priv}" in str(e.value)
    _assert_names_the_pair(str(e.value), priv, pub)


# ---------------------------------------------------------------------------------------------------------------------
# two processes creating the pair at once
# ---------------------------------------------------------------------------------------------------------------------
_CHILD = """
import sys
from monai_unc import cli
from monai_unc.io.signing import default_signing_key, key_fingerprint, load_private_key
print("ready", flush=True)
if sys.argv[1] == "sign":
    print(key_fingerprint(load_private_key(default_signing_key()).public_key()), flush=True)
else:
    print("rc", cli.main(["keys", "--create"]), flush=True)
"""


def _env(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MONAI_UNC_SIGNING_KEY", "MONAI_UNC_TRUSTED_KEYS")}
    env.update(MONAI_UNC_CONFIG_DIR=str(config), PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return env


@pytest.mark.parametrize("how", ["sign", "keys"])
def test_a_second_process_waits_for_the_pair_being_created(config, how):
    """Another process holds the key folder's lock while it creates the pair (it has checked that there is none and
    not yet written it): a first certification, or ``keys --create``, in this process waits, then uses (or refuses,
    as an existing pair) the pair the other process made, instead of writing a second pair over it."""
    config.mkdir(parents=True, mode=0o700)
    with output_lock(config, "monai-unc keys"):  # process A, between its check and its writes
        child = subprocess.Popen([sys.executable, "-c", _CHILD, how], env=_env(config), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            time.sleep(1.5)
            assert child.poll() is None, child.communicate()  # waits for A ...
            assert not (config / PRIVATE_KEY_FILE).exists()  # ... and writes nothing meanwhile
            priv, pub = generate_key_pair(config)  # A writes its pair (the lock is this process's: reentrant)
            mine = _fingerprint(priv)
        except BaseException:
            child.kill()
            raise
    out, err = child.communicate(timeout=120)
    if how == "sign":
        assert out.strip() == mine, err  # B signs with A's pair
    else:
        assert out.strip() == "rc 2" and "a key pair exists" in err, (out, err)
    assert _fingerprint(priv) == mine == _fingerprint(pub)


def _race(sync: Path, me: int, n: int, rounds: int) -> None:
    """One racer (a forked process): in each round, once all ``n`` racers are at its start, the signing key of a
    fresh configuration folder (created by the first to get there); prints ``<round> <fingerprint>`` per round."""
    for r in range(rounds):
        (sync / f"{r}-{me}").touch()
        deadline = time.monotonic() + 60
        while len([p for p in os.listdir(sync) if p.startswith(f"{r}-")]) < n and time.monotonic() < deadline:
            time.sleep(0.0005)
        os.environ["MONAI_UNC_CONFIG_DIR"] = str(sync.parent / f"config{r}")
        try:
            print(r, key_fingerprint(load_private_key(default_signing_key()).public_key()), flush=True)
        except Exception as e:  # a race lost: said, and the next rounds still run
            print(r, f"{type(e).__name__}:{str(e)[:60]!r}".replace(" ", "_"), flush=True)


def _forked_racers(sync: Path, n: int, rounds: int, env: dict[str, str]) -> list[tuple[int, str]]:
    """:func:`_race` in ``n`` processes forked from this one with the environment ``env``, started together:
    ``[(exit status, what it printed)]``. Forked rather than fresh interpreters (an import of the package each): the
    race is between processes, each with its own open files and locks, which a fork has as a fresh process does."""
    children = []
    for i in range(n):
        out = sync.parent / f"racer{i}.out"
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.environ.clear()
                os.environ.update(env)
                with open(out, "w") as f:
                    os.dup2(f.fileno(), 1)
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                _race(sync, i, n, rounds)
                code = 0
            except BaseException:  # said in its output (the test shows it), exit status 1
                traceback.print_exc(file=sys.stdout)
                sys.stdout.flush()
            finally:
                os._exit(code)
        children.append((pid, out))
    results = []
    deadline = time.monotonic() + 300
    for pid, out in children:
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                for other, _ in children:
                    try:
                        os.kill(other, 9)
                    except ProcessLookupError:
                        pass
                pytest.fail("the racers did not finish within 300 s")
            time.sleep(0.01)
        results.append((os.waitstatus_to_exitcode(done[1]), out.read_text()))
    return results


def test_processes_racing_to_create_the_pair_make_one(tmp_path):
    """Real processes, started together on fresh configuration folders: every one signs with the one pair, and the
    pair's public key file is its private key's."""
    n, rounds = 3, 15
    sync = tmp_path / "sync"
    sync.mkdir()
    results = _forked_racers(sync, n, rounds, _env(tmp_path / "unused"))
    assert all(code == 0 for code, _ in results), results
    seen: dict[int, set[str]] = {}
    for _, out in results:
        for line in out.split("\n"):
            if line:
                r, fp = line.split()
                seen.setdefault(int(r), set()).add(fp)
    assert sorted(seen) == list(range(rounds))
    for r in range(rounds):
        priv = tmp_path / f"config{r}" / PRIVATE_KEY_FILE
        check_key_pair(priv)
        assert seen[r] == {_fingerprint(priv)}, r
