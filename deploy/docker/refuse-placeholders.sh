#!/bin/sh
# Refuses to go on while a variable of the environment still holds the CHANGE_ME placeholder of
# deploy/compose.env.example or deploy/kubernetes/*.env.example: compose's `preflight` service
# runs it with every secret before anything else starts, and the frontend entrypoint
# (marketplace-frontend.sh) before it starts a frontend. `${VAR:?}` in compose.yaml refuses a
# missing or empty value; a copied example's value is neither, so it would otherwise be used.
# Prints the variables' names (never their values) and exits 1; exits 0 when none holds it.
# Usage: refuse-placeholders.sh   (reads its own environment)
set -eu

placeholder="CHANGE_ME"
found=""
# Names only: a value may span lines, and a name is what `env` prints before the first "=".
for name in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | sort -u); do
    eval "value=\${$name-}"
    case "$value" in
        *"$placeholder"*) found="$found $name" ;;
    esac
done

if [ -n "$found" ]; then
    echo "refusing to start: still the $placeholder placeholder in:$found" >&2
    echo "put real values in deploy/.env (compose) or the secrets env files (Kubernetes)" >&2
    exit 1
fi
