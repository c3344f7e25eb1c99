"""Environment for a private local Ray runtime, set before Ray is imported (no Ray import here).

Ray reads ``RAY_AUTH_MODE`` and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when it is imported, so
the command that will start a local runtime (``marketplace up``/``serve`` without
``MARKETPLACE_RAY_ADDRESS``) calls :func:`prepare_local_ray_environment` first: token
authentication with a random token kept in the environment (never written to the home
directory), and the clusters flag off so a loopback node IP stays loopback. An operator's own
``RAY_AUTH_MODE`` is respected.
"""

from __future__ import annotations

import os
import secrets

RAY_CLUSTERS_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def prepare_local_ray_environment() -> None:
    os.environ[RAY_CLUSTERS_ENV] = "0"
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    if os.environ["RAY_AUTH_MODE"] == "token" and not os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_urlsafe(32)
