.PHONY: help setup up test lint format contracts schema
help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
setup:  ## install the venv and the chain tooling
	./scripts/setup
up:  ## run the service with embedded dependencies
	./scripts/up
test:  ## lint and run the whole test suite (what CI runs)
	./scripts/test
lint:  ## ruff check + format check + mypy
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/python -m mypy
format:  ## format the code
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .
contracts:  ## rebuild contract artifacts from contracts/*.sol
	node scripts/build_contracts.js
schema:  ## regenerate marketplace/storage/schema.sql from the migrations (the dev stack's tool)
	.venv/bin/python -m marketplace_devstack.schema --write
