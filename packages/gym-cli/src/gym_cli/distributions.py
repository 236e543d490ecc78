"""A plugin's published files, its sdist and wheel: building and checking them before they are
published (``gym plugin build``), and finding a published sdist again to run its tests (``gym test``).

What a publishable plugin's metadata must say (:func:`check_wheel`):

- an entry point in group ``gym`` whose module is in the wheel (that is how gym finds the plugin);
- a dependency on gym-core with a floor, the oldest gym-core it works with (``gym-core>=0.1``; a
  ceiling is optional). Not bare ``gym-core`` (it claims every gym-core, past and future), not an exact
  pin (``==0.1.0`` runs with that one gym-core only), not a development or local version
  (``0.2.0.dev1``, ``0.1.0+local``: no index has them), and a range that the gym-core running now
  satisfies (else this gym could not run what it just built);
- a long description (``readme = "README.md"``): the package's page on the index.
"""

from __future__ import annotations

import configparser
import email.parser
import hashlib
import html.parser
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from gym_core.errors import GymError
from gym_core.plugins import ENTRY_POINT_GROUP

from gym_cli.sources import PluginSource, normalize_name, requirement_name

__all__ = [
    "CORE_DISTRIBUTION",
    "BuildReport",
    "build_distributions",
    "check_core_requirement",
    "check_wheel",
    "check_sdist",
    "installed_version",
    "published_sources",
]

CORE_DISTRIBUTION = "gym-core"
PYPI_SIMPLE = "https://pypi.org/simple/"
BUILD_TIMEOUT_S = 600.0
DOWNLOAD_TIMEOUT_S = 60.0


@dataclass
class BuildReport:
    """What ``gym plugin build`` made: the files, the plugin's name, version and entry points, and
    what is wrong with them (``problems``: the build is refused) or worth knowing (``notes``)."""

    sdist: Path
    wheel: Path
    name: str = ""
    version: str = ""
    entry_points: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- checks --------------------------------------------------------------------------------------------


