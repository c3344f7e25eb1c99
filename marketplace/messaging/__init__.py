"""Messaging (spec section 1.4, issue #12): project chat, direct messages, blocks and mutes,
message reports with the moderation admins' workflow. Rules and operations live here, SQL in
``marketplace.storage.repositories`` (``messages``, ``user_relations``, ``message_reports``),
HTTP in ``marketplace.http.routes.messaging``; see docs/messaging.md. The term filter and the
offense counters are the moderation capability's (``marketplace.moderation``).
"""
