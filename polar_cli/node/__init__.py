"""The gateway node: stage pools (INIT -> READY -> RUN -> POSTRUN), the in-process gateway, container stages."""
