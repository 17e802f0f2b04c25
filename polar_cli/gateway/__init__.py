"""The gateway: asyncio server, sessions, upstream client and capture store."""
