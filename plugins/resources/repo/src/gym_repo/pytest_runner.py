"""The hidden tests' pytest driver, run as a file in the verification's sandbox (never imported by gym).

Run as ``python -I -S -B pytest_runner.py`` in ``/tmp/work``, with pytest and its dependencies in
``/tmp/.gym/lib`` (gym ships them; the sandbox's interpreter has its standard library only). As
:mod:`gym_repo.runner` does for unittest, it reads a nonce from stdin and the job from
``/tmp/.gym/tests.json`` (the node ids, each test's time limit, the hidden test files' paths), then
imports every module of pytest, pluggy and their dependencies before any code of the workspace runs,
and runs each node id in a fork of its own that drops the nonce, sends its standard streams to
``/dev/null`` and runs ``pytest.main`` on that one id with gym's options only:

- ``-c /dev/null --rootdir /tmp/work --confcutdir /tmp/work``: no ini file of the workspace
  (``addopts``, ``pythonpath``, ``-p`` plugins) is read, no ``conftest.py`` above the workspace;
  ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` are dropped and plugin autoloading (entry points, which a
  ``.dist-info`` in the workspace could declare) is off;
- before each fork the driver puts the hidden test files back as they were, deletes every
  ``conftest.py`` that is not one of them and kills every process the earlier tests left, so no test
  changes what the next one runs; the fork reads no bytecode cache (``sys.pycache_prefix`` points
  where nothing can be written);
- in the fork, gym's recorder plugin takes a snapshot when collection starts (every attribute of
  pytest's, pluggy's and ``unittest``'s modules and classes and of ``builtins``, every registered
  plugin and hook implementation) and the verdict counts only when, after the run, none of them
  changed (a plugin registered by the code under test, a hook wrapped, ``_pytest``'s reporting
  patched), no plugin but a hidden ``conftest.py`` joined, exactly the one item asked for was
  collected and ran, and its setup, call and teardown passed (a skip, an ``xfail``, a deselection,
  an exit of the session fail);
- the verdict goes down a pipe with a token of the fork's own; the driver (non-dumpable) accepts
  it only from a fork that exited 0 after sending exactly one line with that token, and prints
  ``<nonce> {"test": id, "passed": bool, "detail": str}`` per test on stdout.

The parts it shares with the unittest driver (the nonce, the job, the processes killed, the fork and
its verdict's pipe) are in ``_driver.py``, shipped beside it.
"""

import sys

LIB = "/tmp/.gym/lib"
sys.path.insert(0, LIB)

import builtins  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import pkgutil  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import unittest  # noqa: E402, F401  (its modules are watched: imported before the workspace)

# The part both drivers share (gym_repo/_driver.py), run from its source: not imported (see its docstring).
DRIVER = types.ModuleType("_driver")
with open("/tmp/.gym/_driver.py", "rb") as _handle:
    exec(compile(_handle.read(), "/tmp/.gym/_driver.py", "exec"), vars(DRIVER))

for _name in [n for n in os.environ if n.startswith("PYTEST_")]:
    del os.environ[_name]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"

import pluggy  # noqa: E402
import pytest  # noqa: E402

WORK = DRIVER.WORK
ROOTS = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "unittest")
for _package in ("_pytest", "pluggy", "iniconfig", "packaging", "unittest"):
    _module = importlib.import_module(_package)
    for _info in pkgutil.walk_packages(_module.__path__, _package + "."):
        if _info.name.endswith(".__main__") or _info.name.startswith("unittest.test"):
            continue
        with contextlib.suppress(Exception):  # a module that needs what the sandbox lacks (pygments...)
            importlib.import_module(_info.name)

# Built-in plugins a hidden test never needs (reports, caches, debuggers): each costs its registration.
LEAN = [
    arg
    for name in (
        "cacheprovider",
        "junitxml",
        "pastebin",
        "stepwise",
        "setuponly",
        "setupplan",
        "faulthandler",
        "debugging",
    )
    for arg in ("-p", f"no:{name}")
]
main_pytest = pytest.main


def _owners():
    """The modules and classes of the framework whose attributes must not change, and builtins."""
    owners = [builtins]
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in ROOTS:
            continue
        owners.append(module)
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                owners.append(value)
    return owners


OWNERS = _owners()
FRAMEWORK_MODULES = {m.__name__: m for m in OWNERS if type(m) is type(sys) and m is not builtins}


def _snapshot(owners):
    return [(owner, dict(vars(owner))) for owner in owners]


def _changed(snapshot):
    changed = []
    for owner, before in snapshot:
        now = vars(owner)
        for name, value in before.items():
            if name not in now or now[name] is not value:
                changed.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return changed + DRIVER.hooked(FRAMEWORK_MODULES)


SNAPSHOT = _snapshot(OWNERS)


