"""Where the actors of a cluster live, asked by a process of its own (the test process may be
connected to the suite's single-node Ray runtime already, and a process joins one Ray cluster
only).

Run as ``python -m tests.integration.multinode.placement_driver <head address>`` from the
repository root with the cluster's environment. It connects as a driver, then answers each line
read on stdin with one line, :data:`PREFIX` and JSON (Ray prints its own notices to a driver's
stdout too, such as a node's death): the alive nodes (id, address, custom resources) and every
named actor (name, state, node id, pid, restarts), from the GCS's actor table, which needs no
dashboard. It says it is ready once SPREAD reaches both nodes
(:func:`tests.support.ray_cluster.spread_reaches`). It ends at the end of its input.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import ray
from ray._private import state

from tests.support.ray_cluster import spread_reaches

PREFIX = "placement: "


def snapshot() -> dict[str, Any]:
    nodes = [
        {
            "nodeId": n["NodeID"],
            "address": n["NodeManagerAddress"],
            "resources": sorted(k for k in n["Resources"] if k.startswith("node_")),
        }
        for n in ray.nodes()
        if n["Alive"]
    ]
    actors = [
        {
            "name": info["Name"],
            "className": info["ActorClassName"],
            "state": info["State"],
            "nodeId": info["Address"]["NodeID"],
            "pid": info["Pid"],
            "restarts": info["NumRestarts"],
        }
        for info in state.actors().values()
        if info["Name"] and info["State"] != "DEAD"
    ]
    return {"nodes": nodes, "actors": actors}


def main() -> None:
    ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False)
    # Before the frontends start: the cluster places actors on both nodes by then.
    asyncio.run(spread_reaches(2, 60))
    print(PREFIX + json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        print(PREFIX + json.dumps(snapshot()), flush=True)


if __name__ == "__main__":
    main()
