"""The bearer token of a run: made, written where the run's clients find it, read back (a leaf
module: no gym imports).

``gym run`` generates one token per run (or takes ``auth_token`` from the config) and every server
of the run, the head included, requires ``Authorization: Bearer <token>`` on every route but
``GET /health`` (liveness, which says nothing but "up"). Without it, any local user could use a
model server as a proxy carrying the operator's API key, or read and drive other users' sessions.
gym's own clients send the token to the servers of their run, and to nothing else;
:class:`gym_core.asgi.BearerAuth` checks it on every request.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["AUTH_TOKEN_ENV", "new_token", "gym_home", "token_file", "write_token", "read_token", "token_for_head"]

AUTH_TOKEN_ENV = "GYM_AUTH_TOKEN"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def gym_home() -> Path:
    """``$GYM_HOME``, else the user cache directory of gym (``~/.cache/gym`` on Linux)."""
    env = os.environ.get("GYM_HOME")
    if env:
        return Path(env).expanduser().absolute()
    try:
        import platformdirs
    except ImportError:  # a server's own venv may lack it; the layout is the same on Linux
        return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym").absolute()
    return Path(platformdirs.user_cache_dir("gym")).absolute()


def token_file(home: Path, head_host: str, head_port: int) -> Path:
    """Where ``gym run`` leaves the token of the run whose head is at ``head_host:head_port``."""
    return home / "tokens" / f"{head_host.replace(':', '_')}_{head_port}"


def write_token(path: Path, token: str) -> None:
    """Write ``token`` readable by this user only (the directory too)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.chmod(path, 0o600)


def read_token(path: Path) -> str | None:
    """``$GYM_AUTH_TOKEN`` if set, else the token in ``path`` (None when there is none)."""
    if os.environ.get(AUTH_TOKEN_ENV):
        return os.environ[AUTH_TOKEN_ENV]
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def token_for_head(head_url: str) -> str | None:
    """The token of the run whose head server is at ``head_url``: ``$GYM_AUTH_TOKEN``, else the
    file ``gym run`` wrote (None when neither exists)."""
    from urllib.parse import urlsplit

    parts = urlsplit(head_url if "://" in head_url else f"http://{head_url}")
    return read_token(token_file(gym_home(), parts.hostname or "127.0.0.1", parts.port or 80))
