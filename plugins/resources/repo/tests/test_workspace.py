"""The workspace without a server: repositories from a directory, a tar or a zip file, or inline;
archive members that climb out refused; paths and links resolved inside only; the size cap."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from gym_repo.workspace import Entry, Workspace, WorkspaceError, load_repository

MB = 1 << 20


def test_a_directory_with_a_link_and_an_empty_directory(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "run.sh").write_text("echo hi\n")
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "empty").mkdir()
    (tmp_path / "link.py").symlink_to("pkg/mod.py")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\0")
    workspace = load_repository(str(tmp_path), max_bytes=MB)
    assert workspace.entries["pkg/mod.py"] == Entry("file", b"X = 1\n")
    assert workspace.entries["run.sh"].executable and workspace.entries["empty"].kind == "dir"
    assert workspace.entries["link.py"] == Entry("link", target="pkg/mod.py")
    assert not any("__pycache__" in p for p in workspace.entries)
    assert workspace.read("link.py") == b"X = 1\n"
    # A relative path starts at the base (the server's repository_root).
    assert load_repository(tmp_path.name, max_bytes=MB, base=tmp_path.parent).entries.keys() == workspace.entries.keys()


def test_a_tar_file_and_a_member_that_climbs_out(tmp_path):
    def tar(path, members: dict[str, bytes]) -> str:
        with tarfile.open(path, "w:gz") as archive:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return str(path)

    good = load_repository(tar(tmp_path / "ok.tar.gz", {"pkg/a.py": b"A = 1\n"}), max_bytes=MB)
    assert good.read("pkg/a.py") == b"A = 1\n"
    with pytest.raises(WorkspaceError, match="outside the repository"):
        load_repository(tar(tmp_path / "bad.tgz", {"../../etc/evil": b"x"}), max_bytes=MB)
    with pytest.raises(WorkspaceError, match="size limit"):
        load_repository(tar(tmp_path / "big.tar.gz", {"big": b"x" * 2048}), max_bytes=1024)


def test_a_zip_file_and_a_member_that_climbs_out(tmp_path):
    with zipfile.ZipFile(tmp_path / "ok.zip", "w") as archive:
        archive.writestr("pkg/b.py", "B = 2\n")
    assert load_repository(str(tmp_path / "ok.zip"), max_bytes=MB).read("pkg/b.py") == b"B = 2\n"
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as archive:
        archive.writestr("/abs/evil.py", "x")
    with pytest.raises(WorkspaceError, match="outside the repository"):
        load_repository(str(tmp_path / "bad.zip"), max_bytes=MB)
    with pytest.raises(WorkspaceError, match="no such directory or archive"):
        load_repository(str(tmp_path / "missing"), max_bytes=MB)


def test_paths_and_links_stay_inside():
    workspace = Workspace(
        {
            "a/b.txt": Entry("file", b"b"),
            "up": Entry("link", target="../.."),
            "abs": Entry("link", target="/etc"),
            "loop": Entry("link", target="loop"),
            "inside": Entry("link", target="a/../a/b.txt"),
        },
        max_bytes=MB,
    )
    assert workspace.read("./a/../a/b.txt") == b"b" and workspace.read("inside") == b"b"
    for path, message in [
        ("../x", "leaves the workspace"),
        ("/etc/passwd", "absolute"),
        ("up/etc/passwd", "out of the workspace"),
        ("abs/passwd", "outside the workspace"),
        ("loop", "too many levels"),
        ("a/\0", "not a valid path"),
    ]:
        with pytest.raises(WorkspaceError, match=message):
            workspace.read(path)
    with pytest.raises(WorkspaceError, match="size limit"):
        workspace.write("big.bin", b"x" * MB)
    assert "big.bin" not in workspace.entries  # refused writes change nothing
    assert workspace.list() == ["a/b.txt", "abs", "inside", "loop", "up"]
