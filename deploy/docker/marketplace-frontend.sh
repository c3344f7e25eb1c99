#!/bin/sh
# Starts a frontend that drives an existing Ray cluster.
#
# A Ray driver talks to the raylet of its own node, so a frontend outside the cluster cannot use
# `MARKETPLACE_RAY_ADDRESS=<head>:6379` by itself: this joins the container to the cluster as a
# node first (no CPUs, so no task that asks for one lands here), then execs `marketplace "$@"`
# (default: serve on 0.0.0.0:8080). With MARKETPLACE_RAY_ADDRESS empty or "auto" it only execs.
#
# Environment: MARKETPLACE_RAY_ADDRESS (the head's GCS, host:port); RAY_NODE_IP (optional, the
# address other nodes reach this one at; Kubernetes passes the pod IP; `marketplace serve` joins
# through the node with that address, this one); RAY_AUTH_MODE and
# RAY_AUTH_TOKEN (the cluster's token, when token authentication is on).
set -eu

if [ "$#" -eq 0 ]; then
    set -- serve --host 0.0.0.0 --port 8080
fi

address="${MARKETPLACE_RAY_ADDRESS:-}"
if [ -n "$address" ] && [ "$address" != "auto" ]; then
    node_ip=""
    if [ -n "${RAY_NODE_IP:-}" ]; then
        node_ip="--node-ip-address=${RAY_NODE_IP}"
    fi
    # Retried: in compose and Kubernetes the head may still be starting.
    attempt=0
    until ray start --address="$address" --num-cpus=0 --disable-usage-stats $node_ip; do
        attempt=$((attempt + 1))
        if [ "$attempt" -ge 30 ]; then
            echo "could not join the Ray cluster at $address" >&2
            exit 1
        fi
        sleep 2
    done
fi

exec marketplace "$@"
