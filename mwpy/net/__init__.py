"""Sockets: the master's event loop, waiting without sleeping too soon, the file service."""
