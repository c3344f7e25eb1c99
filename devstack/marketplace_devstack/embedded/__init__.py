"""Real PostgreSQL and Redis servers started from their wheels for the embedded/dev mode."""
