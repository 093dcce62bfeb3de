"""Getting slaves: what the master publishes for them, the overseer, mwpy local, the slave bundle."""
