"""Off-chain records (spec section 1.3): bid drafts, challenge-submission artifact registrations
and dispute evidence. Rules and shard operations live here, SQL in
``marketplace.storage.repositories``, HTTP in ``marketplace.http.routes``; see docs/records.md.
"""
