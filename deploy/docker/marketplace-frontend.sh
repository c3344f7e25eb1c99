#!/bin/sh
# Starts a frontend that drives an existing Ray cluster.
#
# A Ray driver talks to the raylet of its own node, so a frontend outside the cluster cannot use
# `MARKETPLACE_RAY_ADDRESS=<head>:6379` by itself: this joins the container to the cluster as a
# node first (no CPUs, so no task that asks for one lands here), then execs `marketplace "$@"`
# (default: serve on 0.0.0.0:8080). With MARKETPLACE_RAY_ADDRESS empty or "auto" it only execs.
#
# Before that it refuses (exit 2) to start while a variable still holds the CHANGE_ME
# placeholder of an example env file (a Kubernetes Secret generated from a copied example would
# otherwise be used as is), and, with MARKETPLACE_REGISTRY_ADDRESS=devnet (compose's devnet
# profile), takes the registry address, chain id and start block from the deployment manifest
# the devnet-deploy service wrote, and the dev verifier key next to it when
# MARKETPLACE_VERIFIER_PRIVATE_KEY is empty (as `marketplace up` does).
#
# Environment: MARKETPLACE_RAY_ADDRESS (the head's GCS, host:port); RAY_NODE_IP (optional, the
# address other nodes reach this one at; Kubernetes passes the pod IP; `marketplace serve` joins
# through the node with that address, this one); RAY_AUTH_MODE and
# RAY_AUTH_TOKEN (the cluster's token, when token authentication is on); DEVNET_DEPLOYMENT_FILE
# (the devnet's manifest, default /devnet/deployment.json).
set -eu

if [ "$#" -eq 0 ]; then
    set -- serve --host 0.0.0.0 --port 8080
fi

# compose's preflight check, shipped beside this script (in the image: /usr/local/bin).
sh "$(dirname "$0")/refuse-placeholders.sh" || exit 2

if [ "${MARKETPLACE_REGISTRY_ADDRESS:-}" = "devnet" ]; then
    manifest="${DEVNET_DEPLOYMENT_FILE:-/devnet/deployment.json}"
    if [ ! -r "$manifest" ]; then
        echo "MARKETPLACE_REGISTRY_ADDRESS=devnet, but there is no deployment at $manifest:" \
            "start with 'docker compose --profile devnet up', or set the registry's address" >&2
        exit 2
    fi
    # "<registry> <chain id> <start block>" (the image has Python, not jq).
    fields="$(python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["registry"], d["chain_id"], d["start_block"])' "$manifest")"
    set -f
    # shellcheck disable=SC2086 # split on purpose: three words, globbing off
    set -- $fields "$@"
    set +f
    MARKETPLACE_REGISTRY_ADDRESS="$1"
    MARKETPLACE_CHAIN_ID="$2"
    MARKETPLACE_CHAIN_START_BLOCK="$3"
    shift 3
    export MARKETPLACE_REGISTRY_ADDRESS MARKETPLACE_CHAIN_ID MARKETPLACE_CHAIN_START_BLOCK
    key_file="$(dirname "$manifest")/dev-verifier-key"
    if [ -z "${MARKETPLACE_VERIFIER_PRIVATE_KEY:-}" ] && [ -r "$key_file" ]; then
        MARKETPLACE_VERIFIER_PRIVATE_KEY="$(cat "$key_file")"
        export MARKETPLACE_VERIFIER_PRIVATE_KEY
    fi
    echo "devnet: registry $MARKETPLACE_REGISTRY_ADDRESS on chain $MARKETPLACE_CHAIN_ID" \
        "from block $MARKETPLACE_CHAIN_START_BLOCK" >&2
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
