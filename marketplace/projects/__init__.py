"""Projects: read models indexed from the chain (``read_models``) and their API shapes
(``models``)."""