def check_core_requirement(requires: list[str], core_version: str | None) -> list[str]:
    """The problems of the gym-core dependency among ``requires`` (``Requires-Dist`` values), judged
    against ``core_version``, the gym-core running now (None: unknown, not checked)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    floor_hint = f"gym-core>={Version(core_version).base_version}" if core_version else "gym-core>=0.1"
    found = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if normalize_name(requirement.name) == CORE_DISTRIBUTION and (
            requirement.marker is None or requirement.marker.evaluate({"extra": ""})
        ):
            found.append(requirement)
    if not found:
        return [f"it does not depend on gym-core: add {floor_hint!r} to [project] dependencies"]
    problems = []
    for requirement in found:
        if requirement.url:
            problems.append(
                f"its gym-core dependency points at {requirement.url}: an index cannot serve that; "
                f"use a version range like {floor_hint!r}"
            )
            continue
        specifiers = list(requirement.specifier)
        if not specifiers:
            problems.append(
                f"its gym-core dependency has no version range (a bare 'gym-core' claims every gym-core, "
                f"future ones included): give the oldest it works with, e.g. {floor_hint!r}, "
                "in [project] dependencies"
            )
            continue
        for spec in specifiers:
            if spec.operator == "===" or (spec.operator == "==" and not spec.version.endswith(".*")):
                problems.append(
                    f"its gym-core dependency is an exact pin ({spec}): the plugin could run with that one "
                    f"gym-core only; use a floor, e.g. {floor_hint!r}"
                )
                continue
            try:
                version = Version(spec.version.removesuffix(".*"))
            except InvalidVersion:
                continue
            if version.local is not None or version.is_devrelease:
                problems.append(
                    f"its gym-core dependency names {spec.version}, a development or local version no "
                    f"index has: name a released version, e.g. {floor_hint!r}"
                )
        if problems:
            continue
        if not any(spec.operator in (">=", ">", "~=", "==") for spec in specifiers):
            problems.append(
                f"its gym-core dependency {str(requirement.specifier)!r} has no floor: add the oldest "
                f"gym-core it works with, e.g. {floor_hint!r}"
            )
        elif core_version and not requirement.specifier.contains(core_version, prereleases=True):
            problems.append(
                f"its gym-core dependency {str(requirement)!r} excludes the gym-core running now "
                f"({core_version}): gym could not run the plugin; upgrade gym, or lower the floor to what "
                f"the plugin needs (at most {floor_hint!r})"
            )
    return problems


def _module_files(module: str) -> tuple[str, str]:
    path = module.replace(".", "/")
    return f"{path}.py", f"{path}/__init__.py"


def check_wheel(wheel: Path, core_version: str | None) -> BuildReport:
    """Read ``wheel``'s metadata and entry points; a report whose ``problems`` say what is wrong."""
    report = BuildReport(sdist=Path(), wheel=wheel)
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            dist_info = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
            if len(dist_info) != 1:
                report.problems.append(f"{wheel.name} has {len(dist_info)} .dist-info directories, not 1")
                return report
            (info,) = dist_info
            metadata = zf.read(f"{info}/METADATA").decode("utf-8")
            entry_text = (
                zf.read(f"{info}/entry_points.txt").decode("utf-8") if f"{info}/entry_points.txt" in names else ""
            )
    except (OSError, zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        report.problems.append(f"{wheel.name} is not a readable wheel: {exc}")
        return report
    message = email.parser.Parser().parsestr(metadata)
    report.name, report.version = message.get("Name", ""), message.get("Version", "")
    hint = (report.name[4:] if report.name.startswith("gym-") else report.name).replace("-", "_") or "my_env"

    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # entry point names keep their case
    try:
        parser.read_string(entry_text)
    except configparser.Error as exc:
        report.problems.append(f"its entry_points.txt cannot be read: {exc}")
    if not parser.has_section(ENTRY_POINT_GROUP) or not parser.items(ENTRY_POINT_GROUP):
        report.problems.append(
            f"it declares no entry point in group {ENTRY_POINT_GROUP!r}, through which gym finds plugins: add "
            f'[project.entry-points.{ENTRY_POINT_GROUP}] {hint} = "<module>.plugin" to pyproject.toml'
        )
    else:
        for name, value in parser.items(ENTRY_POINT_GROUP):
            report.entry_points[name] = value
            module = value.split(":", 1)[0].strip()
            if not module or not all(part.isidentifier() for part in module.split(".")):
                report.problems.append(
                    f"entry point {name} = {value!r} in group {ENTRY_POINT_GROUP!r} does not name a module"
                )
            elif not names.intersection(_module_files(module)):
                report.problems.append(
                    f"entry point {name} = {value!r} in group {ENTRY_POINT_GROUP!r} names module {module!r}, which the "
                    f"wheel does not contain (no {' or '.join(_module_files(module))}): fix the entry point in pyproject.toml"
                )

    report.problems += check_core_requirement(message.get_all("Requires-Dist") or [], core_version)

    payload = message.get_payload() if not message.is_multipart() else ""
    description = payload if isinstance(payload, str) else ""
    if not description.strip() and not (message.get("Description") or "").strip():
        report.problems.append(
            'it has no long description (the page an index shows): add readme = "README.md" '
            "to [project] in pyproject.toml"
        )
    return report


def check_sdist(sdist: Path, report: BuildReport) -> None:
    """Add to ``report`` what is wrong with ``sdist`` or worth knowing (tests missing)."""
    report.sdist = sdist
    try:
        with tarfile.open(sdist) as tf:
            members = tf.getnames()
    except (OSError, tarfile.TarError) as exc:
        report.problems.append(f"{sdist.name} is not a readable sdist: {exc}")
        return
    if not any(name.count("/") == 1 and name.endswith("/PKG-INFO") for name in members):
        report.problems.append(f"{sdist.name} has no PKG-INFO: it is not an sdist")
    if not any(name.split("/")[1:2] == ["tests"] and name.endswith(".py") for name in members):
        report.notes.append(f"{sdist.name} holds no tests/: `gym test` has nothing to run once it is installed")


# --- building ------------------------------------------------------------------------------------------


def _uv_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}