def _hooks(config):
    """Every registered plugin, and every hook's implementations."""
    manager = config.pluginmanager
    plugins = {id(p): p for p in manager.get_plugins()}
    impls = {}
    for name, caller in list(vars(manager.hook).items()):
        if isinstance(caller, pluggy.HookCaller):
            impls[name] = [
                (impl.plugin, impl.function, impl.hookwrapper, impl.wrapper) for impl in caller.get_hookimpls()
            ]
    return plugins, impls


class Recorder:
    """gym's plugin in the fork: what was collected, each phase's report, and the snapshot."""

    def __init__(self, test_id, hidden):
        self.test_id = test_id
        self.hidden = hidden
        self.config = None
        self.hooks = None
        self.collected = None
        self.reports = []
        self.problems = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session):
        self.config = session.config
        self.hooks = _hooks(session.config)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.collected = [item.nodeid for item in session.items]

    def pytest_collectreport(self, report):
        if report.failed:
            self.problems.append(f"collecting {report.nodeid or self.test_id} failed: {report.longreprtext}")

    def pytest_runtest_logreport(self, report):
        self.reports.append(
            (report.nodeid, report.when, report.outcome, hasattr(report, "wasxfail"), report.longreprtext)
        )

    def tampering(self):
        """What the code under test changed in the framework, if anything."""
        changed = _changed(SNAPSHOT)
        if self.config is None:
            return changed
        plugins, impls = self.hooks
        now_plugins, now_impls = _hooks(self.config)
        allowed = dict(plugins)
        for key, plugin in now_plugins.items():
            if key in plugins:
                continue
            path = os.path.realpath(str(getattr(plugin, "__file__", "") or ""))
            hidden = {os.path.realpath(p) for p in self.hidden}
            if getattr(plugin, "__name__", "").rpartition(".")[2] == "conftest" and path in hidden:
                allowed[key] = plugin  # a hidden conftest.py, registered as its directory is collected
            else:
                changed.append(f"a plugin registered: {getattr(plugin, '__name__', type(plugin).__name__)}")
        for key in plugins:
            if key not in now_plugins:
                changed.append("a plugin unregistered")
        for name, now in now_impls.items():
            before = impls.get(name, [])
            extra = [i for i in now if i not in before and id(i[0]) not in allowed]
            missing = [i for i in before if i not in now]
            if extra or missing:
                changed.append(f"the hook {name}")
        return changed

    def verdict(self, code):
        changed = self.tampering()
        if changed:
            return False, "the code under test changed the test framework: " + ", ".join(changed[:5])
        if self.problems:
            return False, self.problems[0]
        if self.collected != [self.test_id]:
            return False, f"{self.test_id} collected {self.collected or 'nothing'}, not that one test"
        phases = {}
        for nodeid, when, outcome, xfail, text in self.reports:
            if nodeid != self.test_id or when in phases:
                return False, f"an unexpected report: {nodeid} {when}"
            phases[when] = (outcome, xfail, text)
        for when in ("setup", "call", "teardown"):
            outcome, xfail, text = phases.get(when, ("missing", False, ""))
            if xfail:
                return False, f"xfail ({when}): {text}"
            if outcome != "passed":
                return False, f"{when} {outcome}: {text}" if text else f"{when} {outcome}"
        if code != 0:
            return False, f"pytest exited {int(code)}"
        return True, ""


def _child(test_id, hidden, nonce, verdict_fd, token):
    DRIVER.isolate(nonce)
    recorder = Recorder(test_id, hidden)
    args = ["-c", "/dev/null", "--rootdir", WORK, "--confcutdir", WORK, "-q", *LEAN, test_id]
    try:
        try:
            code = main_pytest(args, plugins=[recorder])
        except BaseException:
            passed, detail = False, traceback.format_exc(limit=3)
        else:
            passed, detail = recorder.verdict(code)
    except BaseException:
        passed, detail = False, "the driver failed"
    DRIVER.send(verdict_fd, token, passed, detail)


def _restore(hidden, keep):
    """The hidden test files as they were, no other ``conftest.py``, and no process of an earlier test
    (every process but this one and its ancestors, ``keep``)."""
    DRIVER.kill_others(keep)
    for root, dirs, files in os.walk(WORK):
        for name in dirs + files:
            path = os.path.join(root, name)
            if name == "conftest.py" and path not in hidden:
                with contextlib.suppress(OSError):
                    if os.path.isdir(path) and not os.path.islink(path):
                        _remove_tree(path)
                    else:
                        os.unlink(path)
    for path, data in hidden.items():
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                _remove_tree(path)
            elif os.path.lexists(path):
                os.unlink(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


def _remove_tree(path):
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files + dirs:
            full = os.path.join(root, name)
            with contextlib.suppress(OSError):
                os.rmdir(full) if os.path.isdir(full) and not os.path.islink(full) else os.unlink(full)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _run_one(test_id, nonce, timeout_s, hidden, keep):
    _restore(hidden, keep)
    return DRIVER.run_forked(lambda verdict_fd, token: _child(test_id, hidden, nonce, verdict_fd, token), timeout_s)


DRIVER.main(_run_one)
