"""Ray's processes in process groups of their own, for ``marketplace up``.

A private Ray runtime (``ray.init`` without an address) starts its daemons (GCS server, raylet,
their agents) as children of ``up`` in ``up``'s process group. Ray blocks SIGINT in them, so
Ctrl-C alone spares them, but a SIGTERM sent to the group (``kill -TERM -<pgid>``, systemd's
default ``KillMode=control-group``) kills them under the running app, whose actors and their
callers then fail noisily and whose shutdown waits on a runtime that is gone. In groups of their
own they get no signal meant for ``up``: ``up`` stops the app, then Ray (``ray.shutdown``), in
order.

Ray has no option for this; on Windows it does the same (``CREATE_NEW_PROCESS_GROUP`` in
``ray._private.services.ConsolePopen``), which is the class that starts every daemon, so the
group is added there. Safety is unchanged when ``up`` is killed: Ray's daemons carry a
parent-death signal (Ray's kernel fate-sharing) and the guardian finds them by ``up``'s marker
in their environment and by descent from ``up``.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def ray_processes_in_own_groups() -> None:
    """From now on, every process Ray's driver starts leads a process group of its own.

    Imports Ray: call it after :func:`marketplace.actors.ray_env.prepare_local_ray_environment`.
    """
    from ray._private import services

    popen: Any = getattr(services, "ConsolePopen", None)
    if popen is None:
        # A Ray without the class: its daemons share `up`'s group, as before.
        log.warning("cannot give Ray's processes their own process group (Ray changed)")
        return
    if getattr(popen, "own_process_group", False):
        return

    class OwnGroupPopen(popen):
        own_process_group = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    setattr(services, "ConsolePopen", OwnGroupPopen)  # noqa: B010 (a class, typed as such)