def check_examples(directory: Path, wheel: Path, report: BuildReport) -> None:
    """A package's ``data/`` and ``configs/`` must be in its wheel, under ``<module>/examples/``: where the
    plugin is installed from the wheel, `gym plugin examples` copies them out from there."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    modules = sorted({value.split(".")[0] for value in report.entry_points.values()}) or ["<module>"]
    for name in ("data", "configs"):
        if not (directory / name).is_dir() or not any((directory / name).rglob("*")):
            continue
        if not any(n.split("/")[1:3] == ["examples", name] for n in names):
            report.problems.append(
                f"its {name}/ is not in the wheel, so `gym plugin examples` finds nothing where it is installed: "
                f'add to pyproject.toml [tool.hatch.build.targets.wheel.force-include] "{name}" = '
                f'"{modules[0]}/examples/{name}"'
            )


def build_distributions(
    directory: Path, out: Path, uv: str, core_version: str | None, problems: list[str] | None = None
) -> BuildReport:
    """Build the sdist and wheel of the package in ``directory`` with ``uv build`` and check them.

    They land in ``out`` only when the checks find no problem (a file of the same name is replaced);
    otherwise nothing is written there and the report's ``problems`` say why. ``problems``: what the
    caller found already (the README's, :mod:`gym_cli.plugin_docs`), listed first and blocking too.
    ``uv build`` runs with ``--no-sources``, as the package builds for anyone who downloads it. A
    failing build is a :class:`GymError` with uv's last lines."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".gym-build-", dir=out) as tmp:
        command = [uv, "build", "--sdist", "--wheel", "--no-sources", "--out-dir", tmp, str(directory)]
        try:
            proc = subprocess.run(
                command,
                cwd=directory,
                env=_uv_environ(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise GymError(f"`uv build` of {directory} did not finish within {BUILD_TIMEOUT_S:.0f} s") from None
        except OSError as exc:
            raise GymError(f"cannot run uv ({uv}): {exc}; install it with `pip install uv`") from exc
        if proc.returncode != 0:
            tail = "\n".join(f"  | {line}" for line in (proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise GymError(f"`uv build` of {directory} failed with exit code {proc.returncode}:\n{tail}")
        wheels, sdists = sorted(Path(tmp).glob("*.whl")), sorted(Path(tmp).glob("*.tar.gz"))
        if len(wheels) != 1 or len(sdists) != 1:
            raise GymError(
                f"`uv build` of {directory} made {len(wheels)} wheels and {len(sdists)} sdists, not one of each"
            )
        report = check_wheel(wheels[0], core_version)
        check_sdist(sdists[0], report)
        check_examples(directory, wheels[0], report)
        report.problems[:0] = problems or []
        if report.problems:
            return report
        for built in (sdists[0], wheels[0]):
            os.replace(built, out / built.name)
        report.sdist, report.wheel = out / sdists[0].name, out / wheels[0].name
    return report


# --- a published plugin's sources, for its tests -------------------------------------------------------


def installed_version(venv: Path, distribution: str) -> str | None:
    """The version of ``distribution`` installed in the venv at ``venv``, None when it is not there."""
    from gym_cli.venvs.layout import site_packages

    wanted = normalize_name(distribution)
    for site in site_packages(venv):
        for info in site.glob("*.dist-info"):
            metadata = info / "METADATA"
            if not metadata.is_file():
                continue
            message = email.parser.Parser().parsestr(
                metadata.read_text(encoding="utf-8", errors="replace"), headersonly=True
            )
            if normalize_name(message.get("Name", "")) == wanted:
                return message.get("Version")
    return None


class _Links(html.parser.HTMLParser):
    """The ``href`` of every anchor of a simple-index or find-links page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for key, value in attrs if key == "href" and value]


def _is_sdist_of(filename: str, distribution: str, version: str) -> bool:
    if not filename.endswith(".tar.gz"):
        return False
    name, _, file_version = filename[: -len(".tar.gz")].rpartition("-")
    return normalize_name(name) == normalize_name(distribution) and file_version == version


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 - http(s) only
            return response.read()
    except (OSError, ValueError) as exc:
        raise GymError(f"cannot fetch {url}: {exc}") from exc


def _find_sdist(distribution: str, version: str, source: PluginSource) -> tuple[str, bytes]:
    """Where the sdist of ``distribution`` ``version`` is (a path or URL) and its bytes: looked up
    in the source's find-links, then its index (PyPI by default)."""
    pages = []
    for link in source.find_links:
        parsed = urllib.parse.urlparse(link)
        if parsed.scheme in ("", "file"):
            directory = Path(urllib.parse.unquote(parsed.path) if parsed.scheme else link)
            for path in sorted(directory.glob("*.tar.gz")) if directory.is_dir() else []:
                if _is_sdist_of(path.name, distribution, version):
                    return str(path), path.read_bytes()
        elif parsed.scheme in ("http", "https"):
            pages.append(link)
    pages.append(
        urllib.parse.urljoin((source.index_url or PYPI_SIMPLE).rstrip("/") + "/", normalize_name(distribution) + "/")
    )
    for page in pages:
        try:
            links = _Links()
            links.feed(_fetch(page).decode("utf-8", errors="replace"))
        except GymError:
            continue
        for href in links.hrefs:
            url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
            if not _is_sdist_of(urllib.parse.unquote(url.rsplit("/", 1)[-1]), distribution, version):
                continue
            data = _fetch(url)
            algorithm, _, expected = fragment.partition("=")
            if (
                algorithm in hashlib.algorithms_guaranteed
                and expected
                and hashlib.new(algorithm, data).hexdigest() != expected
            ):
                raise GymError(f"the sdist at {url} does not have the {algorithm} hash its index lists")
            return url, data
    where = ", ".join([*source.find_links, source.index_url or PYPI_SIMPLE])
    raise GymError(
        f"no sdist of {distribution} {version} in {where}: its tests ship in the sdist "
        "(`gym plugin build` makes one next to the wheel)"
    )


def published_sources(source: PluginSource, venv: Path, home: Path) -> Path:
    """The unpacked sdist of the plugin ``source`` installed in the venv at ``venv`` (the same
    version), kept under ``home/sources/<name>-<version>/``: where ``gym test`` finds its tests."""
    distribution = requirement_name(source.requirement or "")
    if not distribution:
        raise GymError(f"plugin {source.name!r} is not installed from a requirement")
    version = installed_version(venv, distribution)
    if version is None:
        raise GymError(f"{distribution} is not installed in the venv of {source.name} ({venv})")
    target = home / "sources" / f"{normalize_name(distribution)}-{version}"
    if (target / "pyproject.toml").is_file():
        return target
    where, data = _find_sdist(distribution, version, source)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as tmp:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(tmp, filter="data")  # no absolute paths, links out, devices
                else:  # Python < 3.11.4: refuse what the filter would
                    for member in tf.getmembers():
                        if (
                            member.name.startswith("/")
                            or ".." in Path(member.name).parts
                            or not (member.isfile() or member.isdir())
                        ):
                            raise GymError(f"{where}: refusing to unpack {member.name!r}")
                    tf.extractall(tmp)
        except (OSError, tarfile.TarError) as exc:
            raise GymError(f"cannot unpack the sdist {where}: {exc}") from exc
        tops = [p for p in Path(tmp).iterdir() if p.is_dir()]
        if len(tops) != 1 or not (tops[0] / "pyproject.toml").is_file():
            raise GymError(f"the sdist {where} does not hold one directory with a pyproject.toml")
        try:
            os.replace(tops[0], target)
        except OSError:
            if not (target / "pyproject.toml").is_file():  # not another `gym test` that got there first
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tops[0], target)
    return target
