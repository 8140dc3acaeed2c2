"""The frontier: owns the Redis data model (keys, Lua scripts, counters)."""
