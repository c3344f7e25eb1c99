"""Settings handed to actors keep the secrets the actors use (the JSON dump masks them)."""

from __future__ import annotations

from pydantic import SecretStr

from marketplace.actors.runtime import settings_for_actor
from marketplace.config import Settings
from marketplace.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY


def test_verifier_workers_get_the_signing_key() -> None:
    settings = Settings(verifier_private_key=SecretStr(DEV_VERIFIER_PRIVATE_KEY))
    rebuilt = Settings(**settings_for_actor(settings))
    assert rebuilt.verifier_private_key is not None
    assert rebuilt.verifier_private_key.get_secret_value() == DEV_VERIFIER_PRIVATE_KEY
    assert Settings(**settings_for_actor(Settings())).verifier_private_key is None
