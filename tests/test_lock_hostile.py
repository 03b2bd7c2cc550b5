"""Issue 19, class 1: a file planted in the shared lock directory never makes the workbench write into,
or change the mode of, a file it did not create; an unsafe lock directory is refused in one line."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.errors import LockError
from workbench.measure.lock.device import DeviceLock, lock_name

NOBODY = 65534


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "locks"
    directory.mkdir()
    os.chmod(directory, 0o1777)
    return directory


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file standing in for /etc/something root owns: private mode, content that must survive."""
    path = tmp_path / "victim"
    path.write_text("root:secret\n")
    os.chmod(path, 0o600)
    return path


def untouched(path: Path, mode: int = 0o600, text: str = "root:secret\n") -> bool:
    return stat.S_IMODE(os.stat(path).st_mode) == mode and path.read_text() == text


def refused(lock: DeviceLock, match: str) -> str:
    with pytest.raises(LockError) as info:
        lock.acquire()
    text = str(info.value)
    assert "\n" not in text and str(lock.path.parent) in text and match in text, text
    return text


def test_a_symlink_planted_as_the_lock_file_is_refused_and_its_target_untouched(lock_dir, victim):
    os.symlink(victim, lock_dir / lock_name("host"))
    refused(DeviceLock("host", lock_dir), "symbolic link")
    assert untouched(victim)
    refused(DeviceLock("host", lock_dir), "symbolic link")  # check() before a measurement says the same
    assert untouched(victim)


def test_a_hard_link_planted_as_the_lock_file_is_refused_and_its_target_untouched(lock_dir, victim):
    os.link(victim, lock_dir / lock_name("cuda"))
    refused(DeviceLock("cuda:0", lock_dir), "hard link")
    assert untouched(victim)


def test_a_fifo_planted_as_the_lock_file_is_refused_at_once(lock_dir):
    os.mkfifo(lock_dir / lock_name("host"))
    done = threading.Event()
    errors: list[BaseException] = []

    def take() -> None:
        try:
            DeviceLock("host", lock_dir).acquire()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)
        done.set()

    threading.Thread(target=take, daemon=True).start()
    assert done.wait(5), "opening the lock blocked on a FIFO"
    assert len(errors) == 1 and isinstance(errors[0], LockError) and "not a regular file" in str(errors[0])


def test_another_users_lock_file_is_locked_but_never_written_nor_chmodded(lock_dir):
    theirs = lock_dir / lock_name("host")
    theirs.write_text("pid 1 since then\n")
    os.chmod(theirs, 0o600)
    os.chown(theirs, NOBODY, NOBODY)
    with DeviceLock("host", lock_dir) as lock:
        assert lock.waited_s >= 0
    assert untouched(theirs, 0o600, "pid 1 since then\n") and os.stat(theirs).st_uid == NOBODY


def test_a_new_lock_file_is_made_exclusively_with_mode_0644_and_says_who_holds_it(lock_dir):
    old = os.umask(0o077)
    try:
        with DeviceLock("hip:1", lock_dir) as lock:
            assert f"pid {os.getpid()}" in lock.holder()
    finally:
        os.umask(old)
    st = os.lstat(lock_dir / lock_name("hip:1"))
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.geteuid()


def test_a_missing_lock_directory_is_made_shared_and_sticky(tmp_path):
    with DeviceLock("host", tmp_path / "a" / "locks"):
        pass
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "locks").st_mode) == 0o1777


@pytest.mark.parametrize("mode, owner, match", [
    (0o777, None, "not sticky"),  # anyone could swap the lock files
    (0o775, None, "not sticky"),
    (0o1777, NOBODY, "owned by uid 65534"),  # its owner could swap them
    (0o755, NOBODY, "owned by uid 65534"),
])
def test_an_unsafe_lock_directory_is_refused(tmp_path, mode, owner, match):
    directory = tmp_path / "locks"
    directory.mkdir()
    os.chmod(directory, mode)
    if owner is not None:
        os.chown(directory, owner, owner)
    refused(DeviceLock("host", directory), match)
    assert os.listdir(directory) == []  # nothing created in it


def test_a_lock_directory_reached_through_someone_elses_symlink_is_refused(tmp_path, lock_dir):
    link = tmp_path / "link"
    os.symlink(lock_dir, link)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(LockError, match="symbolic link owned by uid 65534"):
        DeviceLock("host", link).acquire()
    os.lchown(link, 0, 0)
    with DeviceLock("host", link):  # root's own link to a safe directory is fine
        pass


def test_a_measurement_with_an_unsafe_lock_is_one_line_and_records_nothing(tmp_path, lock_dir, victim,
                                                                           isolated_cache):
    from workbench.cli import main
    from workbench.formats.synth import write_synthetic

    model = tmp_path / "m.gguf"
    write_synthetic(model, format="gguf", layout="dense", size=256 << 10)
    os.symlink(victim, lock_dir / lock_name("host"))
    ledger = tmp_path / "l.sqlite"
    out = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "asis",
                                    "--ledger", str(ledger)], env={"WORKBENCH_LOCK_DIR": str(lock_dir)})
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "symbolic link" in out.output, out.output
    assert untouched(victim)
    if ledger.exists():
        from workbench.ledger import Ledger

        with Ledger(ledger) as led:
            assert led.attempts().empty


# -- second adversarial pass (issue 19 "Done when"): the directories above the lock directory -------------

def test_a_lock_directory_below_a_world_writable_unsticky_parent_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone may rename 'locks' away and put a link to /etc in its place
    (shared / "locks").mkdir()
    os.chmod(shared / "locks", 0o1777)
    text = refused(DeviceLock("host", shared / "locks"), "not sticky")
    assert f"{shared} (above it)" in text
    assert os.listdir(shared / "locks") == []


def test_a_lock_directory_reached_through_a_parent_link_of_someone_else_is_refused(tmp_path, lock_dir):
    os.symlink(lock_dir.parent, tmp_path / "evil")
    os.lchown(tmp_path / "evil", NOBODY, NOBODY)  # the link's owner could point it anywhere later
    with pytest.raises(LockError, match="symbolic link owned by uid 65534"):
        DeviceLock("host", tmp_path / "evil" / "locks").acquire()
    assert os.listdir(lock_dir) == []


def test_a_lock_directory_swapped_for_a_link_while_it_is_made_never_changes_the_links_target(tmp_path,
                                                                                            monkeypatch):
    """The attacker's move between mkdir and chmod (a parent they may write into): the new directory
    renamed away and a link to a root directory put in its place. Its target must keep its mode."""
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        if os.fspath(path).endswith("locks"):
            full = shared / "locks"
            os.rename(full, shared / "moved")
            os.symlink(victim, full)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(LockError):
        DeviceLock("host", shared / "locks").acquire()
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o755 and os.listdir(victim) == []


def test_a_lock_directory_under_sticky_world_writable_parents_and_own_links_still_works(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp
    os.symlink(sticky, tmp_path / "mine")  # this user's own link on the way
    with DeviceLock("host", tmp_path / "mine" / "a" / "locks"):
        pass
    assert stat.S_IMODE(os.stat(sticky / "a" / "locks").st_mode) == 0o1777
