"""Settings: the coordinator's (pydantic-settings) and the functions' (plain pydantic)."""
