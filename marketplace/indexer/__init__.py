"""Chain indexing: from contract state to the project and milestone read models."""
