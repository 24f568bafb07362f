"""Feature schemas and ingestion: what the forecasters read, validated once."""
