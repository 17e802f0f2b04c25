"""Sans-IO HTTP/1.1 and SSE: bytes in, events out. No sockets here."""
