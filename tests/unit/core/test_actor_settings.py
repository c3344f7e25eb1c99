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


def test_every_secret_reaches_actors_as_its_value_but_the_withheld_ones() -> None:
    """A secret setting added later needs no line of its own: none arrives masked."""
    from marketplace.actors.runtime import WITHHELD_FROM_ACTORS

    secrets = {
        name: info
        for name, info in Settings.model_fields.items()
        if "SecretStr" in str(info.annotation)
    }
    assert {"smtp_url", "notification_unsubscribe_secret", "verifier_private_key"} <= set(secrets)
    settings = Settings(
        jwt_secret=SecretStr("j" * 40),
        scheduler_secret=SecretStr("s" * 40),
        smtp_url=SecretStr("smtp://user:pa%40ss@mail.example:2525"),
        notification_unsubscribe_secret=SecretStr("u" * 40),
        verifier_private_key=SecretStr(DEV_VERIFIER_PRIVATE_KEY),
    )
    data = settings_for_actor(settings)
    for name in secrets:
        if name in WITHHELD_FROM_ACTORS:
            assert name not in data
        else:
            value = getattr(settings, name)
            assert data[name] == (value.get_secret_value() if value is not None else None), name
    assert "**********" not in str(data)
    Settings(**data)  # an actor rebuilds them
