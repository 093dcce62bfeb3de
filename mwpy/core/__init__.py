"""The master's decisions, without I/O: which task goes where, what a result means, the journal."""
