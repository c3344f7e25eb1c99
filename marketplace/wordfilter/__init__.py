"""The word filter: the normalisation and term matching that moderation applies to messages, a
leaf that settings can use to check an operator's terms file at start-up."""
