"""Identity and consent: wallet links, usernames, permissions, agent API keys, legal assent.

Domain rules live here as plain functions; the HTTP route modules under
``marketplace.http.routes`` stay thin, and SQL lives in ``marketplace.storage.repositories``.
"""
