"""Reporting: the audit trail, the loggers, the event log and everything that reads it."""
