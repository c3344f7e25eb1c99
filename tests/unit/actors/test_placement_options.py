"""Every kind of named actor is spread over a cluster's nodes and restarted wherever a node is
still alive (the multi-node tests in tests/integration/multinode show it on a real cluster)."""

from __future__ import annotations

import pytest

from marketplace.actors.indexer import INDEXER_SPEC
from marketplace.actors.job_worker import worker_spec
from marketplace.actors.keyed_shard import shard_spec
from marketplace.actors.notification_limiter import LIMITER_SPEC
from marketplace.actors.options import ACTOR_RESOURCE_UNITS, ActorSpec
from marketplace.shards import ShardFamily

SPECS = {
    "project shard": shard_spec(0, ShardFamily.PROJECT),
    "user shard": shard_spec(3, ShardFamily.USER),
    "job worker": worker_spec("verifier", 1),
    "indexer": INDEXER_SPEC,
    "notification limiter": LIMITER_SPEC,
}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_each_actor_kind_is_spread_detached_and_restarted_forever(kind: str) -> None:
    options = SPECS[kind].ray_options("ns")
    # Ray's default would put every actor a frontend creates on that frontend's node.
    assert options["scheduling_strategy"] == "SPREAD"
    # Detached actors belong to the cluster, not to the frontend that created them, and Ray
    # reschedules them on a live node when theirs dies, as long as restarts are unlimited.
    assert options["lifetime"] == "detached"
    assert options["max_restarts"] == -1
    # No CPU reserved: placement never waits for a free CPU, so a restart lands at once.
    assert options["num_cpus"] == 0


def test_a_spec_may_leave_placement_to_ray() -> None:
    spec = ActorSpec(name="x", cls=object, scheduling_strategy=None)
    assert "scheduling_strategy" not in spec.ray_options("ns")


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_actors_ask_for_the_actor_resource_when_one_is_configured(kind: str) -> None:
    # Without it they may go anywhere (one machine); with it, only to nodes advertising it.
    assert "resources" not in SPECS[kind].ray_options("ns")
    options = SPECS[kind].ray_options("ns", actor_resource="marketplace_actors")
    assert options["resources"] == {"marketplace_actors": ACTOR_RESOURCE_UNITS}
    # One slot each: what a node advertises is how many actors it may host.
    assert ACTOR_RESOURCE_UNITS == 1
