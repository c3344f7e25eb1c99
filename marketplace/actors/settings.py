"""The settings an actor receives: one frozen, typed model, pickled by Ray once, when the actor
is created (a frontend builds it once too: :meth:`ActorRuntime.actor_settings`).

:class:`ActorSettings` is a :class:`~marketplace.config.Settings` (an actor hands it unchanged to
the domain code it hosts) without the secrets no actor uses (:data:`WITHHELD_FROM_ACTORS`:
authentication happens in the frontend). Every other secret stays a ``SecretStr`` across the
process boundary, and only the code that uses one reveals it (``get_secret_value()``: the SMTP
sender, the unsubscribe signer, the attestation signer). Unpickling runs no validator and reads
no environment variable, so an actor's values are exactly its creator's: a ``MARKETPLACE_*``
variable set on an actor's node changes nothing.
"""

from __future__ import annotations

from marketplace.config import Settings

# Secrets no actor uses: they stay in the frontend.
WITHHELD_FROM_ACTORS = ("jwt_secret", "scheduler_secret")


class ActorSettings(Settings):
    """:class:`Settings` as an actor gets them; build with :meth:`of`."""

    @classmethod
    def of(cls, settings: Settings, *, database_url: str | None = None) -> ActorSettings:
        """``settings`` without :data:`WITHHELD_FROM_ACTORS` (and with ``database_url`` when
        given: the one the frontend resolved). Values are copied as validated, not parsed
        again."""
        # Python mode: secrets stay SecretStr, paths Path, enums enums; the withheld fields
        # take their defaults (None).
        values = settings.model_dump(exclude=set(WITHHELD_FROM_ACTORS))
        fields_set = set(settings.model_fields_set) - set(WITHHELD_FROM_ACTORS)
        if database_url is not None:
            values["database_url"] = database_url
            fields_set.add("database_url")
        return cls.model_construct(fields_set, **values)
